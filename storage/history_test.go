package storage

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/routing"
)

// memtableParent opens shard 2 on e with flushed documents, then writes,
// overwrites and deletes documents that stay in its memtable, holds its
// log as a split does, and writes once more (into the log). It returns
// the parent, the two halves of its span, and how many writes the
// memtable took between the flush and the hold.
func memtableParent(t *testing.T, e *Engine) (*Shard, []ChildSpec, int) {
	t.Helper()
	parent := openShard(t, e, 2, 2, rootSpan(2))
	ids := idsInRoot(2, 400)
	write := func(id string, kind OpKind, v string) {
		t.Helper()
		if _, err := parent.Write([]Op{opFor(id, kind, v)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids[:200] {
		write(id, OpIndex, "flushed "+id)
	}
	if err := parent.st.db.Flush(); err != nil {
		t.Fatal(err)
	}
	unflushed := 0
	for i, id := range ids[:300] {
		switch {
		case i >= 200: // new documents
			write(id, OpIndex, "memtable "+id)
		case i%3 == 0: // flushed documents changed
			write(id, OpIndex, "changed "+id)
		case i%3 == 1: // and deleted
			write(id, OpDelete, "")
		default:
			continue
		}
		unflushed++
	}
	parent.HoldLog()
	for _, id := range ids[300:] {
		write(id, OpIndex, "logged "+id)
	}
	root := rootSpan(2)
	mid := root.Start + (root.End-root.Start)/2
	return parent, []ChildSpec{{Shard: 3, Span: routing.Span{Start: root.Start, End: mid}}, {Shard: 4, Span: routing.Span{Start: mid, End: root.End}}}, unflushed
}

// sameDocs fails t unless child holds exactly the documents parent holds
// in span, with their values and sequence numbers.
func sameDocs(t *testing.T, parent, child *Shard, span routing.Span) {
	t.Helper()
	var want []Doc
	if err := parent.ScanSpan(span, func(d Doc) error {
		d.Source = slices.Clone(d.Source)
		want = append(want, d)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got := docsOf(t, child)
	if len(got) != len(want) {
		t.Errorf("child %d holds %d documents, the parent %d in %v", child.ID(), len(got), len(want), span)
	}
	for i := range min(len(got), len(want)) {
		g, w := got[i], want[i]
		if g.ID != w.ID || g.Seq != w.Seq || string(g.Source) != string(w.Source) {
			t.Errorf("child %d document %d is %s@%d %q, the parent's %s@%d %q", child.ID(), i, g.ID, g.Seq, g.Source, w.ID, w.Seq, w.Source)
			return
		}
	}
}

// A split's children are made from the parent's last flushed state
// without flushing it, and every write its memtable held at the split's
// start is in them: the tables' sequence number is the exact cut, and the
// retained history replays everything above it up to the log hold's
// start. A replay that began one sequence number too high would lose the
// first write after the flushed state; one that began at the hold would
// lose every memtable write.
func TestChildrenFromTheFlushedStateHoldTheMemtablesWrites(t *testing.T) {
	for _, concurrent := range []bool{false, true} {
		t.Run(fmt.Sprintf("concurrent=%v", concurrent), func(t *testing.T) {
			e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
			defer e.Close()
			parent, specs, unflushed := memtableParent(t, e)
			flushes := parent.FlushesEnded()
			children, stats, err := e.CreateChildren(parent, specs, ChildExcise, concurrent)
			if err != nil {
				t.Fatal(err)
			}
			if n := parent.FlushesEnded() - flushes; n != 0 {
				t.Errorf("the parent was flushed %d times for its children, want never", n)
			}
			logged, _ := parent.loggedAfter()
			replayed := 0
			for i, st := range stats {
				if !st.Unflushed || st.Flush != 0 {
					t.Errorf("child %d: unflushed %v, flush %v: want it made from the flushed state", specs[i].Shard, st.Unflushed, st.Flush)
				}
				if st.Seq != logged {
					t.Errorf("child %d reflects the parent up to %d, want the log's start %d", specs[i].Shard, st.Seq, logged)
				}
				replayed += st.History
			}
			if replayed != unflushed {
				t.Errorf("the children took %d writes from the history, the memtable held %d", replayed, unflushed)
			}
			for i, c := range children {
				if _, _, err := e.CatchUp(parent, []*Shard{c}, stats[i].Seq); err != nil {
					t.Fatal(err)
				}
				sameDocs(t, parent, c, specs[i].Span)
			}
		})
	}
}

// The history holds exactly the writes the tables lack: a flush's end
// drops what it put in a table, and the floor is the flushed state's
// sequence number.
func TestTheRetainedHistoryIsTrimmedAtEachFlush(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	s := openShard(t, e, 2, 2, rootSpan(2))
	for i, id := range idsInRoot(2, 50) {
		if _, err := s.Write([]Op{opFor(id, OpIndex, "v")}, nil); err != nil {
			t.Fatal(err)
		}
		if i == 29 {
			if err := s.st.db.Flush(); err != nil {
				t.Fatal(err)
			}
			if n := s.st.hist.retained(); n != 0 {
				t.Fatalf("after a flush the history holds %d writes, want none", n)
			}
		}
	}
	if n := s.st.hist.retained(); n != 20 {
		t.Errorf("the history holds %d writes, want the 20 since the flush", n)
	}
	floor, ok, err := s.pinHistory()
	if err != nil || !ok {
		t.Fatalf("pin: %v, %v", ok, err)
	}
	defer s.st.hist.unpin()
	if floor != 30 {
		t.Errorf("the history's floor is %d, want the flushed state's 30", floor)
	}
}

// A child's own store holds writes its history never saw (its adopted
// sequence number, the excise), so a split of it before its first flush
// flushes it, as every split did before; once a flush holds them, its
// children are made from the flushed state. Both hold every document.
func TestANewChildIsSplitFromItsFlushedStateOnceItFlushed(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	parent, specs, _ := memtableParent(t, e)
	children, stats, err := e.CreateChildren(parent, specs, ChildExcise, true)
	if err != nil {
		t.Fatal(err)
	}
	child := children[0]
	if _, _, err := e.CatchUp(parent, []*Shard{child}, stats[0].Seq); err != nil {
		t.Fatal(err)
	}
	var mine []string
	for _, id := range idsInRoot(2, 600)[400:] {
		op := opFor(id, OpIndex, "child "+id)
		if !specs[0].Span.Contains(op.Key) {
			continue
		}
		if _, err := child.Write([]Op{op}, nil); err != nil {
			t.Fatal(err)
		}
		mine = append(mine, id)
	}
	span := specs[0].Span
	mid := span.Start + (span.End-span.Start)/2
	grand := []ChildSpec{{Shard: 5, Span: routing.Span{Start: span.Start, End: mid}}, {Shard: 6, Span: routing.Span{Start: mid, End: span.End}}}
	split := func(wantUnflushed bool) {
		t.Helper()
		child.HoldLog()
		defer func() { _ = child.ReleaseLog() }()
		gc, gs, err := e.CreateChildren(child, grand, ChildExcise, true)
		if err != nil {
			t.Fatal(err)
		}
		for i, g := range gc {
			if gs[i].Unflushed != wantUnflushed {
				t.Errorf("grandchild %d made from the flushed state: %v, want %v", g.ID(), gs[i].Unflushed, wantUnflushed)
			}
			if _, _, err := e.CatchUp(child, []*Shard{g}, gs[i].Seq); err != nil {
				t.Fatal(err)
			}
			sameDocs(t, child, g, grand[i].Span)
			if err := e.DestroyShard(g.ID()); err != nil {
				t.Fatal(err)
			}
		}
	}
	split(false)
	if err := child.st.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := child.Write([]Op{opFor(mine[0], OpDelete, "")}, nil); err != nil {
		t.Fatal(err)
	}
	split(true)
}

// A reopened store's tables hold everything its WAL held (Pebble's open
// flushes it), and trimming the operation log changes nothing a child
// copies: a shard split right after its reopen and a cancelled split's
// trim is split from its flushed state.
func TestAReopenedShardIsSplitFromItsFlushedState(t *testing.T) {
	fs := vfs.NewMem()
	open := func() (*Engine, *Shard) {
		e := openEngine(t, Options{Dir: "/data", FS: fs, CacheBytes: 8 << 20})
		return e, openShard(t, e, 2, 2, rootSpan(2))
	}
	e, s := open()
	ids := idsInRoot(2, 200)
	for _, id := range ids[:100] {
		if _, err := s.Write([]Op{opFor(id, OpIndex, "before "+id)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e, s = open()
	defer e.Close()
	s.HoldLog() // a split that was cancelled: its release trims the log
	if err := s.ReleaseLog(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids[100:] {
		if _, err := s.Write([]Op{opFor(id, OpIndex, "after "+id)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	s.HoldLog()
	root := rootSpan(2)
	mid := root.Start + (root.End-root.Start)/2
	specs := []ChildSpec{{Shard: 3, Span: routing.Span{Start: root.Start, End: mid}}, {Shard: 4, Span: routing.Span{Start: mid, End: root.End}}}
	children, stats, err := e.CreateChildren(s, specs, ChildExcise, true)
	if err != nil {
		t.Fatal(err)
	}
	replayed := 0
	for i, c := range children {
		if !stats[i].Unflushed {
			t.Errorf("child %d: its parent was flushed first, want it made from the flushed state", c.ID())
		}
		replayed += stats[i].History
		sameDocs(t, s, c, specs[i].Span)
	}
	if replayed != 100 {
		t.Errorf("the children took %d writes from the history, want the 100 since the reopen", replayed)
	}
}
