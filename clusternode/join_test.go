package clusternode

import (
	"testing"

	"github.com/shardsplit/shardsplit/cluster"
)

// TestANodeRemovedWhileItRanKeepsItsInSyncCopy: a node cut off long enough
// to fail its follower checks is removed from the cluster, its copies
// unassigned, while its process runs on. When it can talk again and
// rejoins, its join must report the copies its disk holds now: the only
// in-sync copy of a shard is there, and without it the shard has no valid
// copy (red for good) and the node, applying a state that assigns it
// nothing, deletes that copy and the acknowledged writes in it.
func TestANodeRemovedWhileItRanKeepsItsInSyncCopy(t *testing.T) {
	w := newWorld(t, 11, "n1", "n2", "n3")
	w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
	w.createIndex("n1", "logs", 1, 0)
	w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
	holder := primaryNode(w.any().State().Indices["logs"], 0)
	if a := w.index(holder, "logs", "a", "va"); a.err != nil {
		t.Fatal(a.err)
	}
	var other string
	for _, name := range w.names {
		if name != holder {
			other = name
		}
	}
	w.net.Isolate(holder)
	w.runUntil(300, holder+" removed", func() bool {
		_, ok := w.nodes[other].n.State().Nodes[holder]
		return !ok
	})
	w.net.Heal()
	w.runUntil(500, "logs green again", func() bool { return w.health("logs") == cluster.Green })
	if g := w.get(other, "logs", "a"); g.err != nil || !g.found || string(g.doc.Source) != "va" {
		t.Fatalf("the acknowledged write of a reads %+v after %s rejoined", g, holder)
	}
}

// TestAPrimaryReassignedUnderANewTermReportsStartedAgain: a node opens an
// in-sync copy as its shard's primary and reports it started; before the
// report commits, the node is cut off and removed, and when it rejoins the
// same copy is made primary again under a greater term. The first report
// is refused (the copy was unassigned meanwhile); the node, which never
// applied a state without its copy while it was cut off, must report the
// copy started again under the new term, or the shard stays red for good.
func TestAPrimaryReassignedUnderANewTermReportsStartedAgain(t *testing.T) {
	w := newWorld(t, 13, "n1", "n2", "n3")
	w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
	w.createIndex("n1", "logs", 1, 0)
	w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
	holder := primaryNode(w.any().State().Indices["logs"], 0)
	var other string
	for _, name := range w.names {
		if name != holder {
			other = name
		}
	}
	removed := func() bool {
		_, ok := w.nodes[other].n.State().Nodes[holder]
		return !ok
	}
	w.net.Isolate(holder)
	w.runUntil(300, holder+" removed", removed)
	w.net.Heal()
	// Cut the node off again the moment it reported its reopened copy
	// started, before the report can commit.
	reporting := func() bool {
		im := w.nodes[holder].n.State().Indices["logs"]
		for _, c := range im.Copies[0] {
			if c.Primary && c.Node == holder && c.State == cluster.Initializing && w.nodes[holder].n.reportedStarted(c.AllocationID) {
				return true
			}
		}
		return false
	}
	// One message at a time (a tick when none is left), to stop between
	// the report and its commit.
	for i := 0; !reporting(); i++ {
		if i == 100000 {
			t.Fatalf("%s never reported its reopened copy started", holder)
		}
		if w.net.Pending() == 0 {
			for _, wn := range w.live() {
				wn.n.Tick()
			}
			continue
		}
		if m, ok := w.net.Deliver(0); ok {
			w.nodes[m.To].n.Step(m)
		}
	}
	w.net.Isolate(holder)
	w.runUntil(300, holder+" removed again", removed)
	w.net.Heal()
	w.runUntil(500, "logs green again", func() bool { return w.health("logs") == cluster.Green })
}

func (n *Node) reportedStarted(aid string) bool {
	_, ok := n.started[aid]
	return ok
}

// TestACopyFailedWhileInSyncKeepsItsFiles: a copy that fails without being
// marked stale stays in the in-sync set, and may be the only copy with an
// acknowledged write (here the primary of a shard with no replica): its
// node closes it but must keep its files, which the allocator opens again
// as the primary.
func TestACopyFailedWhileInSyncKeepsItsFiles(t *testing.T) {
	w := newWorld(t, 17, "n1", "n2", "n3")
	w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
	w.createIndex("n1", "logs", 1, 0)
	w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
	if a := w.index("n1", "logs", "a", "va"); a.err != nil {
		t.Fatal(a.err)
	}
	st := w.any().State()
	p, _ := st.Primary("logs", 0)
	var done bool
	w.nodes[p.Node].n.mgr.Propose(cluster.Task{ShardFailed: &cluster.ShardFailed{Index: "logs", Shard: 0,
		AllocationID: p.AllocationID, PrimaryTerm: st.Indices["logs"].PrimaryTerms[0], Reason: "test"}}, func(coordinationResult) { done = true })
	w.runUntil(100, "the failure applied", func() bool { return done })
	w.runUntil(300, "logs green again", func() bool { return w.health("logs") == cluster.Green })
	if g := w.get("n2", "logs", "a"); g.err != nil || !g.found || string(g.doc.Source) != "va" {
		t.Fatalf("the acknowledged write of a reads %+v after its only copy failed and reopened", g)
	}
}
