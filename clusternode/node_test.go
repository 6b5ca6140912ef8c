package clusternode

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/replication"
	"github.com/shardsplit/shardsplit/storage"
	"github.com/shardsplit/shardsplit/storage/crashfs"
	"github.com/shardsplit/shardsplit/transport"
)

// world is a cluster of nodes over a simulated network, stepped by the
// test alone: it delivers pending messages in a seeded order and ticks
// every live node between rounds.
type world struct {
	t     testing.TB
	rng   *rand.Rand
	net   *transport.Network
	nodes map[string]*worldNode
	names []string
	// fileStores puts copies on the test's file store instead of Pebble.
	fileStores bool
	// lagging names copies (allocation ids) that take a primary's
	// operations only every fourth round: their replication lags behind.
	lagging map[string]bool
	rounds  int
	// deaf names nodes that hear nothing from the cluster manager: their
	// cluster state stays where it is.
	deaf map[string]bool
	held []transport.Message // lagging messages, sent again next round unless their sender crashed
	// delivered counts the messages delivered, by kind.
	delivered map[string]int
}

type worldNode struct {
	name  string
	disk  *crashfs.Disk
	n     *Node
	dead  bool
	lives int
}

// endpoint gives a network endpoint the address book a node uses:
// addresses are node names here.
type endpoint struct{ transport.Transport }

func (e endpoint) SendAddr(addr string, m transport.Message) { m.To = addr; e.Send(m) }
func (e endpoint) SetPeer(name, addr string)                 {}

func newWorld(t testing.TB, seed uint64, names ...string) *world {
	w := &world{t: t, rng: rand.New(rand.NewPCG(seed, 7)), net: transport.NewNetwork(), nodes: map[string]*worldNode{}, names: names}
	for _, name := range names {
		w.nodes[name] = &worldNode{name: name, disk: crashfs.New()}
		w.start(name)
	}
	return w
}

func (w *world) start(name string) {
	wn := w.nodes[name]
	wn.lives++
	fs := wn.disk.FS(nil)
	n, err := Open(Config{Name: name, DataDir: "/data", FS: fs, TransportAddr: name, Seeds: w.names,
		InitialManagers: w.names, Transport: endpoint{w.net.Endpoint(name)}, Stores: w.stores(fs),
		Rand: rand.New(rand.NewPCG(w.rng.Uint64(), uint64(wn.lives))), EphemeralID: fmt.Sprintf("%s-life%d", name, wn.lives)})
	if err != nil {
		w.t.Fatal(err)
	}
	wn.n, wn.dead = n, false
}

// crash kills a node as a power loss would: what it did not sync is gone,
// and so are the messages on their way to it.
func (w *world) crash(name string) {
	wn := w.nodes[name]
	wn.dead = true
	wn.disk = wn.disk.Crash(0, w.rng.Uint64())
	w.net.DropTo(name)
}

func (w *world) live() []*worldNode {
	var out []*worldNode
	for _, name := range w.names {
		if wn := w.nodes[name]; !wn.dead {
			out = append(out, wn)
		}
	}
	return out
}

func (w *world) round() {
	w.rounds++
	for _, m := range w.held {
		if wn := w.nodes[m.From]; wn == nil || !wn.dead {
			w.net.Endpoint(m.From).Send(m)
		}
	}
	w.held = nil
	for i := 0; i < 20000 && w.net.Pending() > 0; i++ {
		m, ok := w.net.Deliver(w.rng.IntN(w.net.Pending()))
		if !ok {
			continue
		}
		if w.deaf[m.To] && strings.HasPrefix(m.Kind, "cm/") {
			w.held = append(w.held, m)
			continue
		}
		if m.Kind == replication.KindReplicate && len(w.lagging) > 0 && w.rounds%4 != 0 {
			if _, target, err := replication.Addressee(m); err == nil && w.lagging[target] {
				w.held = append(w.held, m)
				continue
			}
		}
		if wn := w.nodes[m.To]; wn != nil && !wn.dead {
			if w.delivered == nil {
				w.delivered = map[string]int{}
			}
			w.delivered[m.Kind]++
			wn.n.Step(m)
		}
	}
	for _, wn := range w.live() {
		wn.n.Tick()
	}
}

func (w *world) runUntil(limit int, what string, cond func() bool) {
	w.t.Helper()
	for i := 0; i < limit; i++ {
		if cond() {
			return
		}
		w.round()
	}
	w.t.Fatalf("after %d rounds: %s never held", limit, what)
}

func (w *world) any() *Node { return w.live()[0].n }

func (w *world) health(index string) cluster.HealthStatus {
	st := w.any().State()
	if st.Indices[index] == nil {
		return ""
	}
	return st.Health().Indices[index].Status
}

