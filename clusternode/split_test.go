package clusternode

import (
	"fmt"
	"testing"

	"github.com/shardsplit/shardsplit/cluster"
)

// load writes documents of new ids through every live node, a few each
// round, and remembers the acknowledged ones.
type load struct {
	w        *world
	index    string
	next     int
	inflight int
	acked    map[string]string
	failed   int
}

func newLoad(w *world, index string) *load {
	return &load{w: w, index: index, acked: map[string]string{}}
}

// issue sends k writes, round robin over the live nodes.
func (l *load) issue(k int) {
	live := l.w.live()
	for range k {
		id, v := fmt.Sprint("d", l.next), fmt.Sprint("v", l.next)
		node := live[l.next%len(live)].n
		l.next++
		l.inflight++
		node.IndexDoc(l.index, id, "", []byte(v), false, func(r DocResult, err error) {
			l.inflight--
			if err != nil {
				l.failed++
				return
			}
			l.acked[id] = v
		})
	}
}

// runWriting runs rounds with writes until cond holds.
func (l *load) runWriting(limit int, what string, cond func() bool) {
	l.w.t.Helper()
	for i := 0; i < limit; i++ {
		if cond() {
			return
		}
		l.issue(2)
		l.w.round()
	}
	l.w.t.Fatalf("after %d rounds under writes: %s never held", limit, what)
}

// check reads every acknowledged document back through node name.
func (l *load) check(name string) {
	l.w.t.Helper()
	for id, v := range l.acked {
		g := l.w.get(name, l.index, id)
		if g.err != nil || !g.found || string(g.doc.Source) != v {
			l.w.t.Fatalf("acknowledged %s=%s reads %+v", id, v, g)
		}
	}
}

func (w *world) createSplittable(name, index string) {
	w.t.Helper()
	err := do(w, name, func(n *Node, done func(error)) {
		n.CreateIndex(index, map[string]string{"index.number_of_shards": "1", "index.number_of_replicas": "1",
			"index.number_of_routing_shards": "8"}, nil, 0, done)
	})
	if err != nil {
		w.t.Fatalf("create index %s: %v", index, err)
	}
}

func (w *world) handedOff(index string) bool {
	im := w.any().State().Indices[index]
	_, ok := im.Handoffs[0]
	return ok
}

func (w *world) splitting(index string) bool {
	im := w.any().State().Indices[index]
	return len(im.Splits) > 0
}

func TestAReplicatedShardSplitsUnderWritesWithNothingAcknowledgedLost(t *testing.T) {
	for seed := uint64(1); seed <= 2; seed++ {
		w := newWorld(t, seed, "n1", "n2", "n3")
		w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
		w.createSplittable("n1", "logs")
		w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
		l := newLoad(w, "logs")
		l.runWriting(100, "some writes", func() bool { return len(l.acked) >= 40 })
		from := l.next
		var splitErr error
		began := false
		w.nodes["n2"].n.SplitShard("logs", 0, 2, func(err error) { splitErr, began = err, true })
		l.runWriting(600, "the split handed off and green", func() bool {
			return began && w.handedOff("logs") && w.health("logs") == cluster.Green
		})
		if splitErr != nil {
			t.Fatalf("seed %d: split: %v", seed, splitErr)
		}
		w.runUntil(300, "writes answered", func() bool { return l.inflight == 0 })
		im := w.any().State().Indices["logs"]
		if got := im.ShardIDs(); len(got) != 2 {
			t.Fatalf("seed %d: shards after the split %v", seed, got)
		}
		during := 0
		for i := from; i < l.next; i++ {
			if _, ok := l.acked[fmt.Sprint("d", i)]; ok {
				during++
			}
		}
		if during < 5 {
			t.Fatalf("seed %d: only %d writes acknowledged while the split ran", seed, during)
		}
		l.check("n3")
		w.runUntil(50, "copies equal", func() bool { return w.copiesEqual("logs") == nil })
		t.Logf("seed %d: %d writes acknowledged (%d while the split ran), %d failed", seed, len(l.acked), during, l.failed)
	}
}
