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
	return startAll(t, begunSplit(t, StrategyRecover))
}

// begunSplit returns a 3-node cluster with index i (1 shard of 8 routing
// shards, 1 replica, green, index.shardsplit.replica_split strategy) just
// after the split of its shard 0 in two began.
func begunSplit(t *testing.T, strategy string) *State {
	t.Helper()
	s := bootstrap(t, "n1", "n2", "n3")
	ct := createTask("i", 1, 1)
	ct.CreateIndex.Settings["index.number_of_routing_shards"] = "8"
	ct.CreateIndex.Settings[SettingReplicaSplit] = strategy
	s = startAll(t, mustApply(t, s, ct))
	return mustApply(t, s, Task{SplitShard: &SplitShard{Index: "i", Shard: 0, Children: 2}})
}

func TestALocalSplitBuildsEveryChildCopyBesideAParentCopyAfterTheCut(t *testing.T) {
	s := begunSplit(t, StrategyLocal)
	im := s.Indices["i"]
	parentReplica := replicas(s, "i", 0)[0]
	term := im.PrimaryTerms[0]
	for _, child := range im.Splits[0].Children {
		rs := replicas(s, "i", child)
		if len(rs) != 1 || rs[0].Node != parentReplica.Node || rs[0].State != Initializing || rs[0].RecoverySource != InPlaceSplit {
			t.Fatalf("child %d replicas %+v, want one built in place on %s", child, rs, parentReplica.Node)
		}
		// No child copy starts before the cut: none is built before it.
		p := primary(t, s, "i", child)
		if _, err := apply(t, s, Task{ShardStarted: &ShardStarted{Index: "i", Shard: child, AllocationID: p.AllocationID, PrimaryTerm: term}}); !errors.Is(err, ErrStale) {
			t.Fatalf("child primary started before the cut: %v", err)
		}
	}
	if im.Splits[0].Cut != nil {
		t.Fatalf("cut %d before any was proposed", *im.Splits[0].Cut)
	}
	if _, err := apply(t, s, Task{SplitCut: &SplitCut{Index: "i", Shard: 0, ParentTerm: term + 1, Seq: 5}}); !errors.Is(err, ErrNoLongerPrimary) {
		t.Fatalf("cut under another term: %v", err)
	}
	s = mustApply(t, s, Task{SplitCut: &SplitCut{Index: "i", Shard: 0, ParentTerm: term, Seq: 5}})
	if c := s.Indices["i"].Splits[0].Cut; c == nil || *c != 5 {
		t.Fatalf("cut %v, want 5", c)
	}
	if _, err := apply(t, s, Task{SplitCut: &SplitCut{Index: "i", Shard: 0, ParentTerm: term, Seq: 7}}); !errors.Is(err, ErrStale) {
		t.Fatalf("a second cut: %v", err)
	}
	// A replica never starts before its primary.
	for _, child := range s.Indices["i"].Splits[0].Children {
		r := replicas(s, "i", child)[0]
		if _, err := apply(t, s, Task{ShardStarted: &ShardStarted{Index: "i", Shard: child, AllocationID: r.AllocationID}}); !errors.Is(err, ErrStale) {
			t.Fatalf("child replica started before its primary: %v", err)
		}
	}
	s = startAll(t, s)
	if got := s.Indices["i"].Splits[0].Phase; got != SplitReady {
		t.Fatalf("phase %s, want %s", got, SplitReady)
	}
	s = mustApply(t, s, Task{SplitHandoff: &SplitHandoff{Index: "i", Shard: 0, ParentTerm: term, MaxSeq: 9}})
	if s.Health().Status != Green {
		t.Fatalf("health %s after a local split's hand-off", s.Health().Status)
	}
}

func TestAHandoffFirstSplitHandsOffWithOneCopyPerChildAndThenRecoversTheReplicas(t *testing.T) {
	s := startAll(t, begunSplit(t, StrategyHandoffFirst))
	im := s.Indices["i"]
	children := im.Splits[0].Children
	if got := im.Splits[0].Phase; got != SplitReady {
		t.Fatalf("phase %s with the child primaries in sync, want %s", got, SplitReady)
	}
	for _, child := range children {
		for _, r := range replicas(s, "i", child) {
			if r.State != Unassigned {
				t.Fatalf("child %d replica %+v exists before the hand-off", child, r)
			}
		}
	}
	s = mustApply(t, s, Task{SplitHandoff: &SplitHandoff{Index: "i", Shard: 0, ParentTerm: im.PrimaryTerms[0], MaxSeq: 9}})
	// The window: one started copy per child, its replicas recovering.
	if got := s.Health().Status; got != Yellow {
		t.Fatalf("health %s right after a handoff-first hand-off, want yellow", got)
	}
	for _, child := range children {
		if in := s.Indices["i"].InSync[child]; len(in) != 1 {
			t.Fatalf("child %d in-sync %v right after the hand-off, want its primary alone", child, in)
		}
	}
	if s = startAll(t, s); s.Health().Status != Green {
		t.Fatalf("health %s once the child replicas recovered", s.Health().Status)
	}
}

func TestEveryStrategyRollsBackWhenTheParentPrimarysNodeLeavesBeforeTheHandoff(t *testing.T) {
	for _, strategy := range Strategies {
		t.Run(strategy, func(t *testing.T) {
			s := begunSplit(t, strategy)
			if strategy == StrategyLocal {
				s = mustApply(t, s, Task{SplitCut: &SplitCut{Index: "i", Shard: 0, ParentTerm: s.Indices["i"].PrimaryTerms[0], Seq: 0}})
			}
			s = startAll(t, s)
			p := primary(t, s, "i", 0)
			s = mustApply(t, s, Task{NodeLeft: &NodeLeft{Name: p.Node, Reason: "disconnected"}})
			im := s.Indices["i"]
			if len(im.Splits) != 0 || !equalIDs(im.ShardIDs(), []routing.ShardID{0}) {
				t.Fatalf("split not rolled back: splits %v shards %v", im.Splits, im.ShardIDs())
			}
			if np := primary(t, s, "i", 0); np.Node == p.Node || !np.Active() {
				t.Fatalf("parent primary after the roll-back %+v", np)
			}
		})
	}
}

func TestSplitRefusesAnUnknownStrategy(t *testing.T) {
	s := bootstrap(t, "n1", "n2")
	ct := createTask("i", 1, 1)
	ct.CreateIndex.Settings["index.number_of_routing_shards"] = "8"
	ct.CreateIndex.Settings[SettingReplicaSplit] = "copy-everything"
	s = startAll(t, mustApply(t, s, ct))
	if _, err := apply(t, s, Task{SplitShard: &SplitShard{Index: "i", Shard: 0, Children: 2}}); !errors.Is(err, ErrInvalidTask) {
		t.Fatalf("split under an unknown strategy: %v", err)
	}
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

// An index that does not set index.shardsplit.replica_split splits with
// the default strategy, local: the split records it, so every node acts
// on the same strategy whatever its own default.
func TestASplitOfAnIndexWithoutTheSettingUsesTheLocalStrategy(t *testing.T) {
	s := begunSplit(t, "")
	if got := s.Indices["i"].Splits[0].Strategy; got != StrategyLocal {
		t.Fatalf("split strategy %q, want %q", got, StrategyLocal)
	}
}
