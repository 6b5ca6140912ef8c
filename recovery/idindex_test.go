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

// Check compares every shard's `_id` entries with its routed documents: a
// routed document without its entry (a write or a split that forgot it)
// and an entry without its document (a delete that left it) are each a
// violation. Both are made here by a node that keeps no `_id` index
// (storage.IDIndexOff) over a store that another one wrote.
func TestCheckReportsAnIDIndexThatDoesNotMatchTheDocuments(t *testing.T) {
	for _, layout := range []storage.Layout{storage.LayoutPerShard, storage.LayoutShared} {
		t.Run(layout.String(), func(t *testing.T) {
			fs := vfs.NewMem()
			tab, _ := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 2, RoutingShards: 64, PartitionSize: 1})
			session := func(how storage.IDIndexBuild, fn func(*node.Router)) CheckReport {
				t.Helper()
				n, j, _, err := Open(storage.Options{Dir: "/data", FS: fs, Layout: layout, CacheBytes: 1 << 20, IDIndex: how}, tab, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer n.Close()
				fn(node.NewRouter(n, tab, node.RouterConfig{}))
				return Check(n, j, nil)
			}
			do := func(_ node.Result, err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			rep := session(storage.IDIndexRebuild, func(r *node.Router) {
				for i := range 10 {
					do(r.Index(fmt.Sprintf("d%d", i), fmt.Sprintf("tenant-%d", i%3), []byte("v")))
				}
			})
			if !rep.OK() || rep.IDEntries != 10 {
				t.Fatalf("clean node: %+v", rep)
			}
			session(storage.IDIndexOff, func(r *node.Router) {
				do(r.Index("unindexed", "tenant-1", []byte("v")))
				do(r.Delete("d4", "tenant-1"))
			})
			rep = session(storage.IDIndexRebuild, func(*node.Router) {})
			if rep.OK() || len(rep.Violations) != 1 || !strings.Contains(rep.Violations[0], "1 without an entry [unindexed@") ||
				!strings.Contains(rep.Violations[0], "1 entries without a document [d4@") {
				t.Fatalf("an entry missing, another left: %+v", rep)
			}
			t.Logf("violation: %s", rep.Violations[0])
		})
	}
}
