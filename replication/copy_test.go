package replication

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// group is one shard's copies on named nodes, with the test as network and
// cluster manager: it delivers messages in a seeded order and carries out
// the primary's requests to fail copies.
type group struct {
	t      *testing.T
	rng    *rand.Rand
	shard  ShardKey
	copies map[string]*Copy // by node (one copy per node; its allocation id is "a-"+node)
	stores map[string]*memStore
	queue  []envelope
	down   map[string]bool // nodes whose messages are lost
	failed []failRequest
	inSync []string
	acked  map[string]string // document id → value of its last acknowledged write
}

type envelope struct {
	from, to, kind string
	body           []byte
}

type failRequest struct {
	aid       string
	term      uint64
	markStale bool
}

type groupEnv struct {
	g    *group
	node string
}

func (e groupEnv) Send(node, kind string, body any) {
	b, err := json.Marshal(body)
	if err != nil {
		e.g.t.Fatal(err)
	}
	e.g.queue = append(e.g.queue, envelope{from: e.node, to: node, kind: kind, body: b})
}

func (e groupEnv) FailCopy(shard ShardKey, aid string, term uint64, markStale bool, reason string) {
	e.g.failed = append(e.g.failed, failRequest{aid: aid, term: term, markStale: markStale})
}

func (e groupEnv) Logger() *zap.Logger { return zap.NewNop() }

func newGroup(t *testing.T, seed uint64, nodes ...string) *group {
	g := &group{t: t, rng: rand.New(rand.NewPCG(seed, 1)), shard: ShardKey{Index: "ix", Shard: 0},
		copies: map[string]*Copy{}, stores: map[string]*memStore{}, down: map[string]bool{}, acked: map[string]string{}}
	for _, n := range nodes {
		g.stores[n] = newMemStore()
		g.copies[n] = NewCopy(Config{Shard: g.shard, AllocationID: "a-" + n, Node: n, Store: g.stores[n],
			Env: groupEnv{g: g, node: n}}, 1)
		g.inSync = append(g.inSync, "a-"+n)
	}
	primary := nodes[0]
	g.copies[primary].Promote(1)
	g.updateGroup(primary)
	return g
}

// updateGroup hands the primary on node p the group as the cluster state
// has it: every copy of g.copies started, g.inSync in sync.
func (g *group) updateGroup(p string) {
	started := map[string]string{}
	for n := range g.copies {
		started["a-"+n] = n
	}
	g.copies[p].UpdateGroup(slices.Clone(g.inSync), started, nil)
}

func (g *group) deliver(e envelope) {
	c, ok := g.copies[e.to]
	if !ok || g.down[e.to] || g.down[e.from] {
		return
	}
	switch e.kind {
	case KindReplicate:
		var r replicateRequest
		if err := json.Unmarshal(e.body, &r); err != nil {
			g.t.Fatal(err)
		}
		c.OnReplicate(e.from, r)
		c.Flush() // the end of the node's step
	case KindResponse:
		var r replicateResponse
		if err := json.Unmarshal(e.body, &r); err != nil {
			g.t.Fatal(err)
		}
		c.OnResponse(r)
	}
}

// run delivers everything queued in a seeded order, then ticks every copy,
// rounds times.
func (g *group) run(rounds int) {
	for r := 0; r < rounds; r++ {
		for i := 0; i < 10000 && len(g.queue) > 0; i++ {
			k := g.rng.IntN(len(g.queue))
			e := g.queue[k]
			g.queue = slices.Delete(g.queue, k, k+1)
			g.deliver(e)
		}
		for _, n := range sortedNodes(g.copies) {
			if !g.down[n] {
				g.copies[n].Tick()
			}
		}
	}
}

