package cluster_test

import (
	"testing"

	. "github.com/shardsplit/shardsplit/cluster"
)

// TestADelayedReplicaWhoseNodeCameBackWithAnotherCopyIsBuiltElsewhere: a
// replica waits for the node it left; that node comes back and is given
// another copy of the shard first (a replica slot failed with its
// primary). The delayed replica cannot go to its node, whose return also
// ended the timeout's wait, so it must be built elsewhere rather than
// wait for ever.
func TestADelayedReplicaWhoseNodeCameBackWithAnotherCopyIsBuiltElsewhere(t *testing.T) {
	s := bootstrap(t, "n1", "n2", "n3")
	s = mustApply(t, s, delayedTask("logs", 1, 2, ""))
	p := primary(t, s, "logs", 0)
	s = mustApply(t, s, Task{ShardStarted: &ShardStarted{Index: "logs", Shard: 0, AllocationID: p.AllocationID, PrimaryTerm: 1}})
	rs := replicas(s, "logs", 0)
	s = mustApply(t, s, Task{ShardStarted: &ShardStarted{Index: "logs", Shard: 0, AllocationID: rs[0].AllocationID}})
	left, other := rs[0].Node, rs[1].Node // rs[1] stays initializing
	s = mustApply(t, s, Task{NodeLeft: &NodeLeft{Name: left}})
	s = mustApply(t, s, Task{ShardFailed: &ShardFailed{Index: "logs", Shard: 0, AllocationID: p.AllocationID,
		PrimaryTerm: s.Indices["logs"].PrimaryTerms[0], MarkStale: false, Reason: "test"}})
	back := node(left)
	back.EphemeralID = "e2-" + left
	s = startAll(t, mustApply(t, s, Task{NodeJoined: &NodeJoined{Node: back}}))
	for _, c := range s.Indices["logs"].Copies[0] {
		if !c.Active() {
			t.Fatalf("with %s back and %s free, a copy is left %s (%s, last node %s): %+v", left, other, c.State,
				c.AllocationStatus, c.LastNode, s.Indices["logs"].Copies[0])
		}
	}
}
