package recovery

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// TestCheckReportsMisplacedDocument: a document stored on shard 1 whose
// routing value names shard 0 (written with storage directly, as a routing
// bug would) is a violation of Check.
func TestCheckReportsMisplacedDocument(t *testing.T) {
	tab, _ := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 2, RoutingShards: 64, PartitionSize: 1})
	n, j, _, err := Open(storage.Options{Dir: "/data", FS: vfs.NewMem(), CacheBytes: 1 << 20}, tab, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	r := node.NewRouter(n, tab, node.RouterConfig{})
	for i := range 10 {
		if _, err := r.Index(fmt.Sprintf("d%d", i), "", []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if rep := Check(n, j, nil); !rep.OK() || rep.Documents != 10 {
		t.Fatalf("clean node: %+v", rep)
	}
	var to0, to1 string
	for i := 0; to0 == "" || to1 == ""; i++ {
		k := fmt.Sprintf("t%d", i)
		if _, s := tab.Route("moved", k); s == 0 {
			to0 = k
		} else {
			to1 = k
		}
	}
	p, _ := tab.Route("moved", to1)
	s, _ := n.ShardStore(1)
	op := storage.Op{Kind: storage.OpIndex, Root: tab.Keyspace(p.Root), Key: tab.KeyOf(p), ID: "moved", Routing: to0, Source: []byte("x")}
	if _, err := s.Write([]storage.Op{op}, nil); err != nil {
		t.Fatal(err)
	}
	rep := Check(n, j, nil)
	if rep.OK() || rep.Documents != 11 || len(rep.Violations) != 1 || !strings.Contains(rep.Violations[0], "document moved is on shard 1") {
		t.Fatalf("misplaced document: %+v", rep)
	}
	t.Logf("violation: %s", rep.Violations[0])
}
