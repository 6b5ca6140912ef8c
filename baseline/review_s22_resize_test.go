package baseline

import (
	"fmt"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
	"github.com/shardsplit/shardsplit/storage/crashfs"
)

// A resize's target is the index once Build returns: the service persists
// its metadata next and acknowledges the resize, and the user may delete
// the source. So Build must return a durable target whatever the engine's
// durability: a shrink's copied sources and a one-shard split's rewritten
// documents were written with the engine's (async) durability and never
// synced, and a power loss after the resize lost them from the target.
func TestReviewS22ResizeBuildIsDurable(t *testing.T) {
	for _, tc := range []struct {
		name                string
		op                  routing.ResizeOp
		sourceShards, to    int
		targetRoutingShards int
	}{
		{"shrink 4 -> 1 (copied sources)", routing.Shrink, 4, 1, 0},
		{"split 1 -> 2, routing shards changed (rewritten)", routing.Split, 1, 2, 64},
		{"split 2 -> 4 (linked and trimmed)", routing.Split, 2, 4, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			disk := crashfs.New()
			fs := disk.FS(nil)
			srcEng, err := storage.Open(storage.Options{Dir: "/src", FS: fs, CacheBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			s, _ := routing.NewSettings("source", tc.sourceShards, 0, 1)
			tab, _ := routing.NewTable(routing.ModePartition, s)
			n, err := node.Open(node.Config{Engine: srcEng, Table: tab})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			r := node.NewRouter(n, tab, node.RouterConfig{})
			const docs = 500
			for i := range docs {
				if _, err := r.Index(fmt.Sprintf("doc-%d", i), "", []byte("v")); err != nil {
					t.Fatal(err)
				}
			}
			req := ResizeRequest{Op: tc.op, Source: "source", Target: "target", TargetShards: tc.to,
				TargetRoutingShards: tc.targetRoutingShards, Cleanup: CleanupRange}
			target, err := Prepare(req, &Source{Node: n, WriteBlocked: true}, false)
			if err != nil {
				t.Fatal(err)
			}
			// Async durability whose interval never comes within the test.
			dstOpts := storage.Options{Dir: "/dst", FS: fs, CacheBytes: 1 << 20, Durability: storage.DurabilityAsync, SyncEvery: time.Hour}
			dstEng, err := storage.Open(dstOpts)
			if err != nil {
				t.Fatal(err)
			}
			defer dstEng.Close()
			var rep ResizeReport
			ttab, err := Build(req, n, dstEng, target, &rep)
			if err != nil {
				t.Fatal(err)
			}

			crashed := disk.Crash(0, 0) // a power loss once Build has returned
			dstOpts.FS = crashed.FS(nil)
			after, err := storage.Open(dstOpts)
			if err != nil {
				t.Fatal(err)
			}
			defer after.Close()
			total := 0
			for id := range ttab.Settings().Shards {
				sid := routing.ShardID(id)
				sh, err := after.OpenShard(sid, ttab.Keyspace(sid), []routing.Span{ttab.RootSpan(sid)})
				if err != nil {
					t.Fatal(err)
				}
				if err := sh.Scan(func(storage.Doc) error { total++; return nil }); err != nil {
					t.Fatal(err)
				}
			}
			if total != docs {
				t.Errorf("after a power loss once Build returned, the target holds %d of the source's %d documents", total, docs)
			}
		})
	}
}
