package node_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/recovery"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// A routed Get while a published table is not yet durable must not return
// a write that only that table admits: the write is not acknowledged
// (INV-9), and if the commit fails, recovery rolls it back, so a reader
// would have seen a value that then vanishes (not linearizable: no write
// of the older state follows). The Get is answered from the durable
// table's owner (the parent), which holds the acknowledged state.
func TestGetDuringAPendingTableIsNotADirtyRead(t *testing.T) {
	fs := vfs.NewMem()
	n, _ := openNode(t, fs, storage.LayoutPerShard)
	_, p := publishSplit(t, n)
	r := node.NewRouter(n, p.Table(), node.RouterConfig{})
	id, acked := writeToAChild(t, n, r, p.Table(), "dirty")
	type got struct {
		doc   storage.Doc
		found bool
		err   error
	}
	read := make(chan got, 1)
	go func() {
		d, found, err := r.Get(id, "")
		read <- got{d, found, err}
	}()
	var early *got
	select {
	case g := <-read:
		early = &g
	case <-time.After(50 * time.Millisecond):
	}
	if err := p.Commit(func() error { return errors.New("injected: fsync failed") }); !errors.Is(err, node.ErrFailed) {
		t.Fatalf("Commit = %v, want ErrFailed", err)
	}
	if err := <-acked; !errors.Is(err, node.ErrFailed) {
		t.Fatalf("the write = %v, want ErrFailed", err)
	}
	g := early
	if g == nil {
		x := <-read
		g = &x
	}
	if g.found {
		t.Errorf("a Get during the pending table returned the unacknowledged write %q (err %v)", g.doc.Source, g.err)
	} else if g.err != nil && !errors.Is(g.err, node.ErrFailed) {
		t.Errorf("the Get during the pending table = %v, want not found or ErrFailed", g.err)
	}
	_ = n.Close()
	n2, _, _, err := recovery.Open(storage.Options{Dir: "/data", FS: fs, Layout: storage.LayoutPerShard, CacheBytes: 1 << 20}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close()
	if _, found, err := node.NewRouter(n2, n2.Table(), node.RouterConfig{}).Get(id, ""); err != nil || found {
		t.Fatalf("after recovery the rolled-back write is found %v (%v): the case needs it gone", found, err)
	}
}

// A negative MaxRetries means no retries: the request is still sent once,
// not skipped with a failure wrapping a nil error ("%!w(<nil>)") that
// loses every context.
func TestRouterWithNegativeMaxRetriesSendsOnce(t *testing.T) {
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

// A write to a shard the published table names as the owner, whose store
// is closed (destroyed under the node), is not stale routing: no newer
// table or other shard will take it. It must fail at once with the store's
// error, not be retried as stale until the router gives up with a message
// saying the shard does not own a document it does own.
func TestWriteToAClosedOwnerIsNotStale(t *testing.T) {
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
