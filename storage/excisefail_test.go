package storage

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/shardsplit/shardsplit/routing"
)

// tableReadsFail fails, once armed, every read of a table file the store
// held when armed (*tables): the excise's seeks fail, not the flush that
// reads back the table it wrote.
func tableReadsFail(tables *[]string) *failAlways {
	return &failAlways{
		match: func(op errorfs.Op) bool {
			return (op.Kind == errorfs.OpFileReadAt || op.Kind == errorfs.OpFileRead) && slices.Contains(*tables, op.Path)
		},
		fail: func(op errorfs.Op) error { return fmt.Errorf("injected: read %s: %w", op.Path, syscall.EIO) },
	}
}

// An excise that cannot read the table it cuts must fail, not drop what it
// keeps. Pebble's exciseTable opens a table that straddles the span to find
// the tight bounds of what remains (determineLeftTableBounds,
// determineRightTableBounds), and takes a failed seek for "no key on this
// side": the remaining half is dropped with the excised one, and Excise
// returns nil. A split's child trims its checkpoint with two excises, so a
// read error there lost the documents of its own span (simulation seed 274:
// "check at table v13: k5 = \"\"", with the child's sequence number read
// before the excise). The excise must fail, and then the child is thrown
// away and the parent serves.
func TestAReadErrorDuringAnExciseFailsIt(t *testing.T) {
	for _, side := range []string{"left", "right"} {
		t.Run("keeps the "+side+" half", func(t *testing.T) {
			var tables []string
			inj := tableReadsFail(&tables)
			fs := vfs.NewMem()
			_, s := openParentOn(t, "/data", errorfs.Wrap(fs, inj), false)
			writeDocs(t, s, "d", 3000, 1024)
			root := rootSpan(2)
			mid := root.Start + (root.End-root.Start)/2
			kept, cut := routing.Span{Start: root.Start, End: mid}, routing.Span{Start: mid, End: root.End}
			if side == "right" {
				kept, cut = cut, kept
			}
			// Counted in the memtable, so no table block is cached yet.
			want, err := s.CountKeys(kept)
			if err != nil || want == 0 {
				t.Fatalf("documents in the kept half before the excise: %d, %v", want, err)
			}
			if err := s.st.db.Flush(); err != nil {
				t.Fatal(err)
			}
			// As trimChildStore does: read the sequence number first, which
			// opens the table (its index now cached) and reads one block.
			if _, err := readSeq(s.st.db, 2); err != nil {
				t.Fatal(err)
			}
			names, err := fs.List(s.st.dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				if strings.HasSuffix(n, ".sst") {
					tables = append(tables, fs.PathJoin(s.st.dir, n))
				}
			}
			lo, hi := SpanBounds(2, cut)
			inj.armed.Store(true)
			exciseErr := s.st.excise(lo, hi)
			inj.armed.Store(false)
			got, err := s.CountKeys(kept)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("excise with failing table reads (%d failed reads): %v; kept half holds %d of %d documents", inj.hits.Load(), exciseErr, got, want)
			if exciseErr == nil && got != want {
				t.Fatalf("the excise returned nil after %d failed table reads, and the half it keeps lost %d of %d documents", inj.hits.Load(), want-got, want)
			}
			if inj.hits.Load() == 0 {
				t.Fatalf("no table read failed: the test no longer reaches the excise's reads")
			}
		})
	}
}

// An excise that overlaps unflushed writes is queued behind them (Pebble's
// flushable ingest) and cuts the tables when it is flushed, in the
// background: outside the window in which store.excise watches for failed
// reads. A child's memtable is empty when it is trimmed unless the flush
// of the WAL it copied failed in Open; store.excise then flushes before it
// returns, so the cut is watched too.
func TestAQueuedExciseIsCutBeforeItReturns(t *testing.T) {
	_, s := openParentOn(t, "/data", vfs.NewMem(), false)
	writeDocs(t, s, "d", 3000, 1024)
	if err := s.st.db.Flush(); err != nil {
		t.Fatal(err)
	}
	root := rootSpan(2)
	cut := routing.Span{Start: root.Start + (root.End-root.Start)/2, End: root.End}
	var ops []Op
	for i := 0; len(ops) < 10; i++ {
		if op := opFor(fmt.Sprintf("late-%d", i), OpIndex, "x"); op.Root == 2 && cut.Contains(op.Key) {
			ops = append(ops, op)
		}
	}
	if _, err := s.Write(ops, nil); err != nil {
		t.Fatal(err)
	}
	lo, hi := SpanBounds(2, cut)
	if err := s.st.excise(lo, hi); err != nil {
		t.Fatal(err)
	}
	if n := s.st.db.Metrics().MemTable.Count; n != 1 {
		t.Fatalf("after the excise, %d memtables: the excise is still queued, and will cut the tables after store.excise returned", n)
	}
	if n, err := s.CountKeys(cut); err != nil || n != 0 {
		t.Fatalf("documents in the excised half: %d, %v", n, err)
	}
}
