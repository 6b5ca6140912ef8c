package storage

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/shardsplit/shardsplit/routing"
	"go.uber.org/zap"
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
			h := newHalfExcise(t, "/data", errorfs.Wrap(fs, inj), side, writeDocs)
			names, err := fs.List(h.s.st.dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				if strings.HasSuffix(n, ".sst") {
					tables = append(tables, fs.PathJoin(h.s.st.dir, n))
				}
			}
			inj.armed.Store(true)
			h.excise(t, "failing table reads", func() { inj.armed.Store(false) })
			if inj.hits.Load() == 0 {
				t.Fatalf("no table read failed: the test no longer reaches the excise's reads")
			}
		})
	}
}

// halfExcise is the excise tests' store: shard 2 with 3000 documents
// flushed into one table and its sequence number read (the table open,
// its index cached, as trimChildStore's readSeq leaves it); the excise
// cuts one half of its span and keeps the other, which held want
// documents.
type halfExcise struct {
	s         *Shard
	kept, cut routing.Span
	want      int
}

// newHalfExcise writes the documents with write; side names the half kept.
func newHalfExcise(t *testing.T, dir string, fs vfs.FS, side string, write func(*testing.T, *Shard, string, int, int)) halfExcise {
	t.Helper()
	_, s := openParentOn(t, dir, fs, Options{})
	write(t, s, "d", 3000, 1024)
	root := rootSpan(2)
	mid := root.Start + (root.End-root.Start)/2
	h := halfExcise{s: s, kept: routing.Span{Start: root.Start, End: mid}, cut: routing.Span{Start: mid, End: root.End}}
	if side == "right" {
		h.kept, h.cut = h.cut, h.kept
	}
	// Counted in the memtable, so no table block is cached yet.
	var err error
	if h.want, err = s.CountKeys(h.kept); err != nil || h.want == 0 {
		t.Fatalf("documents in the kept half before the excise: %d, %v", h.want, err)
	}
	if err := s.st.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := readSeq(s.st.db, 2); err != nil {
		t.Fatal(err)
	}
	return h
}

// excise cuts the cut half, calls after, and fails t if the excise
// returned nil while the kept half, still readable, lost documents; what
// names the damage done to the store.
func (h halfExcise) excise(t *testing.T, what string, after func()) {
	t.Helper()
	lo, hi := SpanBounds(2, h.cut)
	before := h.s.st.cfs.readFailures.Load()
	exciseErr := h.s.st.excise(lo, hi)
	counted := h.s.st.cfs.readFailures.Load() - before
	after()
	// A table the excise dropped is not read at all; one it kept is,
	// and may fail to read (the damage): then only the excise's answer
	// can be judged.
	got, err := h.s.CountKeys(h.kept)
	t.Logf("excise with %s (%d failed reads counted): %v; kept half holds %d of %d documents (%v)", what, counted, exciseErr, got, h.want, err)
	if exciseErr == nil && err == nil && got != h.want {
		t.Fatalf("the excise returned nil with %s, and the half it keeps lost %d of %d documents", what, h.want-got, h.want)
	}
}

