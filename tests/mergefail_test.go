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

// A split's children and a merge's target keep their sequence numbers
// above every document they hold, across a restart. The handoff raised them
// above the parent's (every source's) in memory only, and what the store
// had persisted could be lower: a per-shard merge target inherits the
// largest source's number but holds the other sources' documents with
// their own, higher, numbers; in the shared layout a child's (a target's)
// number is the parent's (the sources') at its creation, and the writes
// during catch-up land in its keys with higher ones. Reopened before its
// first write, the shard numbered its writes below documents it held: an
// update got a lower _seq_no than the version it replaced.
func TestHandoffSeqSurvivesRestart(t *testing.T) {
	for _, layout := range []storage.Layout{storage.LayoutPerShard, storage.LayoutShared} {
		for _, c := range []struct {
			op         string
			duringCopy bool // the source (parent) takes writes during catch-up
		}{{"split", false}, {"split", true}, {"merge", false}, {"merge", true}} {
			op := c.op
			t.Run(fmt.Sprintf("%s/%s/writes-during=%t", layout, op, c.duringCopy), func(t *testing.T) {
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
				r := node.NewRouter(n, tab, node.RouterConfig{})
				var last node.Result
				var id string // the document whose updates run the sequence number ahead
				write := func(k int) {
					t.Helper()
					for i := range k {
						if last, err = r.Index(id, "", fmt.Appendf(nil, "v%d", i)); err != nil {
							t.Fatal(err)
						}
					}
				}
				// During catch-up (if c.duringCopy), the source (parent) the
				// document is on takes 20 more updates of it.
				during := !c.duringCopy
				hook := func(_ splitter.Phase, in splitter.Intent) {
					if in.Kind == splitter.IntentCatchUp && !during {
						during = true
						write(20)
					}
				}
				d := splitter.NewDriver(n, splitter.Config{Journal: j})
				if op == "split" {
					id = idOn(t, n.Table(), 0)
					write(5)
					d = splitter.NewDriver(n, splitter.Config{Journal: j, Hook: hook})
				}
				if rep, err := d.Run(splitter.Plan{Parent: 0, Ways: 2}); err != nil || rep.Phase != splitter.PhaseDone {
					t.Fatalf("split: %v %v", err, rep.Err)
				}
				if op == "merge" {
					// Source 1 (the first: the largest on a tie) takes one
					// write, source 2 many, so its number runs ahead.
					id = idOn(t, n.Table(), 1)
					write(1)
					id = idOn(t, n.Table(), 2)
					write(30)
					d = splitter.NewDriver(n, splitter.Config{Journal: j, Hook: hook})
					rep, err := d.RunMerge(splitter.MergePlan{Sources: []routing.ShardID{1, 2}})
					if err != nil || rep.Phase != splitter.PhaseDone {
						t.Fatalf("merge: %v %v", err, rep.Err)
					}
				}
				if !during {
					t.Fatal("no catch-up round: the hook wrote nothing during the operation")
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
				before := last
				write(1)
				if last.Seq <= before.Seq {
					t.Fatalf("update of %s after the %s and a restart got seq %d on shard %d; the version it replaced had seq %d on shard %d (sequence numbers went back)",
						id, op, last.Seq, last.Shard, before.Seq, before.Shard)
				}
			})
		}
	}
}
