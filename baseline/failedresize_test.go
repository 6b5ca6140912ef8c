package baseline

import (
	"os"
	"testing"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// A resize that fails part-way removes the target it had begun: the target
// is no index, and whatever its build left would otherwise be opened by the
// next index of that name. Here source shard 3 is gone, so target shards
// 0-5 are built and 6 fails; an index created afterwards under the target's
// name must be empty. On the old code it held the documents the failed
// build had linked.
func TestAFailedResizeLeavesNoTarget(t *testing.T) {
	c := newCluster(t)
	s, _ := routing.NewSettings("source", 4, 0, 1)
	loadIndex(t, c, "source", s, 3000)
	if err := c.SetWriteBlock("source", true); err != nil {
		t.Fatal(err)
	}
	src, _ := c.Index("source")
	if err := src.Node.Engine().DestroyShard(3); err != nil {
		t.Fatal(err)
	}
	_, _, err := c.Resize(ResizeRequest{Op: routing.Split, Source: "source", Target: "target", TargetShards: 8, Cleanup: CleanupRange})
	if err == nil {
		t.Fatal("the resize succeeded without source shard 3")
	}
	t.Logf("the resize failed as it should: %v", err)
	if _, err := os.Stat(c.IndexDir("target")); !os.IsNotExist(err) {
		t.Errorf("after the failed resize the target's directory is there (%v)", err)
	}

	ts, _ := routing.NewSettings("target", 8, 0, 1)
	ix, err := c.CreateIndex("target", ts)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	if _, err := ix.Node.Search(func(routing.ShardID, storage.Doc) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("a new index named like the failed resize's target holds %d documents, want 0", n)
	}
}
