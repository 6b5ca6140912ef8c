package node_test

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// The placement checker must report a document stored on the shard the
// table names but under another routing key of that shard: a routed Get
// cannot find it (it reads the key the table computes), so to every reader
// but a full scan it is lost. This is what a new-index split of a one-shard
// index that changed number_of_routing_shards left behind, and the
// procedure's consistency check passed it.
func TestReviewNodeCheckPlacementReportsADocumentUnderTheWrongKey(t *testing.T) {
	n, _ := openNode(t, vfs.NewMem(), storage.LayoutPerShard)
	defer n.Close()
	tab := n.Table()
	id := idOn(t, tab, func(s routing.ShardID) bool { return s == 0 })
	p, shard := tab.Route(id, "")
	span, _ := tab.Shard(shard)
	wrong := tab.KeyOf(p) + 1
	if !span.Span.Contains(wrong) {
		wrong = tab.KeyOf(p) - 1
	}
	s, _ := n.ShardStore(shard)
	if _, err := s.Write([]storage.Op{{Kind: storage.OpIndex, Root: tab.Keyspace(p.Root), Key: wrong, ID: id, Source: []byte("v")}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, found, err := node.NewRouter(n, tab, node.RouterConfig{}).Get(id, ""); err != nil || found {
		t.Fatalf("routed get of the mis-keyed document = %v, %v; the case needs it unreachable", found, err)
	}
	rep, err := n.CheckPlacement(nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.Misplaced != 1 {
		t.Fatalf("CheckPlacement of a document on its shard under key %d (the table names %d) = %+v; want it misplaced",
			wrong, tab.KeyOf(p), rep)
	}
	t.Log(rep.Err())
}
