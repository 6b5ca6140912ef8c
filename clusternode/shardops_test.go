package clusternode

import (
	"testing"

	"github.com/shardsplit/shardsplit/cluster"
)

// TestAWriteFromARestartedCoordinatorIsNotTakenForAResend: a coordinator
// numbers its requests from 1 again after its process restarts; the
// primary's node must not answer the new request with the result of the
// old one of the same number (acknowledging a write it never applied).
func TestAWriteFromARestartedCoordinatorIsNotTakenForAResend(t *testing.T) {
	w := newWorld(t, 5, "n1", "n2", "n3")
	w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
	w.createIndex("n1", "logs", 1, 1)
	w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
	primary := primaryNode(w.any().State().Indices["logs"], 0)
	coord := "n1"
	for _, name := range w.names {
		if name != primary {
			coord = name
		}
	}
	if a := w.index(coord, "logs", "a", "va"); a.err != nil {
		t.Fatalf("index a through %s: %v", coord, a.err)
	}
	w.crash(coord)
	w.start(coord)
	w.runUntil(300, coord+" back", func() bool {
		st := w.nodes[primary].n.State()
		return st.Nodes[coord].EphemeralID == w.nodes[coord].n.ephemeral
	})
	a := w.index(coord, "logs", "b", "vb")
	if a.err != nil || a.res.Result != "created" {
		t.Fatalf("index b through the restarted %s = %+v, %v; want created", coord, a.res, a.err)
	}
	if g := w.get(primary, "logs", "b"); g.err != nil || !g.found || string(g.doc.Source) != "vb" {
		t.Fatalf("b was acknowledged; get b = %+v", g)
	}
}
