package cluster_test

import (
	"errors"
	"testing"

	. "github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/routing"
)

// splitting returns a 3-node cluster with index i (1 shard of 8 routing
// shards, 1 replica, green) whose shard 0 is being split in two, every
// child copy started and in sync.
func splitting(t *testing.T) *State {
	t.Helper()
	s := bootstrap(t, "n1", "n2", "n3")
	ct := createTask("i", 1, 1)
	ct.CreateIndex.Settings["index.number_of_routing_shards"] = "8"
	s = startAll(t, mustApply(t, s, ct))
	s = mustApply(t, s, Task{SplitShard: &SplitShard{Index: "i", Shard: 0, Children: 2}})
	return startAll(t, s)
}

func TestSplitRollsBackWhenAChildReplicaFailsBeforeTheHandoff(t *testing.T) {
	s := splitting(t)
	im := s.Indices["i"]
	if got := im.Splits[0].Phase; got != SplitReady {
		t.Fatalf("phase %s, want %s", got, SplitReady)
	}
	child := im.Splits[0].Children[0]
	r := replicas(s, "i", child)[0]
	s = mustApply(t, s, Task{ShardFailed: &ShardFailed{Index: "i", Shard: child, AllocationID: r.AllocationID, Reason: "recovery failed"}})
	im = s.Indices["i"]
	if len(im.Splits) != 0 || len(im.ShardIDs()) != 1 {
		t.Fatalf("split not rolled back: splits %v shards %v", im.Splits, im.ShardIDs())
	}
	for _, n := range s.NodeNames() {
		for _, lc := range s.Nodes[n].Copies {
			if lc.Shard != 0 {
				t.Fatalf("node %s keeps child copy %+v after the roll-back", n, lc)
			}
		}
	}
	tbl, err := im.Table()
	if err != nil {
		t.Fatal(err)
	}
	if len(tbl.InProgress()) != 0 || !equalIDs(tbl.ActiveShards(), []routing.ShardID{0}) {
		t.Fatalf("routing after roll-back: in progress %v, active %v", tbl.InProgress(), tbl.ActiveShards())
	}
	if s.Health().Status != Green {
		t.Fatalf("health %s after roll-back", s.Health().Status)
	}
}

func TestSplitHandoffLeavesNoParentCopyAndTheChildrenRoute(t *testing.T) {
	s := splitting(t)
	children := s.Indices["i"].Splits[0].Children
	term := s.Indices["i"].PrimaryTerms[0]
	s = mustApply(t, s, Task{SplitHandoff: &SplitHandoff{Index: "i", Shard: 0, ParentTerm: term, MaxSeq: 9}})
	im := s.Indices["i"]
	if _, ok := im.Copies[0]; ok || !equalIDs(im.ShardIDs(), children) {
		t.Fatalf("shards after the hand-off %v, want %v", im.ShardIDs(), children)
	}
	if h := im.Handoffs[0]; h.MaxSeq != 9 || h.ParentTerm != term {
		t.Fatalf("hand-off record %+v", h)
	}
	tbl, err := im.Table()
	if err != nil {
		t.Fatal(err)
	}
	if !tbl.IsSplitParent(0) || !equalIDs(tbl.ActiveShards(), children) {
		t.Fatalf("routing after the hand-off: active %v", tbl.ActiveShards())
	}
	// A node that restarts with the parent's copy on disk does not get it
	// back: the parent is no shard of the index any more.
	p := primary(t, s, "i", children[0])
	n := s.Nodes[p.Node]
	n.EphemeralID = "e2-" + n.Name
	n.Copies = append(n.Copies, LocalCopy{IndexUUID: im.UUID, Shard: 0, AllocationID: "old-parent-copy", Primary: true})
	s = mustApply(t, s, Task{NodeJoined: &NodeJoined{Node: n}})
	if _, ok := s.Indices["i"].Copies[0]; ok {
		t.Fatal("the parent came back after its hand-off")
	}
	if s = startAll(t, s); s.Health().Status != Green {
		t.Fatalf("health %s", s.Health().Status)
	}
}

func TestSplitRefusesWhatTheShardDoesNotAllow(t *testing.T) {
	s := splitting(t)
	cases := []struct {
		name string
		task Task
		want error
	}{
		{"update replicas during a split", Task{UpdateReplicas: &UpdateReplicas{Index: "i", Replicas: 2}}, ErrSplitRefused},
		{"split of a child", Task{SplitShard: &SplitShard{Index: "i", Shard: s.Indices["i"].Splits[0].Children[0], Children: 2}}, ErrSplitRefused},
		{"second split of the parent", Task{SplitShard: &SplitShard{Index: "i", Shard: 0, Children: 2}}, ErrSplitRefused},
		{"split of an unknown index", Task{SplitShard: &SplitShard{Index: "x", Shard: 0, Children: 2}}, ErrIndexNotFound},
		{"hand-off under an old term", Task{SplitHandoff: &SplitHandoff{Index: "i", Shard: 0, ParentTerm: 0}}, ErrNoLongerPrimary},
		{"cancel of no split", Task{SplitCancel: &SplitCancel{Index: "i", Shard: 5}}, ErrStale},
	}
	for _, c := range cases {
		if _, err := apply(t, s, c.task); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func equalIDs(a, b []routing.ShardID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
