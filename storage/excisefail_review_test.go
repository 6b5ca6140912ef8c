package storage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
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