// do runs a request on node name and waits for its answer.
func do[T any](w *world, name string, start func(n *Node, done func(T))) T {
	w.t.Helper()
	var got *T
	start(w.nodes[name].n, func(v T) { got = &v })
	w.runUntil(400, "an answer", func() bool { return got != nil })
	return *got
}

type docAnswer struct {
	res DocResult
	err error
}

func (w *world) index(name, index, id, value string) docAnswer {
	return do(w, name, func(n *Node, done func(docAnswer)) {
		n.IndexDoc(index, id, "", []byte(value), false, func(r DocResult, err error) { done(docAnswer{r, err}) })
	})
}

type getAnswer struct {
	doc   Doc
	found bool
	err   error
}

func (w *world) get(name, index, id string) getAnswer {
	return do(w, name, func(n *Node, done func(getAnswer)) {
		n.GetDoc(index, id, "", func(d Doc, found bool, err error) { done(getAnswer{d, found, err}) })
	})
}

func (w *world) createIndex(name, index string, shards, replicas int) {
	w.t.Helper()
	err := do(w, name, func(n *Node, done func(error)) {
		n.CreateIndex(index, map[string]string{"index.number_of_shards": fmt.Sprint(shards),
			"index.number_of_replicas": fmt.Sprint(replicas)}, nil, 0, done)
	})
	if err != nil {
		w.t.Fatalf("create index %s: %v", index, err)
	}
}

// copiesEqual reports whether every started copy of every shard of index
// holds the same documents as its primary.
func (w *world) copiesEqual(index string) error {
	st := w.any().State()
	im := st.Indices[index]
	for sh, copies := range im.Copies {
		var want []string
		for _, c := range copies {
			if c.State != cluster.Started {
				continue
			}
			lc := w.nodes[c.Node].n.copies[copyKey{index: im.UUID, shard: sh}]
			if lc == nil || lc.store == nil {
				return fmt.Errorf("shard %d: started copy %s on %s has no store", sh, c.AllocationID, c.Node)
			}
			var docs []string
			_ = lc.store.Scan(func(d storage.Doc) error {
				docs = append(docs, fmt.Sprintf("%s=%s", d.ID, d.Source))
				return nil
			})
			if want == nil {
				want = docs
			} else if !slices.Equal(want, docs) {
				return fmt.Errorf("shard %d: copy on %s holds %v, another %v", sh, c.Node, docs, want)
			}
		}
	}
	return nil
}

func TestAnIndexWithAReplicaGoesGreenAndServesFromEveryNode(t *testing.T) {
	w := newWorld(t, 1, "n1", "n2", "n3")
	w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
	w.createIndex("n2", "logs", 2, 1)
	w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
	for i, name := range w.names {
		a := w.index(name, "logs", fmt.Sprint("d", i), fmt.Sprint("v", i))
		if a.err != nil || a.res.Result != "created" || a.res.Version != 1 {
			t.Fatalf("index d%d through %s = %+v, %v; want created at version 1", i, name, a.res, a.err)
		}
	}
	for i, name := range w.names {
		g := w.get(name, "logs", fmt.Sprint("d", (i+1)%3))
		if g.err != nil || !g.found || string(g.doc.Source) != fmt.Sprint("v", (i+1)%3) {
			t.Fatalf("get through %s = %+v", name, g)
		}
	}
	w.runUntil(50, "copies equal", func() bool { return w.copiesEqual("logs") == nil })
}

func TestAPrimarysNodeCrashPromotesAReplicaAndNothingAcknowledgedIsLost(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		w := newWorld(t, seed, "n1", "n2", "n3")
		w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
		w.createIndex("n1", "logs", 2, 1)
		w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
		acked := map[string]string{}
		for i := range 20 {
			id, v := fmt.Sprint("d", i), fmt.Sprint("v", i)
			if a := w.index(w.names[i%3], "logs", id, v); a.err == nil {
				acked[id] = v
			}
		}
		st := w.any().State()
		victim := primaryNode(st.Indices["logs"], 0)
		term := st.Indices["logs"].PrimaryTerms[0]
		w.crash(victim)
		var alive string
		for _, name := range w.names {
			if name != victim {
				alive = name
			}
		}
		w.runUntil(400, "shard 0 promoted", func() bool {
			im := w.nodes[alive].n.State().Indices["logs"]
			p := primaryNode(im, 0)
			return p != "" && p != victim && im.PrimaryTerms[0] > term
		})
		for i := 20; i < 30; i++ {
			id, v := fmt.Sprint("d", i), fmt.Sprint("v", i)
			a := w.index(alive, "logs", id, v)
			if a.err != nil {
				t.Fatalf("seed %d: a write after the failover: %v", seed, a.err)
			}
			acked[id] = v
		}
		for id, v := range acked {
			g := w.get(alive, "logs", id)
			if g.err != nil || !g.found || string(g.doc.Source) != v {
				t.Fatalf("seed %d: acknowledged %s=%s reads %+v after the failover", seed, id, v, g)
			}
		}
		w.start(victim)
		w.runUntil(800, "green again with the node back", func() bool { return w.health("logs") == cluster.Green })
		w.runUntil(50, "copies equal", func() bool { return w.copiesEqual("logs") == nil })
	}
}

