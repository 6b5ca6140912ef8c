package splitter

import (
	"testing"

	"github.com/shardsplit/shardsplit/storage"
)

// A parent being split runs only urgent compactions from the creation of
// its children (they are wasted work once the children exist);
// a cancelled split gives them back, and a completed one reports every
// child's creation and the parent's retirement.
func TestSplitHoldsTheParentsCompactions(t *testing.T) {
	for _, cancel := range []bool{false, true} {
		t.Run(map[bool]string{false: "completed", true: "cancelled"}[cancel], func(t *testing.T) {
			n := openNode(t, storage.Options{Durability: storage.DurabilityAsync}, nil, 0)
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
