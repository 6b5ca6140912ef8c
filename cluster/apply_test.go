package cluster_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	. "github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/routing"
)

func TestTasksBeforeBootstrapAreRefused(t *testing.T) {
	for _, task := range []Task{createTask("i", 1, 0), {NodeJoined: &NodeJoined{Node: node("n1")}}, {Reroute: &Reroute{}}} {
		if _, err := apply(t, &State{}, task); !errors.Is(err, ErrNotBootstrapped) {
			t.Errorf("Apply(%s) before bootstrap = %v, want ErrNotBootstrapped", task.Kind(), err)
		}
	}
	s := bootstrap(t, "n1")
	if _, err := apply(t, s, Task{Bootstrap: &Bootstrap{ClusterName: "c", ClusterUUID: "other", Nodes: []NodeInfo{node("n2")}}}); !errors.Is(err, ErrAlreadyBootstrapped) {
		t.Errorf("second bootstrap = %v, want ErrAlreadyBootstrapped", err)
	}
	if _, err := apply(t, &State{}, Task{Bootstrap: &Bootstrap{ClusterName: "c", Nodes: []NodeInfo{node("n1")}}}); !errors.Is(err, ErrInvalidTask) {
		t.Errorf("bootstrap without a uuid = %v, want ErrInvalidTask", err)
	}
	if _, err := apply(t, s, Task{}); !errors.Is(err, ErrInvalidTask) {
		t.Errorf("empty task = %v, want ErrInvalidTask", err)
	}
	if _, err := apply(t, s, Task{Reroute: &Reroute{}, DeleteIndex: &DeleteIndex{Name: "i"}}); !errors.Is(err, ErrInvalidTask) {
		t.Errorf("task with two variants = %v, want ErrInvalidTask", err)
	}
}