// stores opens copies on Pebble, or, with fileStores set, on the test's
// file store.
func (w *world) stores(fs storage.FS) StoreOpener {
	if w.fileStores {
		return fileStores{fs: fs}
	}
	return Stores{FS: fs, CacheBytes: 1 << 20}
}

// TestTwoRoutingValuesOfAnIDKeepOneDocumentOnEveryCopy: a shard keeps one
// document per _id whatever routing value reached it (the _id index), on
// its primary and on its replica, which applies the primary's removals.
func TestTwoRoutingValuesOfAnIDKeepOneDocumentOnEveryCopy(t *testing.T) {
	w := newWorld(t, 3, "n1", "n2", "n3")
	w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
	// 64 routing shards: routing values a and b land on different
	// partitions of the one shard, so x/a and x/b have different keys.
	err := do(w, "n1", func(n *Node, done func(error)) {
		n.CreateIndex("one", map[string]string{"index.number_of_shards": "1", "index.number_of_replicas": "1",
			"index.number_of_routing_shards": "64"}, nil, 0, done)
	})
	if err != nil {
		t.Fatal(err)
	}
	w.runUntil(300, "one green", func() bool { return w.health("one") == cluster.Green })
	write := func(routingValue, value string) DocResult {
		a := do(w, "n2", func(n *Node, done func(docAnswer)) {
			n.IndexDoc("one", "x", routingValue, []byte(value), false, func(r DocResult, err error) { done(docAnswer{r, err}) })
		})
		if a.err != nil {
			t.Fatalf("index x with routing %q: %v", routingValue, a.err)
		}
		return a.res
	}
	if r := write("a", "v1"); r.Result != "created" || r.Version != 1 {
		t.Fatalf("first write of x = %+v, want created at version 1", r)
	}
	if r := write("b", "v2"); r.Result != "updated" || r.Version != 2 {
		t.Fatalf("x again under another routing value = %+v, want updated at version 2", r)
	}
	w.runUntil(50, "copies equal", func() bool { return w.copiesEqual("one") == nil })
	im := w.any().State().Indices["one"]
	for _, c := range im.Copies[0] {
		var docs []string
		_ = w.nodes[c.Node].n.ScanCopy(im.UUID, 0, func(d storage.Doc) error {
			docs = append(docs, fmt.Sprintf("%s/%s", d.ID, d.Routing))
			return nil
		})
		if len(docs) != 1 || docs[0] != "x/b" {
			t.Fatalf("the copy on %s holds %v, want the one document x/b", c.Node, docs)
		}
	}
	g := do(w, "n3", func(n *Node, done func(getAnswer)) {
		n.GetDoc("one", "x", "c", func(d Doc, found bool, err error) { done(getAnswer{d, found, err}) })
	})
	if g.err != nil || !g.found || string(g.doc.Source) != "v2" {
		t.Fatalf("get x with a third routing value = %+v, want v2", g)
	}
}

// A coordinator numbers its requests from 1 in every life. A primary that
// remembered the answer to "request 1 from n3" must not hand it to n3's
// next life's request 1: that write would be acknowledged and never
// applied.
func TestARestartedCoordinatorsWritesAreNotTakenForItsPreviousOnes(t *testing.T) {
	w := newWorld(t, 1, "n1", "n2", "n3")
	w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
	w.createIndex("n1", "logs", 1, 0)
	w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
	primary := primaryNode(w.any().State().Indices["logs"], 0)
	var coord string
	for _, name := range w.names {
		if name != primary {
			coord = name
		}
	}
	if a := w.index(coord, "logs", "before", "v1"); a.err != nil {
		t.Fatalf("the first life's write: %v", a.err)
	}
	w.crash(coord)
	w.start(coord)
	w.runUntil(400, "the coordinator rejoined", func() bool {
		st := w.nodes[coord].n.State()
		m, ok := st.Nodes[coord]
		return ok && m.EphemeralID == w.nodes[coord].n.ephemeral && st.Indices["logs"] != nil
	})
	if a := w.index(coord, "logs", "after", "v2"); a.err != nil {
		t.Fatalf("the second life's write: %v", a.err)
	}
	if g := w.get(primary, "logs", "after"); g.err != nil || !g.found || string(g.doc.Source) != "v2" {
		t.Fatalf("the second life's acknowledged write reads %+v", g)
	}
}

