package storage

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/routing"
)

// openRoot2 opens shard 2, root 2's whole span, on e.
func openRoot2(t *testing.T, e *Engine) *Shard {
	t.Helper()
	s, err := e.OpenShard(2, 2, []routing.Span{rootSpan(2)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openParentOn opens an engine in dir on fs (an 8 MiB cache, no logs;
// closed when the test ends) and shard 2 on it, root 2's whole span.
func openParentOn(t *testing.T, dir string, fs vfs.FS, copyWAL bool) (*Engine, *Shard) {
	t.Helper()
	e, err := Open(Options{Dir: dir, FS: fs, Logger: zap.NewNop(), CacheBytes: 8 << 20, CopyChildWAL: copyWAL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e, openRoot2(t, e)
}

// halves returns the two halves of root 2's span as the specs of a split
// into shards 3 and 4.
func halves() []ChildSpec {
	root := rootSpan(2)
	mid := root.Start + (root.End-root.Start)/2
	return []ChildSpec{{Shard: 3, Span: routing.Span{Start: root.Start, End: mid}}, {Shard: 4, Span: routing.Span{Start: mid, End: root.End}}}
}

// sameAsParent fails t unless each child holds as many documents of its
// span as the parent and none of its sibling's.
func sameAsParent(t *testing.T, parent *Shard, children []*Shard, specs []ChildSpec) {
	t.Helper()
	for i, c := range children {
		want, err := parent.CountKeys(specs[i].Span)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := c.CountKeys(specs[i].Span); err != nil || got != want {
			t.Errorf("child %d holds %d documents of its span (%v), the parent %d", c.ID(), got, err, want)
		}
		if got, err := c.CountKeys(specs[1-i].Span); err != nil || got != 0 {
			t.Errorf("child %d holds %d documents of its sibling's span (%v), want none", c.ID(), got, err)
		}
	}
}

// A split's children copy none of the parent's WAL: the parent is flushed
// after its log hold began, so the tables hold every write up to the
// flush and the log every write after the hold, and the catch-up brings
// the children to the parent. With the WAL copied (Pebble's Checkpoint),
// each child copied the parent's unflushed writes, both halves of the
// keyspace, and its open replayed and flushed them again (issue 15).
func TestChildrenCopyNoWAL(t *testing.T) {
	for _, concurrent := range []bool{false, true} {
		t.Run(fmt.Sprintf("concurrent=%v", concurrent), func(t *testing.T) {
			e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
			defer e.Close()
			parent := openRoot2(t, e)
			// ~1.5 MiB unflushed, below flushBeforeCheckpoint: copying
			// children would not have flushed the parent first.
			writeRandomDocs(t, parent, "before", 1500, 1024)
			parent.HoldLog()
			writeDocs(t, parent, "held", 300, 512) // logged, and in the WAL
			specs := halves()
			children, stats, err := e.CreateChildren(parent, specs, ChildExcise, concurrent)
			if err != nil {
				t.Fatal(err)
			}
			for i, st := range stats {
				if !st.OmittedWAL || st.Copied > 64<<10 {
					t.Errorf("child %d copied %d bytes (WAL omitted: %v), want only its MANIFEST and OPTIONS", specs[i].Shard, st.Copied, st.OmittedWAL)
				}
				if st.Seq != parent.Seq() {
					t.Errorf("child %d starts from sequence number %d, want the parent's %d (flushed just before)", specs[i].Shard, st.Seq, parent.Seq())
				}
			}
			writeDocs(t, parent, "after", 300, 512) // after the checkpoints: only in the log
			if _, _, err := e.CatchUp(parent, children, min(stats[0].Seq, stats[1].Seq)); err != nil {
				t.Fatal(err)
			}
			sameAsParent(t, parent, children, specs)
		})
	}
}

// A child without WAL loses the writes its parent had not flushed unless
// the log holds them: a parent whose log is not held is refused, and no
// directory is left behind.
func TestAChildWithoutWALNeedsTheLogHeld(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	parent := openRoot2(t, e)
	writeDocs(t, parent, "d", 200, 512)
	_, _, err := e.CreateChildren(parent, halves(), ChildExcise, true)
	if err == nil || !strings.Contains(err.Error(), "operation log is not held") {
		t.Fatalf("children of a parent whose log is not held: err %v, want a refusal", err)
	}
	for _, c := range halves() {
		if _, err := e.opts.FS.Stat(e.ShardDir(c.Shard)); err == nil {
			t.Errorf("%s left behind", e.ShardDir(c.Shard))
		}
	}
}

// A checkpoint without WAL reflects what the parent had flushed; if that
// ends before the log begins (the flush came before the hold), the writes
// between are in neither, and the child is refused rather than made
// without them.
func TestAChildWithoutWALRefusesAGapBeforeTheLog(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	parent := openRoot2(t, e)
	writeDocs(t, parent, "flushed", 100, 512)
	if err := parent.st.db.Flush(); err != nil {
		t.Fatal(err)
	}
	writeDocs(t, parent, "unflushed", 100, 512) // in neither the tables nor the log
	parent.HoldLog()
	spec := halves()[0]
	c, _, err := e.makeChild(parent, spec.Shard, spec.Span, ChildExcise, childFlush{omitWAL: true}, siblings{})
	if err == nil || !strings.Contains(err.Error(), "are in neither") {
		t.Fatalf("a child without the writes between the flush and the hold: made %v, err %v; want a refusal", c != nil, err)
	}
	if _, err := e.opts.FS.Stat(e.ShardDir(spec.Shard)); err == nil {
		t.Errorf("%s left behind", e.ShardDir(spec.Shard))
	}
}