func TestNodeJoined(t *testing.T) {
	s := bootstrap(t, "n1", "n2")
	s = startAll(t, mustApply(t, s, createTask("i", 1, 1)))
	// n1 holds [i][0]'s primary, n2 its replica.
	if p := primary(t, s, "i", 0); p.Node != "n1" || !p.Active() {
		t.Fatalf("primary = %+v, want started on n1", p)
	}

	t.Run("another node under a name the cluster has is refused", func(t *testing.T) {
		n := node("n1")
		n.ID = "other"
		_, err := apply(t, s, Task{NodeJoined: &NodeJoined{Node: n}})
		if !errors.Is(err, ErrNodeConflict) || err.Error() != "a node named [n1] with id [id-n1] is already in the cluster" {
			t.Errorf("join = %v, want the node conflict", err)
		}
	})
	t.Run("another node under an id the cluster has is refused", func(t *testing.T) {
		n := node("n9")
		n.ID = "id-n1"
		if _, err := apply(t, s, Task{NodeJoined: &NodeJoined{Node: n}}); !errors.Is(err, ErrNodeConflict) {
			t.Errorf("join = %v, want ErrNodeConflict", err)
		}
	})
	t.Run("a retried join replaces the node's info and keeps its copies", func(t *testing.T) {
		n := node("n1")
		n.HTTPAddr = "127.0.0.1:9999"
		n.Copies = nil
		next := mustApply(t, s, Task{NodeJoined: &NodeJoined{Node: n}})
		if next.Nodes["n1"].HTTPAddr != "127.0.0.1:9999" {
			t.Errorf("http addr = %q, want the new one", next.Nodes["n1"].HTTPAddr)
		}
		if diff := cmp.Diff(s.Indices, next.Indices); diff != "" {
			t.Errorf("a retried join changed the routing (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(s.Nodes["n1"].Copies, next.Nodes["n1"].Copies); diff != "" {
			t.Errorf("a retried join changed the node's disk copies (-want +got):\n%s", diff)
		}
	})
	t.Run("a restarted node's copies fail and its primary moves", func(t *testing.T) {
		n := node("n1")
		n.EphemeralID = "e2-n1"
		n.Copies = s.Nodes["n1"].Copies
		next := mustApply(t, s, Task{NodeJoined: &NodeJoined{Node: n}})
		p := primary(t, next, "i", 0)
		if p.Node != "n2" || next.Indices["i"].PrimaryTerms[0] != 2 {
			t.Errorf("primary = %+v at term %d, want the replica on n2 promoted at term 2", p, next.Indices["i"].PrimaryTerms[0])
		}
		if r := copyOn(t, next, "i", 0, "n1"); r.State != Initializing || r.RecoverySource != Peer || r.UnassignedReason != ReasonNodeLeft {
			t.Errorf("copy on the restarted n1 = %+v, want a new replica recovering from its peer", r)
		}
	})
	t.Run("copies of unknown indices are dropped, two copies of a shard refused", func(t *testing.T) {
		n := node("n3")
		n.Copies = []LocalCopy{{IndexUUID: "gone", Shard: 0, AllocationID: "x"}, {IndexUUID: "uuid-i", Shard: 7, AllocationID: "y"}}
		next := mustApply(t, s, Task{NodeJoined: &NodeJoined{Node: n}})
		if got := next.Nodes["n3"].Copies; len(got) != 0 {
			t.Errorf("n3's copies = %+v, want none", got)
		}
		n.Copies = []LocalCopy{{IndexUUID: "uuid-i", Shard: 0, AllocationID: "x"}, {IndexUUID: "uuid-i", Shard: 0, AllocationID: "y"}}
		if _, err := apply(t, s, Task{NodeJoined: &NodeJoined{Node: n}}); !errors.Is(err, ErrInvalidTask) {
			t.Errorf("join with two copies of a shard = %v, want ErrInvalidTask", err)
		}
	})
}

func TestCreateIndexAllocatesPrimariesThenReplicas(t *testing.T) {
	s := bootstrap(t, "n1", "n2", "n3")
	s = mustApply(t, s, createTask("i", 2, 1))
	im := s.Indices["i"]
	if im.Version != 1 || s.Version != 2 {
		t.Errorf("index version %d, state version %d, want 1 and 2", im.Version, s.Version)
	}
	for sh, node := range []string{"n1", "n2"} {
		p := primary(t, s, "i", routing.ShardID(sh))
		if p.Node != node || p.State != Initializing || p.RecoverySource != EmptyStore || im.PrimaryTerms[routing.ShardID(sh)] != 1 {
			t.Errorf("[i][%d] primary = %+v term %d, want initializing on %s from an empty store at term 1", sh, p, im.PrimaryTerms[routing.ShardID(sh)], node)
		}
		if r := replicas(s, "i", routing.ShardID(sh)); r[0].State != Unassigned || r[0].UnassignedReason != ReasonIndexCreated {
			t.Errorf("[i][%d] replica = %+v, want unassigned until the primary starts", sh, r[0])
		}
		if len(im.InSync[routing.ShardID(sh)]) != 0 {
			t.Errorf("[i][%d] in-sync = %v before anything started", sh, im.InSync[routing.ShardID(sh)])
		}
	}
	if h := s.Health(); h.Status != Yellow || h.InitializingShards != 2 || h.UnassignedShards != 2 {
		t.Errorf("health while primaries initialize = %+v, want yellow (a new index is not red)", h)
	}
	s = startAll(t, s)
	// Replicas go where there are fewest copies: [i][0]'s to n3 (0 copies),
	// then [i][1]'s to n1 (n2 holds its primary; n1 and n3 tie at 1).
	if r := replicas(s, "i", 0)[0]; r.Node != "n3" {
		t.Errorf("[i][0] replica on %s, want n3", r.Node)
	}
	if r := replicas(s, "i", 1)[0]; r.Node != "n1" {
		t.Errorf("[i][1] replica on %s, want n1", r.Node)
	}
	h := s.Health()
	if h.Status != Green || h.ActiveShards != 4 || h.ActivePrimaryShards != 2 || h.ActiveShardsPercent != 100 {
		t.Errorf("health = %+v, want green with 4 active shards", h)
	}

	_, err := apply(t, s, createTask("i", 1, 0))
	if !errors.Is(err, ErrIndexExists) || err.Error() != "index [i/uuid-i] already exists" {
		t.Errorf("create of an existing name = %v, want ResourceAlreadyExistsException's words", err)
	}
	for _, settings := range []map[string]string{
		{"index.number_of_replicas": "1"},
		{"index.number_of_shards": "0", "index.number_of_replicas": "1"},
		{"index.number_of_shards": "x", "index.number_of_replicas": "1"},
		{"index.number_of_shards": "2", "index.number_of_replicas": "-1"},
		{"index.number_of_shards": "2", "index.number_of_replicas": "1", "index.number_of_routing_shards": "1"},
	} {
		if _, err := apply(t, s, Task{CreateIndex: &CreateIndex{Name: "j", UUID: "uuid-j", Settings: settings}}); !errors.Is(err, ErrInvalidTask) {
			t.Errorf("create with %v = %v, want ErrInvalidTask", settings, err)
		}
	}
}

func TestShardStartedIsStaleUnlessTheCopyInitializes(t *testing.T) {
	s := mustApply(t, bootstrap(t, "n1", "n2"), createTask("i", 1, 1))
	p := primary(t, s, "i", 0)
	for _, tc := range []struct {
		name string
		t    ShardStarted
	}{
		{"unknown index", ShardStarted{Index: "nope", AllocationID: p.AllocationID}},
		{"unknown allocation id", ShardStarted{Index: "i", AllocationID: "nope"}},
		{"older primary term", ShardStarted{Index: "i", AllocationID: p.AllocationID, PrimaryTerm: 7}},
	} {
		if _, err := apply(t, s, Task{ShardStarted: &tc.t}); !errors.Is(err, ErrStale) {
			t.Errorf("%s: Apply = %v, want ErrStale", tc.name, err)
		}
	}
	started := mustApply(t, s, Task{ShardStarted: &ShardStarted{Index: "i", AllocationID: p.AllocationID, PrimaryTerm: 1}})
	if got := started.Indices["i"].InSync[0]; !slices.Equal(got, []string{p.AllocationID}) {
		t.Errorf("in-sync after the primary started = %v, want [%s]", got, p.AllocationID)
	}
	if _, err := apply(t, started, Task{ShardStarted: &ShardStarted{Index: "i", AllocationID: p.AllocationID, PrimaryTerm: 1}}); !errors.Is(err, ErrStale) {
		t.Errorf("second start = %v, want ErrStale", err)
	}
}

// green3 is a green cluster of three nodes with index i (2 shards, 1
// replica): [i][0] primary on n1, replica on n3; [i][1] primary on n2,
// replica on n1.
func green3(t *testing.T) *State {
	return startAll(t, mustApply(t, bootstrap(t, "n1", "n2", "n3"), createTask("i", 2, 1)))
}

func TestShardFailed(t *testing.T) {
	s := green3(t)
	p, r := primary(t, s, "i", 0), copyOn(t, s, "i", 0, "n3")

	t.Run("a primary of an older term is no longer primary", func(t *testing.T) {
		promoted := mustApply(t, s, Task{NodeLeft: &NodeLeft{Name: "n1"}}) // term 2
		_, err := apply(t, promoted, Task{ShardFailed: &ShardFailed{Index: "i", Shard: 0, AllocationID: r.AllocationID, PrimaryTerm: 1, MarkStale: true}})
		if !errors.Is(err, ErrNoLongerPrimary) || err.Error() != "primary term [1] did not match current primary term [2]" {
			t.Errorf("Apply = %v, want NoLongerPrimaryShardException's words", err)
		}
	})
	t.Run("an unknown copy is stale", func(t *testing.T) {
		for _, term := range []uint64{0, 1} {
			if _, err := apply(t, s, Task{ShardFailed: &ShardFailed{Index: "i", Shard: 0, AllocationID: "nope", PrimaryTerm: term}}); !errors.Is(err, ErrStale) {
				t.Errorf("term %d: Apply = %v, want ErrStale", term, err)
			}
		}
		if _, err := apply(t, s, Task{ShardFailed: &ShardFailed{Index: "nope", AllocationID: r.AllocationID}}); !errors.Is(err, ErrStale) {
			t.Errorf("unknown index: Apply = %v, want ErrStale", err)
		}
	})
	t.Run("a replica marked stale leaves the in-sync set and recovers elsewhere", func(t *testing.T) {
		next := mustApply(t, s, Task{ShardFailed: &ShardFailed{Index: "i", Shard: 0, AllocationID: r.AllocationID, PrimaryTerm: 1, MarkStale: true, Reason: "write failed"}})
		if got := next.Indices["i"].InSync[0]; !slices.Equal(got, []string{p.AllocationID}) {
			t.Errorf("in-sync = %v, want only the primary", got)
		}
		nr := replicas(next, "i", 0)[0]
		if nr.Node != "n2" || nr.State != Initializing || nr.AllocationID == r.AllocationID {
			t.Errorf("replica = %+v, want a new copy initializing on n2 (not back on n3, where it failed)", nr)
		}
		if nr.UnassignedReason != ReasonAllocationFailed || nr.FailedAllocations != 1 || nr.UnassignedDetails != "failed shard on node [id-n3]: write failed" {
			t.Errorf("replica's unassigned info = %+v", nr)
		}
		if next.Indices["i"].PrimaryTerms[0] != 1 {
			t.Errorf("a replica's failure changed the term to %d", next.Indices["i"].PrimaryTerms[0])
		}
	})
	t.Run("a replica that fails itself stays in sync", func(t *testing.T) {
		next := mustApply(t, s, Task{ShardFailed: &ShardFailed{Index: "i", Shard: 0, AllocationID: r.AllocationID}})
		if got := next.Indices["i"].InSync[0]; !slices.Contains(got, r.AllocationID) {
			t.Errorf("in-sync = %v, want it to keep %s", got, r.AllocationID)
		}
	})
	t.Run("a failed primary is replaced by its in-sync replica under a new term", func(t *testing.T) {
		next := mustApply(t, s, Task{ShardFailed: &ShardFailed{Index: "i", Shard: 0, AllocationID: p.AllocationID, MarkStale: true}})
		np := primary(t, next, "i", 0)
		if np.AllocationID != r.AllocationID || !np.Active() || next.Indices["i"].PrimaryTerms[0] != 2 {
			t.Errorf("primary = %+v term %d, want %s promoted at term 2", np, next.Indices["i"].PrimaryTerms[0], r.AllocationID)
		}
		if got := next.Indices["i"].InSync[0]; !slices.Equal(got, []string{r.AllocationID}) {
			t.Errorf("in-sync = %v, want the promoted replica alone", got)
		}
	})
	t.Run("a primary marked stale keeps its id when no copy is left active", func(t *testing.T) {
		// n2 left with j's replica, whose id stays in sync; then the
		// primary fails, marked stale. Dropping its id would leave only the
		// departed replica's, and a primary could only come back there.
		two := startAll(t, mustApply(t, bootstrap(t, "n1", "n2"), createTask("j", 1, 1)))
		lp, lr := primary(t, two, "j", 0), copyOn(t, two, "j", 0, "n2")
		two = mustApply(t, two, Task{NodeLeft: &NodeLeft{Name: "n2"}})
		next := mustApply(t, two, Task{ShardFailed: &ShardFailed{Index: "j", AllocationID: lp.AllocationID, MarkStale: true}})
		if got, want := next.Indices["j"].InSync[0], []string{lp.AllocationID, lr.AllocationID}; !slices.Equal(got, slices.Sorted(slices.Values(want))) {
			t.Errorf("in-sync = %v, want %v: the failed primary's id is kept", got, want)
		}
		np := primary(t, next, "j", 0)
		if np.State != Unassigned || np.AllocationStatus != StatusNoValidShardCopy || next.Health().Status != Red {
			t.Errorf("primary = %+v, health %s; want it unassigned (not back on n1 this round) and red", np, next.Health().Status)
		}
		back := mustApply(t, next, Task{Reroute: &Reroute{}})
		if np := primary(t, back, "j", 0); np.Node != "n1" || np.AllocationID != lp.AllocationID || np.RecoverySource != ExistingStore {
			t.Errorf("after a reroute the primary is %+v, want n1's copy %s reopened", np, lp.AllocationID)
		}
	})
	t.Run("an in-sync id without a copy is removed when its primary asks", func(t *testing.T) {
		left := startAll(t, mustApply(t, mustApply(t, s, Task{NodeLeft: &NodeLeft{Name: "n2"}}), Task{NodeLeft: &NodeLeft{Name: "n3"}}))
		// [i][0]: primary on n1; r (on n3) is in sync but has no copy.
		if got := left.Indices["i"].InSync[0]; !slices.Contains(got, r.AllocationID) {
			t.Fatalf("in-sync = %v, want the departed replica kept", got)
		}
		if _, err := apply(t, left, Task{ShardFailed: &ShardFailed{Index: "i", Shard: 0, AllocationID: r.AllocationID, MarkStale: true}}); !errors.Is(err, ErrStale) {
			t.Errorf("without a primary term: %v, want ErrStale", err)
		}
		next := mustApply(t, left, Task{ShardFailed: &ShardFailed{Index: "i", Shard: 0, AllocationID: r.AllocationID, PrimaryTerm: 1, MarkStale: true}})
		if got := next.Indices["i"].InSync[0]; !slices.Equal(got, []string{p.AllocationID}) {
			t.Errorf("in-sync = %v, want the primary alone", got)
		}
	})
}

func TestNodeLeft(t *testing.T) {
	s := green3(t)
	p0, r0 := primary(t, s, "i", 0), copyOn(t, s, "i", 0, "n3")
	r1 := copyOn(t, s, "i", 1, "n1")
	s = mustApply(t, s, Task{NodeLeft: &NodeLeft{Name: "n1", Reason: "disconnected"}})
	if _, ok := s.Nodes["n1"]; ok {
		t.Fatal("n1 is still a node")
	}
	im := s.Indices["i"]
	if np := primary(t, s, "i", 0); np.AllocationID != r0.AllocationID || im.PrimaryTerms[0] != 2 {
		t.Errorf("[i][0] primary = %+v term %d, want n3's replica promoted at term 2", np, im.PrimaryTerms[0])
	}
	if im.PrimaryTerms[1] != 1 {
		t.Errorf("[i][1] lost a replica only, yet its term is %d", im.PrimaryTerms[1])
	}
	if !slices.Contains(im.InSync[0], p0.AllocationID) || !slices.Contains(im.InSync[1], r1.AllocationID) {
		t.Errorf("in-sync = %v, want the departed copies kept", im.InSync)
	}
	// Both lost copies are rebuilt at once on the nodes left.
	if r := replicas(s, "i", 0)[0]; r.Node != "n2" || r.State != Initializing || r.UnassignedReason != ReasonNodeLeft || r.UnassignedDetails != "node_left [id-n1]" {
		t.Errorf("[i][0] replica = %+v, want a new one initializing on n2", r)
	}
	if h := s.Health(); h.Status != Yellow || h.ActivePrimaryShards != 2 || h.InitializingShards != 2 {
		t.Errorf("health = %+v, want yellow with both primaries active", h)
	}
	// Once the new copies start, the in-sync sets drop the departed ids
	// (trimmed to number_of_replicas + 1 as they grow).
	s = startAll(t, s)
	for sh := range 2 {
		if got := s.Indices["i"].InSync[routing.ShardID(sh)]; len(got) != 2 || slices.Contains(got, p0.AllocationID) || slices.Contains(got, r1.AllocationID) {
			t.Errorf("[i][%d] in-sync = %v, want the two started copies", sh, got)
		}
	}
	if _, err := apply(t, s, Task{NodeLeft: &NodeLeft{Name: "n1"}}); !errors.Is(err, ErrStale) {
		t.Errorf("second NodeLeft = %v, want ErrStale", err)
	}
	if _, err := apply(t, s, Task{NodeLeft: &NodeLeft{Name: "n2", EphemeralID: "e0-n2"}}); !errors.Is(err, ErrStale) {
		t.Errorf("NodeLeft of an earlier incarnation = %v, want ErrStale", err)
	}
}

func TestAFailedPrimaryFailsTheReplicasRecoveringFromIt(t *testing.T) {
	s := startAll(t, mustApply(t, bootstrap(t, "n1", "n2"), createTask("i", 1, 0)))
	s = mustApply(t, s, Task{UpdateReplicas: &UpdateReplicas{Index: "i", Replicas: 1}})
	if r := replicas(s, "i", 0)[0]; r.State != Initializing || r.UnassignedReason != ReasonReplicaAdded {
		t.Fatalf("replica = %+v, want initializing (REPLICA_ADDED)", r)
	}
	s = mustApply(t, s, Task{NodeLeft: &NodeLeft{Name: "n1"}})
	p := primary(t, s, "i", 0)
	if p.State != Unassigned || p.RecoverySource != ExistingStore || s.Health().Status != Red {
		t.Errorf("primary = %+v, want unassigned and red: the replica never started, so it cannot be promoted", p)
	}
	if r := replicas(s, "i", 0)[0]; r.State != Unassigned || r.UnassignedReason != ReasonPrimaryFailed {
		t.Errorf("replica = %+v, want failed with its primary", r)
	}
}

func TestUpdateReplicasRemovesUnassignedThenInitializingThenStarted(t *testing.T) {
	s := green3(t)
	s = mustApply(t, s, Task{UpdateReplicas: &UpdateReplicas{Index: "i", Replicas: 3}})
	// Each shard: primary, a started replica, one initializing (the third
	// node), one unassigned (no fourth node).
	for sh := range 2 {
		var states []ShardState
		for _, c := range replicas(s, "i", routing.ShardID(sh)) {
			states = append(states, c.State)
		}
		if want := []ShardState{Started, Initializing, Unassigned}; !slices.Equal(sortedStates(states), sortedStates(want)) {
			t.Fatalf("[i][%d] replicas = %v, want %v", sh, states, want)
		}
	}
	if s.Indices["i"].Settings["index.number_of_replicas"] != "3" {
		t.Errorf("settings = %v", s.Indices["i"].Settings)
	}
	for _, tc := range []struct {
		replicas int
		left     []ShardState
	}{
		{2, []ShardState{Started, Initializing}},
		{1, []ShardState{Started}},
		{0, nil},
	} {
		next := mustApply(t, s, Task{UpdateReplicas: &UpdateReplicas{Index: "i", Replicas: tc.replicas}})
		for sh := range 2 {
			var states []ShardState
			for _, c := range replicas(next, "i", routing.ShardID(sh)) {
				states = append(states, c.State)
			}
			if !slices.Equal(sortedStates(states), sortedStates(tc.left)) {
				t.Errorf("replicas 3 → %d: [i][%d] keeps %v, want %v", tc.replicas, sh, states, tc.left)
			}
		}
	}
	if _, err := apply(t, s, Task{UpdateReplicas: &UpdateReplicas{Index: "i", Replicas: -1}}); !errors.Is(err, ErrInvalidTask) {
		t.Errorf("replicas -1 = %v, want ErrInvalidTask", err)
	}
	if _, err := apply(t, s, Task{UpdateReplicas: &UpdateReplicas{Index: "nope", Replicas: 1}}); !errors.Is(err, ErrIndexNotFound) {
		t.Errorf("unknown index = %v, want ErrIndexNotFound", err)
	}
}

func sortedStates(s []ShardState) []ShardState { return slices.Sorted(slices.Values(s)) }

func TestDeleteIndexForgetsItsCopiesOnDisk(t *testing.T) {
	s := green3(t)
	s = mustApply(t, s, Task{DeleteIndex: &DeleteIndex{Name: "i"}})
	if len(s.Indices) != 0 {
		t.Errorf("indices = %v", s.IndexNames())
	}
	for _, name := range s.NodeNames() {
		if c := s.Nodes[name].Copies; len(c) != 0 {
			t.Errorf("node %s still lists copies %+v", name, c)
		}
	}
	_, err := apply(t, s, Task{DeleteIndex: &DeleteIndex{Name: "i"}})
	if !errors.Is(err, ErrIndexNotFound) || err.Error() != "no such index [i]" {
		t.Errorf("second delete = %v, want IndexNotFoundException's words", err)
	}
	s = mustApply(t, s, createTask("i", 1, 0))
	if _, err := apply(t, s, Task{DeleteIndex: &DeleteIndex{Name: "i", UUID: "old"}}); !errors.Is(err, ErrIndexNotFound) {
		t.Errorf("delete of another incarnation = %v, want ErrIndexNotFound", err)
	}
}

// TestFullRestartReopensPrimariesOnInSyncCopiesOnly: every node leaves;
// those that come back report their disks; a primary reopens only on a copy
// in the in-sync set, the one that was primary first, and never on a stale
// copy.
func TestFullRestartReopensPrimariesOnInSyncCopiesOnly(t *testing.T) {
	s := green3(t)
	disks := map[string][]LocalCopy{}
	for _, n := range []string{"n1", "n2", "n3"} {
		disks[n] = s.Nodes[n].Copies
		s = mustApply(t, s, Task{NodeLeft: &NodeLeft{Name: n}})
	}
	if h := s.Health(); h.Status != Red || h.ActiveShards != 0 || len(s.Nodes) != 0 {
		t.Fatalf("health with no nodes = %+v, want red and nothing active", h)
	}
	inSync := s.Indices["i"].InSync
	// Back with n3 only: it holds [i][0]'s old replica (in sync) and
	// [i][1]'s replica that started after n1 left (in sync, promoted).
	n3 := node("n3")
	n3.EphemeralID = "e2-n3"
	n3.Copies = disks["n3"]
	s = mustApply(t, s, Task{NodeJoined: &NodeJoined{Node: n3}})
	for sh := range 2 {
		p := primary(t, s, "i", routing.ShardID(sh))
		lc := disks["n3"][slices.IndexFunc(disks["n3"], func(c LocalCopy) bool { return c.Shard == routing.ShardID(sh) })]
		if !slices.Contains(inSync[routing.ShardID(sh)], lc.AllocationID) {
			if p.State != Unassigned || p.AllocationStatus != StatusNoValidShardCopy {
				t.Errorf("[i][%d] primary = %+v, want no valid copy: n3's %s is not in sync %v", sh, p, lc.AllocationID, inSync[routing.ShardID(sh)])
			}
			continue
		}
		if p.Node != "n3" || p.AllocationID != lc.AllocationID || p.RecoverySource != ExistingStore {
			t.Errorf("[i][%d] primary = %+v, want n3's in-sync copy %s reopened", sh, p, lc.AllocationID)
		}
	}
}

func TestAllocationIDsAreOpenSearchShapedAndDeterministic(t *testing.T) {
	a, b := AllocationID("u", 0), AllocationID("u", 1)
	if len(a) != 22 || a == b || a != AllocationID("u", 0) || a == AllocationID("v", 0) {
		t.Errorf("AllocationID: %q %q, want 22 characters, one per (cluster, n)", a, b)
	}
}

// TestPrimaryReopensOnTheCopyThatWasPrimary: with two in-sync copies on
// the nodes' disks, the primary opens on the one that was a primary
// (PrimaryShardAllocator's PRIMARY_FIRST_COMPARATOR), not the lower name.
func TestPrimaryReopensOnTheCopyThatWasPrimary(t *testing.T) {
	for _, wasPrimary := range []string{"n1", "n2"} {
		s := &State{ClusterName: "c", ClusterUUID: "u", Version: 9, NextAllocation: 2, Nodes: map[string]NodeInfo{}}
		for i, n := range []string{"n1", "n2"} {
			ni := node(n)
			ni.Copies = []LocalCopy{{IndexUUID: "uuid-i", Shard: 0, AllocationID: AllocationID("u", uint64(i)), Primary: n == wasPrimary}}
			s.Nodes[n] = ni
		}
		left := unassignedCopyForTest(ReasonNodeLeft)
		s.Indices = map[string]*IndexMeta{"i": {
			Name: "i", UUID: "uuid-i", Settings: map[string]string{}, Shards: 1, Replicas: 1, RoutingShards: 1,
			PrimaryTerms: map[routing.ShardID]uint64{0: 3},
			InSync:       map[routing.ShardID][]string{0: slices.Sorted(slices.Values([]string{AllocationID("u", 0), AllocationID("u", 1)}))},
			Copies: map[routing.ShardID][]ShardCopy{0: {
				{Primary: true, State: Unassigned, RecoverySource: ExistingStore, UnassignedReason: left.UnassignedReason, AllocationStatus: StatusNoValidShardCopy},
				left,
			}},
			Version: 4,
		}}
		if err := s.Validate(); err != nil {
			t.Fatalf("hand-built state: %v", err)
		}
		next := mustApply(t, s, Task{Reroute: &Reroute{}})
		if p := primary(t, next, "i", 0); p.Node != wasPrimary || p.RecoverySource != ExistingStore || next.Indices["i"].PrimaryTerms[0] != 4 {
			t.Errorf("primary = %+v at term %d, want %s's copy (it was primary) at term 4", p, next.Indices["i"].PrimaryTerms[0], wasPrimary)
		}
	}
}

func unassignedCopyForTest(reason string) ShardCopy {
	return ShardCopy{State: Unassigned, RecoverySource: Peer, UnassignedReason: reason, AllocationStatus: StatusNoAttempt}
}

// TestAPrimaryItsNodeDoesNotHoldIsNotAllocatedThereAgain: a node reported
// an in-sync copy on its disk (a join sent before the directory went to
// another copy), the allocator opened the shard's primary on it, and the
// node failed it as not on its disk. The cluster forgets that copy among
// the node's, as OpenSearch's GatewayAllocator drops what it fetched from
// a node whose shard failed: the primary waits for a valid copy instead of
// failing on the same node until MaxRetries leaves the shard red, and
// opens on the other in-sync copy once its node joins.
func TestAPrimaryItsNodeDoesNotHoldIsNotAllocatedThereAgain(t *testing.T) {
	s := &State{ClusterName: "c", ClusterUUID: "u", Version: 9, NextAllocation: 2, Nodes: map[string]NodeInfo{}}
	n1 := node("n1")
	n1.Copies = []LocalCopy{{IndexUUID: "uuid-i", Shard: 0, AllocationID: AllocationID("u", 0), Primary: true}}
	s.Nodes["n1"] = n1
	left := unassignedCopyForTest(ReasonNodeLeft)
	s.Indices = map[string]*IndexMeta{"i": {
		Name: "i", UUID: "uuid-i", Settings: map[string]string{}, Shards: 1, Replicas: 1, RoutingShards: 1,
		PrimaryTerms: map[routing.ShardID]uint64{0: 3},
		InSync:       map[routing.ShardID][]string{0: slices.Sorted(slices.Values([]string{AllocationID("u", 0), AllocationID("u", 1)}))},
		Copies: map[routing.ShardID][]ShardCopy{0: {
			{Primary: true, State: Unassigned, RecoverySource: ExistingStore, UnassignedReason: left.UnassignedReason, AllocationStatus: StatusNoValidShardCopy},
			left,
		}},
		Version: 4,
	}}
	if err := s.Validate(); err != nil {
		t.Fatalf("hand-built state: %v", err)
	}
	s = mustApply(t, s, Task{Reroute: &Reroute{}})
	p := primary(t, s, "i", 0)
	if p.Node != "n1" || p.AllocationID != AllocationID("u", 0) {
		t.Fatalf("primary = %+v, want n1's reported copy", p)
	}
	for range MaxRetries {
		p = primary(t, s, "i", 0)
		if p.State != Initializing {
			break
		}
		s = mustApply(t, s, Task{ShardFailed: &ShardFailed{Index: "i", Shard: 0, AllocationID: p.AllocationID,
			PrimaryTerm: s.Indices["i"].PrimaryTerms[0], Reason: "the copy on disk is not the one allocated", NotOnDisk: true}})
		s = mustApply(t, s, Task{Reroute: &Reroute{}})
	}
	if _, ok := slices.BinarySearchFunc(s.Nodes["n1"].Copies, LocalCopy{IndexUUID: "uuid-i", Shard: 0}, func(x, y LocalCopy) int { return int(x.Shard) - int(y.Shard) }); ok {
		t.Errorf("n1's copies on disk = %+v, want the missing copy forgotten", s.Nodes["n1"].Copies)
	}
	if p := primary(t, s, "i", 0); p.State != Unassigned || p.AllocationStatus != StatusNoValidShardCopy || p.FailedAllocations != 1 {
		t.Fatalf("primary after n1 failed it = %+v, want unassigned with no valid copy after one failure", p)
	}
	n2 := node("n2")
	n2.Copies = []LocalCopy{{IndexUUID: "uuid-i", Shard: 0, AllocationID: AllocationID("u", 1)}}
	s = mustApply(t, s, Task{NodeJoined: &NodeJoined{Node: n2}})
	if p := primary(t, s, "i", 0); p.Node != "n2" || p.AllocationID != AllocationID("u", 1) || p.RecoverySource != ExistingStore {
		t.Fatalf("primary once n2 joined = %+v, want n2's in-sync copy reopened", p)
	}
}
