package storage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/shardsplit/shardsplit/routing"
	"go.uber.org/zap"
)

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
			dir := t.TempDir()
			_, s := openParentOn(t, filepath.Join(dir, "data"), vfs.Default, false)
			writeRandomDocs(t, s, "d", 3000, 1024)
			root := rootSpan(2)
			mid := root.Start + (root.End-root.Start)/2
			kept, cut := routing.Span{Start: root.Start, End: mid}, routing.Span{Start: mid, End: root.End}
			if side == "right" {
				kept, cut = cut, kept
			}
			want, err := s.CountKeys(kept)
			if err != nil || want == 0 {
				t.Fatalf("documents in the kept half before the excise: %d, %v", want, err)
			}
			if err := s.st.db.Flush(); err != nil {
				t.Fatal(err)
			}
			if _, err := readSeq(s.st.db, 2); err != nil {
				t.Fatal(err)
			}
			names, err := os.ReadDir(s.st.dir)
			if err != nil {
				t.Fatal(err)
			}
			var tables int
			for _, n := range names {
				if !strings.HasSuffix(n.Name(), ".sst") {
					continue
				}
				p := filepath.Join(s.st.dir, n.Name())
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				// Keep the first 4 KiB: every data block near the
				// excise's bounds now lies past the end of the file.
				if err := os.Truncate(p, min(fi.Size(), 4096)); err != nil {
					t.Fatal(err)
				}
				tables++
			}
			if tables == 0 {
				t.Fatal("no table to truncate")
			}
			lo, hi := SpanBounds(2, cut)
			before := s.st.cfs.readFailures.Load()
			exciseErr := s.st.excise(lo, hi)
			counted := s.st.cfs.readFailures.Load() - before
			if exciseErr != nil {
				t.Logf("excise with truncated tables (%d failed reads counted): %v", counted, exciseErr)
				return
			}
			// The excise says it kept the other half: it must still be
			// there. Reading it needs the truncated table; a table the
			// excise dropped is not read at all.
			got, err := s.CountKeys(kept)
			t.Logf("excise with truncated tables returned nil (%d failed reads counted); kept half: %d of %d documents, %v", counted, got, want, err)
			if err == nil && got != want {
				t.Fatalf("the excise returned nil after reading a truncated table, and the half it keeps lost %d of %d documents", want-got, want)
			}
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
			dir := t.TempDir()
			_, s := openParentOn(t, filepath.Join(dir, "data"), vfs.Default, false)
			writeRandomDocs(t, s, "d", 3000, 1024)
			root := rootSpan(2)
			mid := root.Start + (root.End-root.Start)/2
			kept, cut := routing.Span{Start: root.Start, End: mid}, routing.Span{Start: mid, End: root.End}
			if side == "right" {
				kept, cut = cut, kept
			}
			want, err := s.CountKeys(kept)
			if err != nil || want == 0 {
				t.Fatalf("documents in the kept half before the excise: %d, %v", want, err)
			}
			if err := s.st.db.Flush(); err != nil {
				t.Fatal(err)
			}
			if _, err := readSeq(s.st.db, 2); err != nil {
				t.Fatal(err)
			}
			names, err := os.ReadDir(s.st.dir)
			if err != nil {
				t.Fatal(err)
			}
			var tables int
			for _, n := range names {
				if !strings.HasSuffix(n.Name(), ".sst") {
					continue
				}
				p := filepath.Join(s.st.dir, n.Name())
				f, err := os.OpenFile(p, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				fi, err := f.Stat()
				if err != nil {
					t.Fatal(err)
				}
				// Garbage over the middle half: the data blocks near the
				// excise's bounds, not the footer and index at the end.
				junk := make([]byte, fi.Size()/2)
				for i := range junk {
					junk[i] = byte(i*7 + 1)
				}
				if _, err := f.WriteAt(junk, fi.Size()/4); err != nil {
					t.Fatal(err)
				}
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
				tables++
			}
			if tables == 0 {
				t.Fatal("no table to corrupt")
			}
			lo, hi := SpanBounds(2, cut)
			before := s.st.cfs.readFailures.Load()
			exciseErr := s.st.excise(lo, hi)
			counted := s.st.cfs.readFailures.Load() - before
			if exciseErr != nil {
				t.Logf("excise with corrupt tables (%d failures counted): %v", counted, exciseErr)
				return
			}
			got, err := s.CountKeys(kept)
			t.Logf("excise with corrupt tables returned nil (%d failures counted); kept half: %d of %d documents, %v", counted, got, want, err)
			if err == nil && got != want {
				t.Fatalf("the excise returned nil over a corrupt table, and the half it keeps lost %d of %d documents", want-got, want)
			}
		})
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
