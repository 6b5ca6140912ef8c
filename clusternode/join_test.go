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
