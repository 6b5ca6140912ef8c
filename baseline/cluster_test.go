package baseline

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/routing"
)

// An AliasWriter that wrote to an index keeps writing through the alias
// after that index is deleted and an index of the same name is created
// (a failed resize's target made again, a source recreated): its write goes
// to the index the alias names now. It must neither spin on the deleted
// index's closed node nor write anywhere else.
func TestAliasWriterFollowsARecreatedIndex(t *testing.T) {
	c := newCluster(t)
	s, _ := routing.NewSettings("idx", 2, 0, 1)
	loadIndex(t, c, "idx", s, 10)
	w := c.NewAliasWriter("alias")
	if _, err := w.Write("before", "", []byte("v"), false); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteIndex("idx"); err != nil {
		t.Fatal(err)
	}
	s4, _ := routing.NewSettings("idx", 4, 0, 1)
	if _, err := c.CreateIndex("idx", s4); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := w.Write("after", "", []byte("v"), false)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("write through the alias to the recreated index: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the alias writer spun for 5 s on the deleted index's closed node")
	}
	d, found, err := node_get(c, "alias", "after", "")
	if err != nil || !found || string(d.Source) != "v" {
		t.Errorf("the write is not in the recreated index: %v, %v", found, err)
	}
}

// An index created under a resize's target name while the resize builds
// it: OpenSearch creates the target in the cluster state before copying,
// so the second index of that name is refused with
// resource_already_exists_exception. Here both would share one data
// directory: the create must be refused and the resize's target must hold
// the source's documents, each once, where the target's table names.
func TestCreateDuringAResizeOfTheSameNameIsRefused(t *testing.T) {
	c := newCluster(t)
	s, _ := routing.NewSettings("source", 4, 0, 1)
	model := loadIndex(t, c, "source", s, 20000)
	if err := c.SetWriteBlock("source", true); err != nil {
		t.Fatal(err)
	}
	resized := make(chan error, 1)
	go func() {
		_, _, err := c.Resize(ResizeRequest{Op: routing.Split, Source: "source", Target: "target", TargetShards: 8, Cleanup: CleanupPerDoc})
		resized <- err
	}()
	time.Sleep(20 * time.Millisecond) // the resize is building its target
	ts, _ := routing.NewSettings("target", 2, 0, 1)
	_, createErr := c.CreateIndex("target", ts)
	resizeErr := <-resized
	if createErr == nil && resizeErr == nil {
		t.Fatalf("both the resize and a create of its target's name succeeded")
	}
	if resizeErr != nil {
		t.Fatalf("the resize failed (create = %v): %v", createErr, resizeErr)
	}
	ix, _ := c.Index("target")
	if got := ix.Settings().Shards; got != 8 {
		t.Errorf("the target serves %d shards, want the resize's 8", got)
	}
	if err := c.PutAlias("alias", "target"); err != nil {
		t.Fatal(err)
	}
	var re *routing.Error
	if !errors.As(createErr, &re) || re.Exception != routing.ResourceAlreadyExists {
		t.Errorf("create during the resize = %v, want resource_already_exists_exception", createErr)
	}
	checkIndex(t, c, "target", model)
}

// An index name is one directory under the cluster's Dir: a name that is
// a path ('..', 'a/../../b', '/abs') must be refused with a message naming
// it, not create, and later delete, a directory outside Dir (DeleteIndex
// removes the index's directory tree).
func TestIndexNameCannotLeaveTheClusterDir(t *testing.T) {
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
