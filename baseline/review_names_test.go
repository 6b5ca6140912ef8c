package baseline

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/shardsplit/shardsplit/routing"
)

// An index name is one directory under the cluster's Dir: a name that is
// a path ('..', 'a/../../b', '/abs') must be refused with a message naming
// it, not create, and later delete, a directory outside Dir (DeleteIndex
// removes the index's directory tree).
func TestReviewBaselineIndexNameCannotLeaveTheClusterDir(t *testing.T) {
	root := t.TempDir()
	c := NewCluster(Config{Dir: filepath.Join(root, "cluster")})
	defer c.Close()
	s, _ := routing.NewSettings("x", 1, 0, 1)
	for _, name := range []string{"..", "../escape", "a/../../escape2", ".", ""} {
		if _, err := c.CreateIndex(name, s); err == nil {
			t.Errorf("CreateIndex(%q) succeeded", name)
		}
	}
	for _, leaked := range []string{"escape", "escape2"} {
		if _, err := os.Stat(filepath.Join(root, leaked)); err == nil {
			t.Errorf("CreateIndex made %s outside the cluster's directory", filepath.Join(root, leaked))
		}
	}
	if _, err := os.Stat(filepath.Join(root, "TABLE")); err == nil {
		t.Errorf("CreateIndex(\"..\") wrote a table into the cluster directory's parent")
	}
	// A resize's target is an index name too.
	loadIndex(t, c, "source", s, 10)
	if err := c.SetWriteBlock("source", true); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Resize(ResizeRequest{Op: routing.Clone, Source: "source", Target: "../escape3", Cleanup: CleanupRange}); err == nil {
		t.Errorf("Resize to target \"../escape3\" succeeded")
	}
	if _, err := os.Stat(filepath.Join(root, "escape3")); err == nil {
		t.Errorf("Resize made %s outside the cluster's directory", filepath.Join(root, "escape3"))
	}
}
