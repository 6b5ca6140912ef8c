package clusternode

import (
	"errors"
	"testing"

	"github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/replication"
	"github.com/shardsplit/shardsplit/transport"
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

// TestAnUnansweredWriteIsNotSentToANewPrimary: a write reaches its
// primary, which applies and replicates it, and the answer is lost; then
// the primary fails and a replica takes over with the write. The
// coordinator must not send the write to the new primary (which would
// apply it a second time, after whatever came since): the outcome is
// unknown, and the client is told so.
func TestAnUnansweredWriteIsNotSentToANewPrimary(t *testing.T) {
	w := newWorld(t, 21, "n1", "n2", "n3")
	w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
	w.createIndex("n1", "logs", 1, 1)
	w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
	im := w.any().State().Indices["logs"]
	primary := primaryNode(im, 0)
	var coord string
	for _, c := range im.Copies[0] {
		if !c.Primary {
			coord = c.Node // the replica's node coordinates: it will be the new primary
		}
	}
	var got *docAnswer
	// The answer is lost: the loop below drops it.
	w.nodes[coord].n.IndexDoc("logs", "d", "", []byte("v"), false, func(r DocResult, err error) { got = &docAnswer{r, err} })
	w.nodes[coord].n.Flush()
	// Let the write be applied and replicated, dropping only the answer.
	for i := 0; i < 20 && got == nil; i++ {
		for j := 0; j < 10000 && w.net.Pending() > 0; j++ {
			m, ok := w.net.Deliver(0)
			if !ok {
				continue
			}
			if m.Kind == kindWriteResult {
				continue // lost
			}
			if wn := w.nodes[m.To]; !wn.dead {
				wn.n.Step(m)
			}
		}
		for _, wn := range w.live() {
			wn.n.Tick()
		}
	}
	if got != nil {
		t.Fatalf("the write was answered (%+v) though its answer was to be lost", *got)
	}
	w.crash(primary)
	w.runUntil(600, "the write answered", func() bool { return got != nil })
	if got.err == nil && got.res.Version != 1 {
		t.Fatalf("the write was applied twice: %+v (version %d)", got.res, got.res.Version)
	}
	g := w.get(coord, "logs", "d")
	if g.err != nil || !g.found || g.doc.Version != 1 {
		t.Fatalf("get d = %+v, want the one write at version 1", g)
	}
}

// TestAnAnswerToARestartedCoordinatorsPreviousLifeIsNotTakenForItsNewRequest:
// a primary answers a write once every in-sync copy has it, which may be
// after the coordinator that sent it restarted. The restarted coordinator
// numbers its requests from 1 again, and the old answer, addressed to its
// node, names a request number its new life uses for another write: it
// must not take that answer as the new write's (acknowledging a write
// never applied).
func TestAnAnswerToARestartedCoordinatorsPreviousLifeIsNotTakenForItsNewRequest(t *testing.T) {
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
	var first *docAnswer
	w.nodes[coord].n.IndexDoc("logs", "a", "", []byte("va"), false, func(r DocResult, err error) { first = &docAnswer{r, err} })
	w.nodes[coord].n.Flush()
	// The write is applied everywhere; its answer is held back.
	var late *transport.Message
	for i := 0; i < 20 && late == nil; i++ {
		for j := 0; j < 10000 && w.net.Pending() > 0; j++ {
			m, ok := w.net.Deliver(0)
			if !ok {
				continue
			}
			if m.Kind == kindWriteResult {
				late = &m
				continue
			}
			if wn := w.nodes[m.To]; !wn.dead {
				wn.n.Step(m)
			}
		}
		for _, wn := range w.live() {
			wn.n.Tick()
		}
	}
	if late == nil || first != nil {
		t.Fatalf("the write of a was answered (%v) or its answer never sent (%v)", first, late)
	}
	w.crash(coord)
	w.start(coord)
	w.runUntil(300, coord+" back", func() bool {
		st := w.nodes[primary].n.State()
		return st.Nodes[coord].EphemeralID == w.nodes[coord].n.ephemeral
	})
	var second *docAnswer
	w.nodes[coord].n.IndexDoc("logs", "b", "", []byte("vb"), false, func(r DocResult, err error) { second = &docAnswer{r, err} })
	w.nodes[coord].n.Flush()
	w.nodes[coord].n.Step(*late) // the previous life's answer arrives now
	if second != nil {
		t.Fatalf("the write of b took the previous life's answer for a: %+v", *second)
	}
	w.runUntil(400, "b answered", func() bool { return second != nil })
	if second.err != nil || second.res.Result != "created" {
		t.Fatalf("index b = %+v, %v; want created", second.res, second.err)
	}
	if g := w.get(primary, "logs", "b"); g.err != nil || !g.found || string(g.doc.Source) != "vb" {
		t.Fatalf("b was acknowledged; get b = %+v", g)
	}
}

// TestAWriteAppliedByAPrimaryThatStopsIsNotRetriedOnTheNewPrimary: a
// primary applies a write and sends it to its replica, and stops (its node
// shuts down) before the replica's answer comes: it fails the write it can
// no longer acknowledge. The replica holds the write and becomes the
// primary. The write must not be retried there (it would be applied a
// second time, after whatever came since): its outcome is unknown, and
// the client is told so.
func TestAWriteAppliedByAPrimaryThatStopsIsNotRetriedOnTheNewPrimary(t *testing.T) {
	w, primary, coord, answer := writeOnlyTheReplicaAcknowledged(t)
	if err := w.nodes[primary].n.Close(); err != nil { // it answers what it can no longer acknowledge
		t.Fatal(err)
	}
	w.crash(primary)
	w.runUntil(600, "the write answered", func() bool { return *answer != nil })
	if (*answer).err == nil || !errors.Is((*answer).err, ErrOutcomeUnknown) {
		t.Fatalf("the write = %+v, %v; want its outcome unknown", (*answer).res, (*answer).err)
	}
	g := w.get(coord, "logs", "d")
	if g.err != nil || !g.found || g.doc.Version != 1 {
		t.Fatalf("get d = %+v, want the one write at version 1", g)
	}
}

// TestAWriteAppliedByAPrimaryWhoseNodeCrashesIsNotSentToTheNewPrimary: a
// primary applies a write and sends it to its replica, and its node loses
// power before any answer: nothing comes back. Once the node leaves the
// cluster the replica, which holds the write, is the primary. The
// coordinator must not send the write there (it would be applied a second
// time): a request its node left without answering may have been applied,
// so its outcome is unknown, and the client is told so at once.
func TestAWriteAppliedByAPrimaryWhoseNodeCrashesIsNotSentToTheNewPrimary(t *testing.T) {
	w, primary, coord, answer := writeOnlyTheReplicaAcknowledged(t)
	sent := w.nodes[coord].n.tick
	w.crash(primary)
	w.runUntil(600, "the write answered", func() bool { return *answer != nil })
	if (*answer).err == nil || !errors.Is((*answer).err, ErrOutcomeUnknown) {
		t.Fatalf("the write = %+v, %v; want its outcome unknown", (*answer).res, (*answer).err)
	}
	if at := w.nodes[coord].n.tick; at-sent >= resendTicks {
		t.Fatalf("the write was answered %d ticks after its primary's node crashed, not before resendTicks (%d)", at-sent, resendTicks)
	}
	g := w.get(coord, "logs", "d")
	if g.err != nil || !g.found || g.doc.Version != 1 {
		t.Fatalf("get d = %+v, want the one write at version 1", g)
	}
}

// TestAnUnansweredWriteIsNotSentAgainToItsPrimarysNextLife: a primary
// without replicas applies a write, durably, and its node crashes before
// the answer arrives; the node comes back and its copy is the primary
// again, holding the write. The coordinator's resend goes to the same node
// name, whose new life does not know the request: it must not apply it a
// second time. Whether the coordinator has seen the restart (the node's
// incarnation changed in its state) or not (the resend reaches the new
// life under the old one's name), the write's outcome is unknown.
func TestAnUnansweredWriteIsNotSentAgainToItsPrimarysNextLife(t *testing.T) {
	for _, staleCoordinator := range []bool{false, true} {
		w := newWorld(t, 21, "n1", "n2", "n3")
		w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
		w.createIndex("n1", "logs", 1, 0)
		w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
		primary := primaryNode(w.any().State().Indices["logs"], 0)
		coord := "n1"
		for _, name := range w.names {
			if name != primary && !w.nodes[name].n.mgr.IsLeader() {
				coord = name // not the cluster manager: it can miss the states
			}
		}
		var got *docAnswer
		w.nodes[coord].n.IndexDoc("logs", "d", "", []byte("v"), false, func(r DocResult, err error) { got = &docAnswer{r, err} })
		w.nodes[coord].n.Flush()
		// The write is applied; its answer is lost.
		lost := false
		for i := 0; i < 20 && !lost; i++ {
			for j := 0; j < 10000 && w.net.Pending() > 0; j++ {
				m, ok := w.net.Deliver(0)
				if !ok {
					continue
				}
				if m.Kind == kindWriteResult {
					lost = true
					continue
				}
				if wn := w.nodes[m.To]; !wn.dead {
					wn.n.Step(m)
				}
			}
			for _, wn := range w.live() {
				wn.n.Tick()
			}
		}
		if !lost || got != nil {
			t.Fatalf("stale coordinator %v: the write's answer was not sent (%v) or arrived (%v)", staleCoordinator, lost, got)
		}
		if staleCoordinator {
			w.deaf = map[string]bool{coord: true}
		}
		life := w.nodes[coord].n.State().Nodes[primary].EphemeralID
		w.crash(primary)
		w.start(primary)
		w.runUntil(600, "the write answered", func() bool { return got != nil })
		if seen := w.nodes[coord].n.State().Nodes[primary].EphemeralID; (seen == life) != staleCoordinator {
			t.Fatalf("stale coordinator %v: the coordinator knows %s as %s (before the crash: %s)", staleCoordinator, primary, seen, life)
		}
		if got.err == nil || !errors.Is(got.err, ErrOutcomeUnknown) {
			t.Fatalf("stale coordinator %v: the write = %+v, %v; want its outcome unknown", staleCoordinator, got.res, got.err)
		}
		w.deaf = nil
		w.runUntil(300, "green again", func() bool { return w.health("logs") == cluster.Green })
		g := w.get(coord, "logs", "d")
		if g.err != nil || !g.found || g.doc.Version != 1 {
			t.Fatalf("stale coordinator %v: get d = %+v, want the one write at version 1", staleCoordinator, g)
		}
	}
}

// writeOnlyTheReplicaAcknowledged sets up a shard with one replica whose
// node coordinates a write of d: the primary applies it and sends it on,
// the replica applies it, and the replica's answer is lost, so the write
// is unanswered. It returns the world, the primary's and the
// coordinator's nodes, and where the write's answer lands.
func writeOnlyTheReplicaAcknowledged(t *testing.T) (*world, string, string, **docAnswer) {
	t.Helper()
	w := newWorld(t, 21, "n1", "n2", "n3")
	w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
	w.createIndex("n1", "logs", 1, 1)
	w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
	im := w.any().State().Indices["logs"]
	primary := primaryNode(im, 0)
	var coord, replica string
	for _, c := range im.Copies[0] {
		if !c.Primary {
			coord, replica = c.Node, c.AllocationID // the replica's node coordinates: it will be the new primary
		}
	}
	replicaLCP := func() int64 {
		for _, ci := range w.nodes[coord].n.Copies() {
			if ci.AllocationID == replica {
				return ci.LCP
			}
		}
		return -2
	}
	var answer *docAnswer
	w.nodes[coord].n.IndexDoc("logs", "d", "", []byte("v"), false, func(r DocResult, err error) { answer = &docAnswer{r, err} })
	w.nodes[coord].n.Flush()
	// The replica applies the write; its answer to the primary is lost.
	for i := 0; i < 20 && replicaLCP() < 0; i++ {
		for j := 0; j < 10000 && w.net.Pending() > 0; j++ {
			m, ok := w.net.Deliver(0)
			if !ok {
				continue
			}
			if m.Kind == replication.KindResponse {
				continue // lost
			}
			if wn := w.nodes[m.To]; !wn.dead {
				wn.n.Step(m)
			}
		}
		for _, wn := range w.live() {
			wn.n.Tick()
		}
	}
	if answer != nil || replicaLCP() < 0 {
		t.Fatalf("the write was answered (%v), or the replica does not hold it (local checkpoint %d)", answer, replicaLCP())
	}
	return w, primary, coord, &answer
}
