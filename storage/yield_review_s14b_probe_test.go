package storage

import (
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Probe (passes): a file wrapped in yieldFile, alone or around a
// cancelFile or pacedFile, still reports the OS file's descriptor (Fd,
// which Pebble's syncing file and Prefetch use) and forwards Preallocate:
// the wrappers embed vfs.File, and Pebble v2.1.7 type-asserts no optional
// interface on a vfs.File it gets from Create.
func TestReviewS14bYieldFileForwardsFd(t *testing.T) {
	dir := t.TempDir()
	c := &cancelFS{FS: vfs.Default, dir: dir, pacer: newFlushPacer(DefaultSplitFlushRate), yieldHook: func() {}}
	c.paced.Add(1)
	for _, cat := range []vfs.DiskWriteCategory{compactionWriteCategory, flushWriteCategory, "pebble-manifest"} {
		f, err := c.Create(filepath.Join(dir, string(cat)), cat)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := f.(yieldFile); !ok {
			t.Errorf("%s: %T, not a yieldFile", cat, f)
		}
		if f.Fd() == vfs.InvalidFd {
			t.Errorf("%s: %T hides the descriptor", cat, f.(yieldFile).File)
		}
		if err := f.Preallocate(0, 4096); err != nil {
			t.Errorf("%s: preallocate: %v", cat, err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