// An excise that overlaps unflushed writes is queued behind them (Pebble's
// flushable ingest) and cuts the tables when it is flushed, in the
// background: outside the window in which store.excise watches for failed
// reads. A child's memtable is empty when it is trimmed unless the flush
// of the WAL it copied failed in Open; store.excise then flushes before it
// returns, so the cut is watched too.
func TestAQueuedExciseIsCutBeforeItReturns(t *testing.T) {
	_, s := openParentOn(t, "/data", vfs.NewMem(), Options{})
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

// A table read that comes up short fails Pebble's seek as surely as EIO:
// the file returns the bytes it has and io.EOF, and Pebble's readable
// (objstorageprovider fileReadable.ReadAt) passes io.EOF up as the block
// read's error. The excise's point seek then reads as "no key on this
// side", and that half of the table is dropped (the same path as
// TestAReadErrorDuringAnExciseFailsIt). retirableFile.ReadAt must count
// it: io.EOF from ReadAt is a failure unless the buffer was filled.
//
// The table is truncated on a real disk after the store opened it (its
// reader, with the size it had, is in the file cache): the next block
// reads past the new end get (n < len(p), io.EOF).
func TestAShortTableReadDuringAnExciseFailsIt(t *testing.T) {
	for _, side := range []string{"left", "right"} {
		t.Run("keeps the "+side+" half", func(t *testing.T) {
			h := newHalfExcise(t, filepath.Join(t.TempDir(), "data"), vfs.Default, side, writeRandomDocs)
			eachTable(t, h.s.st.dir, func(p string, f *os.File, size int64) {
				// Keep the first 4 KiB: every data block near the
				// excise's bounds now lies past the end of the file.
				if err := f.Truncate(min(size, 4096)); err != nil {
					t.Fatal(err)
				}
			})
			h.excise(t, "truncated tables", func() {})
		})
	}
}

// A table block that fails its checksum fails the excise's seek too, and
// the read under it succeeded: only Pebble's DataCorruption event says so.
// store.excise must count it (the event's hook in pebbleOptions). The
// table's middle is overwritten on disk after the store opened it (its
// index cached), so the blocks the excise seeks in are corrupt.
func TestACorruptTableDuringAnExciseFailsIt(t *testing.T) {
	for _, side := range []string{"left", "right"} {
		t.Run("keeps the "+side+" half", func(t *testing.T) {
			h := newHalfExcise(t, filepath.Join(t.TempDir(), "data"), vfs.Default, side, writeRandomDocs)
			eachTable(t, h.s.st.dir, func(p string, f *os.File, size int64) {
				// Garbage over the middle half: the data blocks near the
				// excise's bounds, not the footer and index at the end.
				junk := make([]byte, size/2)
				for i := range junk {
					junk[i] = byte(i*7 + 1)
				}
				if _, err := f.WriteAt(junk, size/4); err != nil {
					t.Fatal(err)
				}
			})
			h.excise(t, "corrupt tables", func() {})
		})
	}
}

// eachTable calls damage with every table file in dir, opened for
// writing, and fails t if there is none.
func eachTable(t *testing.T, dir string, damage func(path string, f *os.File, size int64)) {
	t.Helper()
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	tables := 0
	for _, n := range names {
		if !strings.HasSuffix(n.Name(), ".sst") {
			continue
		}
		p := filepath.Join(dir, n.Name())
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		damage(p, f, fi.Size())
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		tables++
	}
	if tables == 0 {
		t.Fatal("no table to damage")
	}
}

// store.excise watches only the excises it makes (and the flush of one it
// queued). Pebble cuts tables with the same unchecked seeks in two more
// places, which must stay off for that to hold: a delete-only compaction
// that excises part of a table under a range deletion (compaction.go,
// applyHintOnFile; the stores write range deletions: the log trim,
// destroySharedShard, LinkShard), and an ingest that splits a table around
// the ingested one (ingest.go, ingestSplit; merges ingest). Either would cut
// a serving store's tables in the background, where a failed seek loses
// documents with no one to tell.
func TestNoBackgroundExciseIsEnabled(t *testing.T) {
	opts := storeOptions{logger: zap.NewNop(), fs: vfs.NewMem()}.pebbleOptions(newHoldScheduler(false, nil), &cancelFS{FS: vfs.NewMem()})
	if f := opts.Experimental.EnableDeleteOnlyCompactionExcises; f != nil && f() {
		t.Error("delete-only compactions excise tables (Experimental.EnableDeleteOnlyCompactionExcises)")
	}
	if f := opts.Experimental.IngestSplit; f != nil && f() {
		t.Error("ingests split tables (Experimental.IngestSplit)")
	}
}
