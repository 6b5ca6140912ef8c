package recovery

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

func testTable(t *testing.T) *routing.Table {
	t.Helper()
	tab, err := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 2, RoutingShards: 64, PartitionSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// openRecovered opens a data directory on a memory filesystem through
// recovery with tab, writes docs documents d0, d1, ... and checks the node
// is clean; it is closed when the test ends.
func openRecovered(t *testing.T, tab *routing.Table, docs int) (*node.Node, *splitter.Journal) {
	t.Helper()
	n, j, _, err := Open(storage.Options{Dir: "/data", FS: vfs.NewMem(), CacheBytes: 1 << 20}, tab, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	r := node.NewRouter(n, tab, node.RouterConfig{})
	for i := range docs {
		if _, err := r.Index(fmt.Sprintf("d%d", i), "", []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if rep := Check(n, j, nil); !rep.OK() {
		t.Fatalf("clean node: %+v", rep)
	}
	return n, j
}