func sortedNodes(m map[string]*Copy) []string {
	var out []string
	for n := range m {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func docOp(id, value string) storage.Op {
	return storage.Op{Kind: storage.OpIndex, Root: 0, Key: routing.Key(len(id)), ID: id, Source: []byte(value)}
}

// write sends one write to the primary on node p and returns a pointer to
// its result (nil until acknowledged or failed).
func (g *group) write(p, id, value string) **WriteResult {
	var res *WriteResult
	g.copies[p].Write(func(func(storage.Op) (storage.Doc, bool, error)) ([]storage.Op, any, error) {
		return []storage.Op{docOp(id, value)}, nil, nil
	}, func(r WriteResult) {
		res = &r
		if r.Err == nil {
			g.acked[id] = value
		}
	})
	g.copies[p].Flush()
	return &res
}

func (g *group) value(node, id string) (string, bool) {
	d, ok, _ := g.stores[node].Get(storage.Op{Root: 0, Key: routing.Key(len(id)), ID: id})
	return string(d.Source), ok
}

func TestAWriteIsAcknowledgedOnceEveryInSyncCopyHasIt(t *testing.T) {
	g := newGroup(t, 1, "n1", "n2", "n3")
	res := g.write("n1", "d1", "v1")
	if *res != nil {
		t.Fatalf("write acknowledged before any replica answered: %+v", **res)
	}
	g.run(1)
	if *res == nil || (*res).Err != nil {
		t.Fatalf("write result after a round = %+v, want acknowledged", *res)
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if v, ok := g.value(n, "d1"); !ok || v != "v1" {
			t.Fatalf("copy on %s holds d1 = %q, %v; want v1", n, v, ok)
		}
	}
	if got := (*res).Seqs; !slices.Equal(got, []int64{0}) {
		t.Fatalf("the first write's _seq_no = %v, want [0]", got)
	}
}

func TestGlobalCheckpointIsTheLowestInSyncCheckpointAndNeverGoesBack(t *testing.T) {
	g := newGroup(t, 2, "n1", "n2", "n3")
	for i := range 5 {
		g.write("n1", fmt.Sprint("d", i), "v")
	}
	g.run(1)
	p := g.copies["n1"]
	if got := p.GlobalCheckpoint(); got != 4 {
		t.Fatalf("global checkpoint after 5 replicated writes = %d, want 4", got)
	}
	g.down["n3"] = true
	g.write("n1", "d5", "v")
	g.run(1)
	if got := p.GlobalCheckpoint(); got != 4 {
		t.Fatalf("global checkpoint with n3 behind = %d, want 4 (n3's)", got)
	}
	// I1 on the replicas too: no copy knows a global checkpoint above its
	// own local checkpoint.
	for n, c := range g.copies {
		if c.GlobalCheckpoint() > c.LocalCheckpoint() {
			t.Fatalf("%s: global checkpoint %d above local %d", n, c.GlobalCheckpoint(), c.LocalCheckpoint())
		}
	}
}

func TestAWriteWaitsUntilAFailedCopyLeavesTheInSyncSet(t *testing.T) {
	g := newGroup(t, 3, "n1", "n2", "n3")
	g.down["n3"] = true
	res := g.write("n1", "d1", "v1")
	g.run(int(g.copies["n1"].cfg.FailTicks) + 2)
	if *res != nil {
		t.Fatalf("write acknowledged while in-sync n3 does not have it: %+v", **res)
	}
	if len(g.failed) == 0 || g.failed[0].aid != "a-n3" || !g.failed[0].markStale {
		t.Fatalf("fail requests = %+v, want a-n3 marked stale", g.failed)
	}
	// The cluster manager commits a state without a-n3 in sync.
	g.inSync = []string{"a-n1", "a-n2"}
	delete(g.copies, "n3")
	g.updateGroup("n1")
	if *res == nil || (*res).Err != nil {
		t.Fatalf("write after the in-sync removal = %+v, want acknowledged", *res)
	}
}

func TestANewPrimaryUndoesWhatItNeverHadOnTheOtherCopies(t *testing.T) {
	g := newGroup(t, 4, "n1", "n2", "n3")
	for i := range 3 {
		g.write("n1", fmt.Sprint("d", i), "old")
	}
	g.run(1)
	// n3 stops hearing; n1 applies three more that only n2 gets.
	g.down["n3"] = true
	g.write("n1", "d0", "unacked")
	g.write("n1", "d7", "unacked")
	g.run(1)
	if v, _ := g.value("n2", "d7"); v != "unacked" {
		t.Fatalf("n2 should hold the unacknowledged write before the failover, holds %q", v)
	}
	// n1 dies; n3 (behind) becomes primary with term 2.
	g.down["n1"] = true
	delete(g.down, "n3")
	g.queue = nil
	g.inSync = []string{"a-n2", "a-n3"}
	delete(g.copies, "n1")
	g.copies["n3"].Promote(2)
	g.updateGroup("n3")
	g.run(3)
	if _, ok := g.value("n2", "d7"); ok {
		t.Fatalf("n2 still holds d7, which the new primary never had")
	}
	if v, _ := g.value("n2", "d0"); v != "old" {
		t.Fatalf("n2's d0 = %q, want the acknowledged \"old\" back", v)
	}
	if a, b := g.copies["n2"].LocalCheckpoint(), g.copies["n3"].LocalCheckpoint(); a != b {
		t.Fatalf("local checkpoints after the resync: n2 %d, n3 %d", a, b)
	}
	res := g.write("n3", "d8", "new")
	g.run(1)
	if *res == nil || (*res).Err != nil || (*res).Term != 2 {
		t.Fatalf("a write under the new primary = %+v, want acknowledged at term 2", *res)
	}
}

func TestAReplacedPrimaryCannotAcknowledgeWrites(t *testing.T) {
	g := newGroup(t, 5, "n1", "n2")
	g.write("n1", "d1", "v1")
	g.run(1)
	// The cluster manager promoted n2 (term 2); n1 did not hear of it.
	g.copies["n2"].Demote()
	g.copies["n2"].Promote(2)
	res := g.write("n1", "d1", "lost")
	g.run(2)
	if *res == nil || (*res).Err == nil {
		t.Fatalf("a write on the replaced primary = %+v, want it to fail", *res)
	}
	if v, _ := g.value("n2", "d1"); v != "v1" {
		t.Fatalf("the new primary's d1 = %q, want v1", v)
	}
}

// TestLossReorderAndDuplicationConverge: with a lossy network every
// acknowledged write is on every copy, and once the network heals the
// copies hold the same documents.
func TestLossReorderAndDuplicationConverge(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		g := newGroup(t, seed, "n1", "n2", "n3")
		var results []**WriteResult
		for i := 0; i < 200; i++ {
			results = append(results, g.write("n1", fmt.Sprint("d", g.rng.IntN(20)), fmt.Sprint("v", i)))
			for j := range g.queue {
				if g.rng.IntN(10) == 0 {
					g.queue[j].to = "nowhere"
				}
			}
			if len(g.queue) > 0 && g.rng.IntN(3) == 0 {
				g.queue = append(g.queue, g.queue[g.rng.IntN(len(g.queue))])
			}
			if g.rng.IntN(4) == 0 {
				g.run(1)
			}
		}
		g.run(30)
		for i, r := range results {
			if *r == nil || (*r).Err != nil {
				t.Fatalf("seed %d: write %d = %+v after the network healed, want acknowledged", seed, i, *r)
			}
		}
		for id, v := range g.acked {
			for _, n := range []string{"n1", "n2", "n3"} {
				if got, _ := g.value(n, id); got != v {
					t.Fatalf("seed %d: %s holds %s = %q, want the last acknowledged %q", seed, n, id, got, v)
				}
			}
		}
		if len(g.failed) != 0 {
			t.Fatalf("seed %d: copies failed on a network that only lost messages: %+v", seed, g.failed)
		}
	}
}

// TestACopyMarkedInSyncGatesWritesBeforeTheClusterStateSaysSo: a recovered
// copy the primary marked in sync counts for every later write even while
// the cluster manager has not yet recorded it (its ShardStarted is in
// flight), because the cluster manager may promote it as soon as it does.
func TestACopyMarkedInSyncGatesWritesBeforeTheClusterStateSaysSo(t *testing.T) {
	g := newGroup(t, 6, "n1", "n2")
	g.inSync = []string{"a-n1"} // n2 is recovering: started in no state yet
	p := g.copies["n1"]
	p.UpdateGroup([]string{"a-n1"}, map[string]string{"a-n1": "n1"}, map[string]string{"a-n2": "n2"})
	p.StartTracking("a-n2", NoOpsPerformed)
	g.run(1)
	if !p.MarkInSync("a-n2") {
		t.Fatal("a caught-up copy was not marked in sync")
	}
	// Another state arrives (anything: a second index, a setting) before
	// the one that records n2 in sync.
	p.UpdateGroup([]string{"a-n1"}, map[string]string{"a-n1": "n1"}, map[string]string{"a-n2": "n2"})
	g.down["n2"] = true
	res := g.write("n1", "d1", "v1")
	g.run(2)
	if *res != nil {
		t.Fatalf("a write was acknowledged without the copy the primary marked in sync: %+v", **res)
	}
}

// TestALateStaleTermAnswerDoesNotDemoteANewerPrimary: a copy answers a
// primary's request of an older term with StaleTerm. That answer may
// arrive late, when the copy it was meant for has since become the
// primary under a term at least the answering copy's; it says nothing of
// the current term and must not make the primary give up for good.
func TestALateStaleTermAnswerDoesNotDemoteANewerPrimary(t *testing.T) {
	g := newGroup(t, 1, "n1", "n2")
	g.copies["n1"].Promote(3)
	g.updateGroup("n1")
	g.run(3)
	// n2 answered a request of term 1 while it was at term 2.
	g.copies["n1"].OnResponse(replicateResponse{Shard: g.shard, From: "a-n2", Term: 2, StaleTerm: true, LCP: -1})
	if !g.copies["n1"].IsPrimary() {
		t.Fatal("the primary of term 3 gave up on an answer to a request of term 1")
	}
	res := g.write("n1", "d", "v")
	g.run(5)
	if *res == nil || (*res).Err != nil {
		t.Fatalf("a write after the late answer = %+v, want acknowledged", *res)
	}
}

// TestALostGlobalCheckpointSyncIsSentAgain: an idle primary carries the
// global checkpoint to its copies in a request of its own; when that
// request is lost, it must send it again until the copy says it knows the
// checkpoint, or the copy keeps an old one for as long as no write comes.
func TestALostGlobalCheckpointSyncIsSentAgain(t *testing.T) {
	g := newGroup(t, 1, "n1", "n2")
	res := g.write("n1", "d", "v")
	g.run(1) // the write and its answer; then the primary's tick sends the new global checkpoint
	if *res == nil || (*res).Err != nil {
		t.Fatalf("write = %+v, want acknowledged", *res)
	}
	primary := g.copies["n1"]
	if g.copies["n2"].GlobalCheckpoint() >= primary.GlobalCheckpoint() || len(g.queue) == 0 {
		t.Fatalf("the replica knows global checkpoint %d, the primary %d, with %d messages queued: the test needs the sync in flight",
			g.copies["n2"].GlobalCheckpoint(), primary.GlobalCheckpoint(), len(g.queue))
	}
	g.queue = nil // the request carrying the new global checkpoint is lost
	g.run(20)
	if got, want := g.copies["n2"].GlobalCheckpoint(), primary.GlobalCheckpoint(); got != want {
		t.Fatalf("the replica's global checkpoint is %d, the primary's %d", got, want)
	}
}
