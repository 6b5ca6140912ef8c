package tests

// Failure-path and restart regressions of the in-place merge (issue 13's
// adversarial review). Each test drives a merge into a path the happy-path
// tests never take and requires what the product promises.

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/recovery"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

// idOn returns a document id the table routes to shard want.
func idOn(t *testing.T, tab *routing.Table, want routing.ShardID) string {
	t.Helper()
	for i := range 1000 {
		id := fmt.Sprintf("d%d", i)
		if _, s := tab.Route(id, ""); s == want {
			return id
		}
	}
	t.Fatalf("no id routes to shard %d", want)
	return ""
}

// A merge target's sequence numbers stay above every document it holds,
// across a restart. The per-shard target is a checkpoint of the largest
// source (whose persisted sequence number it inherits) plus the other
// sources' documents with their own, possibly higher, sequence numbers;
// the handoff raised the target's sequence number above every source's in
// memory only. After a clean restart with no write in between, the target
// numbered its next writes from the largest source's sequence number:
// an update of a document from another source got a lower _seq_no than the
// version it replaced (and one the shard had already given another write).
func TestMergeTargetSeqSurvivesRestart(t *testing.T) {
	for _, layout := range []storage.Layout{storage.LayoutPerShard, storage.LayoutShared} {
		t.Run(layout.String(), func(t *testing.T) {
			fs := vfs.NewMem()
			opts := storage.Options{Dir: "/data", FS: fs, CacheBytes: 1 << 20, Layout: layout}
			tab, err := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 1, RoutingShards: 4, PartitionSize: 1})
			if err != nil {
				t.Fatal(err)
			}
			n, j, _, err := recovery.Open(opts, tab, nil)
			if err != nil {
				t.Fatal(err)
			}
			d := splitter.NewDriver(n, splitter.Config{Journal: j})
			if rep, err := d.Run(splitter.Plan{Parent: 0, Ways: 2}); err != nil || rep.Phase != splitter.PhaseDone {
				t.Fatalf("split: %v %v", err, rep.Err)
			}
			// Source 1 (the first: the largest on a tie) takes one write;
			// source 2 many, so its sequence number runs ahead.
			r := node.NewRouter(n, tab, node.RouterConfig{})
			on1, on2 := idOn(t, n.Table(), 1), idOn(t, n.Table(), 2)
			if _, err := r.Index(on1, "", []byte("a")); err != nil {
				t.Fatal(err)
			}
			var last node.Result
			for i := range 50 {
				if last, err = r.Index(on2, "", fmt.Appendf(nil, "v%d", i)); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := d.RunMerge(splitter.MergePlan{Sources: []routing.ShardID{1, 2}})
			if err != nil || rep.Phase != splitter.PhaseDone {
				t.Fatalf("merge: %v %v", err, rep.Err)
			}
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
			n, _, _, err = recovery.Open(opts, tab, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			r = node.NewRouter(n, tab, node.RouterConfig{})
			res, err := r.Index(on2, "", []byte("after restart"))
			if err != nil {
				t.Fatal(err)
			}
			if res.Seq <= last.Seq {
				t.Fatalf("update of %s after the merge and a restart got seq %d on shard %d; the version it replaced had seq %d (sequence numbers went back)",
					on2, res.Seq, res.Shard, last.Seq)
			}
		})
	}
}
