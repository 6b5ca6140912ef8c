package splitter

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// A parent being split runs only urgent compactions from the creation of
// its children (they are wasted work once the children exist, issue 15);
// a cancelled split gives them back, and a completed one reports every
// child's creation and the parent's retirement.
func TestSplitHoldsTheParentsCompactions(t *testing.T) {
	for _, cancel := range []bool{false, true} {
		t.Run(map[bool]string{false: "completed", true: "cancelled"}[cancel], func(t *testing.T) {
			tab, err := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 1, RoutingShards: 16, PartitionSize: 1})
			if err != nil {
				t.Fatal(err)
			}
			eng, err := storage.Open(storage.Options{Dir: "/data", FS: vfs.NewMem(), Durability: storage.DurabilityAsync, CacheBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			n, err := node.Open(node.Config{Engine: eng, Table: tab})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = n.Close() })
			parent, ok := n.ShardStore(0)
			if !ok {
				t.Fatal("no shard 0")
			}
			sp := NewDriver(n, Config{}).Start(SplitPlan(0, 2))
			for !sp.Done() && sp.Phase() != PhaseCatchUp {
				if _, _, err := sp.Next(); err != nil {
					t.Fatal(err)
				}
			}
			if !parent.CompactionsHeld() {
				t.Fatalf("phase %s: the parent's compactions are not held", sp.Phase())
			}
			if cancel {
				if err := sp.Cancel(); err != nil {
					t.Fatal(err)
				}
			}
			for !sp.Done() {
				if _, _, err := sp.Next(); err != nil {
					t.Fatal(err)
				}
			}
			r := sp.Report()
			if cancel {
				if r.Phase != PhaseAborted {
					t.Fatalf("ended %s, want aborted", r.Phase)
				}
				if parent.CompactionsHeld() {
					t.Error("cancelled split: the parent's compactions are still held")
				}
				return
			}
			if r.Phase != PhaseDone {
				t.Fatalf("ended %s: %v", r.Phase, r.Err)
			}
			if len(r.ChildStats) != 2 || r.ChildStats[0].Shard != r.Targets[0] || r.ChildStats[1].Shard != r.Targets[1] {
				t.Errorf("ChildStats %+v, children %v", r.ChildStats, r.Targets)
			}
			if r.Retire.Close == 0 && r.Retire.Remove == 0 {
				t.Errorf("no retirement measured: %+v", r.Retire)
			}
		})
	}
}
