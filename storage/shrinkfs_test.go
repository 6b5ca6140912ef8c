package storage

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// shrinkFixture writes a 40 MiB file in a real directory and returns the
// store filesystem over it, the file's name and its content.
func shrinkFixture(t *testing.T, retired bool) (*cancelFS, string, []byte) {
	t.Helper()
	dir := t.TempDir()
	name := filepath.Join(dir, "000862.sst")
	data := bytes.Repeat([]byte("0123456789abcdef"), (40<<20)/16)
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
	c := &cancelFS{FS: vfs.Default}
	if retired {
		c.retire()
	}
	return c, name, data
}

// removedSize removes name through c while holding it open, checks that
// it is gone, and returns the size the open file had at its unlink.
func removedSize(t *testing.T, c *cancelFS, name string) int64 {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := c.Remove(name); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(name); !os.IsNotExist(err) {
		t.Fatalf("%s still exists after Remove (%v)", name, err)
	}
	info, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}

// A retired store's file is freed in steps before its unlink: a reader
// that still holds it open sees it shortened to at most one step.
func TestARetiredStoreFreesLargeFilesInSteps(t *testing.T) {
	c, name, _ := shrinkFixture(t, true)
	if size := removedSize(t, c, name); size > shrinkStep {
		t.Errorf("the removed file was unlinked at %d bytes, want at most %d (freed in steps)", size, shrinkStep)
	}
}

// A file with another link (a parent's table hard-linked into a child) is
// only unlinked: truncating it would cut the child's copy.
func TestARetiredStoreKeepsFilesLinkedElsewhere(t *testing.T) {
	c, name, data := shrinkFixture(t, true)
	child := filepath.Join(filepath.Dir(name), "child-000862.sst")
	if err := os.Link(name, child); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(name); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(child)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("the child's link holds %d bytes after the parent's Remove, want the %d it had", len(got), len(data))
	}
}

// A store that is not retired unlinks its files at once, as Pebble asks.
func TestALiveStoreUnlinksAtOnce(t *testing.T) {
	c, name, data := shrinkFixture(t, false)
	if size := removedSize(t, c, name); size != int64(len(data)) {
		t.Errorf("a live store's removed file was shortened to %d bytes before its unlink", size)
	}
}
