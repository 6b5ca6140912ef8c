package splitter

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// openNode opens a node for a test, closed when the test ends: on opts
// (Dir /data, a memory filesystem and a 1 MiB cache unless given), with
// tab (nil: one root in partition mode, 16 routing shards), and docs
// documents d0, d1, ... of value "v" written through a router.
func openNode(t *testing.T, opts storage.Options, tab *routing.Table, docs int) *node.Node {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = "/data"
	}
	if opts.FS == nil {
		opts.FS = vfs.NewMem()
	}
	if opts.CacheBytes == 0 {
		opts.CacheBytes = 1 << 20
	}
	if tab == nil {
		tab = newTable(t, routing.ModePartition, 1, 16)
	}
	eng, err := storage.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(node.Config{Engine: eng, Table: tab})
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
	return n
}

// newTable returns a table of roots in mode with routingShards routing
// shards.
func newTable(t *testing.T, mode routing.Mode, roots, routingShards int) *routing.Table {
	t.Helper()
	tab, err := routing.NewTable(mode, routing.Settings{Shards: roots, RoutingShards: routingShards, PartitionSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	return tab
}
