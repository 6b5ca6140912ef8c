package node_test

import (
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// A write block whose drain fails (a shard's apply lock not taken in time)
// is not in force: SetWriteBlock said it failed, so its caller will not
// lift it, and writes must not keep failing with it. OpenSearch removes the
// temporary block when the shards' verification fails.
func TestReviewNodeFailedWriteBlockIsLifted(t *testing.T) {
	n, _ := openNode(t, vfs.NewMem(), storage.LayoutPerShard)
	defer n.Close()
	f, err := n.Fence(1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	blocked := errors.New("index write (api)")
	err = n.SetWriteBlock(blocked, 20*time.Millisecond)
	f.Release()
	if !errors.Is(err, storage.ErrLockTimeout) {
		t.Fatalf("SetWriteBlock with shard 1 fenced = %v, want ErrLockTimeout", err)
	}
	r := node.NewRouter(n, n.Table(), node.RouterConfig{})
	id := idOn(t, n.Table(), func(s routing.ShardID) bool { return s == 0 })
	if _, err := r.Index(id, "", []byte("v")); err != nil {
		t.Fatalf("write after a write block that failed = %v, want it applied", err)
	}
}
