package node_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"

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
func TestReviewNodeGetDuringAPendingTableIsNotADirtyRead(t *testing.T) {
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

// writeToAChild indexes a document (routed to a child of shard 0's split,
// whose table tab is published but not durable) through r, and returns its
// id once the child's store holds it, with the channel its acknowledgement
// (or failure) arrives on: the write waits for the commit (INV-9).
func writeToAChild(t *testing.T, n *node.Node, r *node.Router, tab *routing.Table, source string) (string, <-chan error) {
	t.Helper()
	id := idOn(t, tab, func(s routing.ShardID) bool { return s != 1 })
	pl, shard := tab.Route(id, "")
	acked := make(chan error, 1)
	go func() { _, err := r.Index(id, "", []byte(source)); acked <- err }()
	// Read the child's store directly, not through the node.
	child, _ := n.ShardStore(shard)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, found, err := child.GetAny(tab.Keyspace(pl.Root), tab.KeyOf(pl), id); err != nil {
			t.Fatal(err)
		} else if found {
			return id, acked
		}
		if time.Now().After(deadline) {
			t.Fatal("the write to the child was never applied")
		}
	}
}

// A search while a published table is not yet durable must not return a
// write only that table admits, for the reason a Get must not: it is not
// acknowledged, and a failed commit rolls it back. Each leaf of the
// published table is read from its owners in the durable table (the
// parent), and its hits are still reported as the published leaf's, the
// table SearchAt returns.
func TestReviewNodeSearchDuringAPendingTableIsNotADirtyRead(t *testing.T) {
	n, _ := openNode(t, vfs.NewMem(), storage.LayoutPerShard)
	defer n.Close()
	// Acknowledged documents written before the split: the search must
	// find each once, on the shard the published table names.
	pre := node.NewRouter(n, n.Table(), node.RouterConfig{})
	for i := range 40 {
		if _, err := pre.Index(fmt.Sprintf("pre-%d", i), "", []byte("acked")); err != nil {
			t.Fatal(err)
		}
	}
	_, p := publishSplit(t, n)
	tab := p.Table()
	id, acked := writeToAChild(t, n, node.NewRouter(n, tab, node.RouterConfig{}), tab, "dirty")
	got := map[string][]routing.ShardID{}
	searched, err := n.SearchAt(0, func(s routing.ShardID, d storage.Doc) error {
		got[d.ID] = append(got[d.ID], s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if searched != tab {
		t.Errorf("SearchAt searched v%d, want the published v%d", searched.Version(), tab.Version())
	}
	if s, ok := got[id]; ok {
		t.Errorf("a search during the pending table returned the unacknowledged write %s (on shards %v)", id, s)
	}
	for i := range 40 {
		doc := fmt.Sprintf("pre-%d", i)
		_, want := tab.Route(doc, "")
		if diff := cmp.Diff([]routing.ShardID{want}, got[doc]); diff != "" {
			t.Errorf("acknowledged %s found on shards (-want +got):\n%s", doc, diff)
		}
	}
	if err := p.Commit(func() error { return errors.New("injected: fsync failed") }); !errors.Is(err, node.ErrFailed) {
		t.Fatalf("Commit = %v, want ErrFailed", err)
	}
	if err := <-acked; !errors.Is(err, node.ErrFailed) {
		t.Fatalf("the write = %v, want ErrFailed", err)
	}
}
