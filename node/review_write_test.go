package node_test

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// A write to a shard the published table names as the owner, whose store
// is closed (destroyed under the node), is not stale routing: no newer
// table or other shard will take it. It must fail at once with the store's
// error, not be retried as stale until the router gives up with a message
// saying the shard does not own a document it does own.
func TestReviewNodeWriteToAClosedOwnerIsNotStale(t *testing.T) {
	n, eng := openNode(t, vfs.NewMem(), storage.LayoutPerShard)
	defer n.Close()
	if err := eng.DestroyShard(1); err != nil {
		t.Fatal(err)
	}
	r := node.NewRouter(n, n.Table(), node.RouterConfig{})
	id := idOn(t, n.Table(), func(s routing.ShardID) bool { return s == 1 })
	_, err := r.Index(id, "", []byte("v"))
	if !errors.Is(err, storage.ErrShardClosed) || errors.Is(err, node.ErrRetriesExhausted) || r.Retries() != 0 {
		t.Fatalf("write to the closed owner = %v after %d retries; want storage.ErrShardClosed at once", err, r.Retries())
	}
	var stale *node.StaleRoutingError
	if errors.As(err, &stale) {
		t.Fatalf("write to the closed owner answered stale routing: %v", err)
	}
}
