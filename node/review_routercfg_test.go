package node_test

import (
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/storage"
)

// A negative MaxRetries means no retries: the request is still sent once.
// It used to send nothing and fail with a message wrapping a nil error
// ("%!w(<nil>)"), losing every context.
func TestReviewNodeRouterNegativeMaxRetries(t *testing.T) {
	n, _ := openNode(t, vfs.NewMem(), storage.LayoutPerShard)
	defer n.Close()
	r := node.NewRouter(n, n.Table(), node.RouterConfig{MaxRetries: -1})
	if _, err := r.Index("doc-1", "", []byte("v")); err != nil {
		if strings.Contains(err.Error(), "%!") {
			t.Fatalf("Index with MaxRetries -1 = %q: a malformed error", err)
		}
		t.Fatalf("Index with MaxRetries -1 = %v, want it sent once and applied", err)
	}
}