// TestAServedWritesAnswerIsKeptForAResendThenForgotten: the primary's node
// keeps a done write's answer (for a coordinator that sends it again)
// servedKeep ticks, then forgets it, oldest first, without walking the
// writes done since.
func TestAServedWritesAnswerIsKeptForAResendThenForgotten(t *testing.T) {
	w := newWorld(t, 11, "n1", "n2", "n3")
	w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
	w.createIndex("n1", "logs", 1, 0)
	w.runUntil(300, "green", func() bool { return w.health("logs") == cluster.Green })
	served := func() (total int) {
		for _, wn := range w.live() {
			total += len(wn.n.serving.writes)
		}
		return total
	}
	if a := w.index("n1", "logs", "a", `{"v":1}`); a.err != nil {
		t.Fatal(a.err)
	}
	w.round()
	if a := w.index("n2", "logs", "b", `{"v":2}`); a.err != nil {
		t.Fatal(a.err)
	}
	if got := served(); got != 2 {
		t.Fatalf("%d answers kept after two writes, want 2", got)
	}
	for range servedKeep - 5 {
		w.round()
	}
	if got := served(); got != 2 {
		t.Fatalf("%d answers kept %d ticks after two writes, want 2", got, servedKeep-5)
	}
	w.runUntil(10, "the first write's answer forgotten", func() bool { return served() == 1 })
	w.runUntil(10, "the second write's answer forgotten", func() bool { return served() == 0 })
	for _, wn := range w.live() {
		if len(wn.n.serving.done) != 0 {
			t.Fatalf("%s still lists %d done writes", wn.name, len(wn.n.serving.done))
		}
	}
}

// TestAWriteInFlightToACrashedPrimaryIsRoutedAgainOnceItsNodeLeaves: a
// write sent to a primary whose node then dies is sent to the promoted
// primary as soon as the coordinator applies the state without that node,
// not after resendTicks of silence.
func TestAWriteInFlightToACrashedPrimaryIsRoutedAgainOnceItsNodeLeaves(t *testing.T) {
	w := newWorld(t, 12, "n1", "n2", "n3")
	w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
	w.createIndex("n1", "logs", 1, 1)
	w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
	st := w.any().State()
	victim := primaryNode(st.Indices["logs"], 0)
	coord := w.names[0]
	if coord == victim {
		coord = w.names[1]
	}
	var got *docAnswer
	w.nodes[coord].n.IndexDoc("logs", "d1", "", []byte(`{"v":1}`), false, func(r DocResult, err error) { got = &docAnswer{r, err} })
	w.crash(victim) // before the write reaches it
	left := -1
	for round := 0; round < resendTicks/2 && got == nil; round++ {
		w.round()
		if _, ok := w.nodes[coord].n.State().Nodes[victim]; !ok && left < 0 {
			left = round
		}
	}
	if got == nil || got.err != nil {
		t.Fatalf("the write's answer %d rounds after its primary's node crashed (declared left at round %d): %+v; want it acknowledged, well before resendTicks (%d)",
			resendTicks/2, left, got, resendTicks)
	}
}

// A node the cluster manager declared left while it kept running holds the
// only copy of a shard without replicas. Once it is back, that copy's files
// must still be there to be opened again (EXISTING_STORE): the copy's id
// stays in the shard's in-sync set, and a node deletes the files of a copy
// it no longer holds only when no committed state can want them back.
func TestACopyOfANodeDeclaredLeftWhileRunningKeepsItsFiles(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		w := newWorld(t, seed, "n1", "n2", "n3")
		w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
		w.createIndex("n1", "logs", 1, 0)
		w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
		var acked []string
		for i := range 10 {
			id := fmt.Sprint("d", i)
			if a := w.index(w.names[i%3], "logs", id, "v"); a.err == nil {
				acked = append(acked, id)
			}
		}
		holder := primaryNode(w.any().State().Indices["logs"], 0)
		var other string
		for _, name := range w.names {
			if name != holder {
				other = name
			}
		}
		w.net.Isolate(holder)
		w.runUntil(600, "the holder declared left", func() bool {
			_, ok := w.nodes[other].n.State().Nodes[holder]
			return !ok
		})
		w.net.HealNode(holder)
		w.runUntil(1500, "logs green again with the holder back", func() bool {
			_, back := w.nodes[other].n.State().Nodes[holder]
			return back && w.health("logs") == cluster.Green
		})
		for _, id := range acked {
			if g := w.get(other, "logs", id); g.err != nil || !g.found {
				t.Fatalf("seed %d: acknowledged %s reads %+v after the holder came back", seed, id, g)
			}
		}
	}
}
