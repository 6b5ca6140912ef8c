package replication

import (
	"encoding/json"
	"errors"
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
	// followers are copies of a child shard of a split, on their own
	// nodes, following the group's primary.
	followers map[string]*Copy
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
		copies: map[string]*Copy{}, followers: map[string]*Copy{}, stores: map[string]*memStore{}, down: map[string]bool{}, acked: map[string]string{}}
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
	if !ok {
		c, ok = g.followers[e.to]
	}
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
		for _, n := range sortedNodes(g.followers) {
			if !g.down[n] {
				g.followers[n].Tick()
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

// follow opens a copy of a child shard (shard 1, owning keys [lo, hi)) on
// node n and makes it a follower of the primary on node p from the
// start.
func (g *group) follow(p, n string, lo, hi uint64) *Copy {
	g.stores[n] = newMemStore()
	child := ShardKey{Index: g.shard.Index, Shard: 1}
	c := NewCopy(Config{Shard: child, AllocationID: "a-" + n, Node: n, Store: g.stores[n], Env: groupEnv{g: g, node: n},
		Follow: &Follow{Keyspace: 0, Spans: []routing.Span{{Start: lo, End: hi}}}}, 1)
	g.followers[n] = c
	g.copies[p].StartFollowing("a-"+n, n, child, NoOpsPerformed)
	return c
}

func TestAFollowerAppliesItsRangeAndAdvancesOverTheRest(t *testing.T) {
	g := newGroup(t, 1, "n1", "n2")
	child := g.follow("n1", "c1", 0, 3) // ids of length 1 and 2
	for _, id := range []string{"a", "bb", "cccc", "ddddd", "e"} {
		g.write("n1", id, "v-"+id)
	}
	g.run(2)
	if got, want := child.LocalCheckpoint(), g.copies["n1"].LocalCheckpoint(); got != want || want != 4 {
		t.Fatalf("follower local checkpoint %d, primary %d; want both 4", got, want)
	}
	for id, want := range map[string]bool{"a": true, "bb": true, "cccc": false, "ddddd": false, "e": true} {
		if _, ok := g.value("c1", id); ok != want {
			t.Errorf("follower holds %s: %v, want %v", id, ok, want)
		}
	}
	if lcp := g.copies["n1"].Followers()["a-c1"]; lcp != 4 {
		t.Fatalf("primary knows the follower at %d, want 4", lcp)
	}
}

func TestAFollowerNeitherGatesAcknowledgementsNorTheGlobalCheckpointButKeepsItsHistory(t *testing.T) {
	g := newGroup(t, 2, "n1", "n2")
	g.follow("n1", "c1", 0, 1<<32)
	g.down["c1"] = true
	res := g.write("n1", "a", "v1")
	g.run(3)
	if *res == nil || (*res).Err != nil {
		t.Fatalf("a write waited for a follower: %+v", *res)
	}
	p := g.copies["n1"]
	if p.GlobalCheckpoint() != 0 {
		t.Fatalf("global checkpoint %d, want 0: a follower does not hold it back", p.GlobalCheckpoint())
	}
	if len(g.failed) != 0 {
		t.Fatalf("a follower silent for 3 rounds was failed: %+v", g.failed)
	}
	if len(g.stores["n1"].history) == 0 {
		t.Fatal("the primary trimmed the history its follower still needs")
	}
	g.down["c1"] = false
	g.run(4)
	if v, ok := g.value("c1", "a"); !ok || v != "v1" {
		t.Fatalf("the follower holds a = %q, %v after it came back", v, ok)
	}
}

func TestAHandoffWaitsForTheFollowersAndRetiredWritesAreRetried(t *testing.T) {
	g := newGroup(t, 3, "n1", "n2")
	g.follow("n1", "c1", 0, 1<<32)
	p := g.copies["n1"]
	g.write("n1", "a", "v1")
	p.BlockWrites()
	held := g.write("n1", "b", "v1")
	if _, _, ok := p.HandoffReady(); ok {
		t.Fatal("hand-off ready before the follower acknowledged")
	}
	g.run(2)
	term, maxSeq, ok := p.HandoffReady()
	if !ok || term != 1 || maxSeq != 0 {
		t.Fatalf("HandoffReady = %d, %d, %v; want 1, 0, true", term, maxSeq, ok)
	}
	if *held != nil || p.LocalCheckpoint() != 0 {
		t.Fatalf("a write went through the block: %+v, lcp %d", *held, p.LocalCheckpoint())
	}
	p.Retire()
	if *held == nil || !errors.Is((*held).Err, ErrHandedOff) || !errors.Is((*held).Err, ErrNotPrimary) {
		t.Fatalf("a held write after the hand-off: %+v, want ErrHandedOff wrapping ErrNotPrimary", *held)
	}
	if late := g.write("n1", "c", "v1"); *late == nil || !errors.Is((*late).Err, ErrHandedOff) {
		t.Fatalf("a write after the hand-off: %+v, want ErrHandedOff", *late)
	}
}

func TestAfterABlockAWriteIsAcknowledgedOnlyOnceEveryFollowerHasIt(t *testing.T) {
	g := newGroup(t, 4, "n1", "n2")
	g.follow("n1", "c1", 0, 1<<32)
	p := g.copies["n1"]
	p.BlockWrites()
	res := g.write("n1", "a", "v1")
	g.down["c1"] = true
	p.Unblock() // the hand-off did not commit in time
	p.Flush()
	g.run(3)
	if *res != nil {
		t.Fatalf("a write was acknowledged without the follower after a block: %+v", **res)
	}
	g.down["c1"] = false
	g.run(4)
	if *res == nil || (*res).Err != nil {
		t.Fatalf("write result %+v, want acknowledged once the follower has it", *res)
	}
}

// A child replica hears both its parent's stream (until the hand-off) and
// its own primary's (after it), in one term: the parent's term. An
// operation the retired parent sent before the hand-off may arrive after
// the child primary's first request (which undid what the child replica
// held above the child primary's checkpoint). Applied then, it takes a
// sequence number the child primary assigns to another write, and the
// child replica acknowledges that write without holding it.
func TestAChildReplicaTakesNoParentOperationAfterItsOwnPrimarysFirstRequest(t *testing.T) {
	g := newGroup(t, 5, "n1", "n2")
	cp := g.follow("n1", "cp", 0, 1<<32)
	g.follow("n1", "cr", 0, 1<<32)
	p := g.copies["n1"]
	g.write("n1", "a", "v1")
	g.run(3)
	if cp.LocalCheckpoint() != 0 || g.followers["cr"].LocalCheckpoint() != 0 {
		t.Fatalf("followers at %d, %d; want 0", cp.LocalCheckpoint(), g.followers["cr"].LocalCheckpoint())
	}
	// The parent's next operation reaches neither follower yet: lost on
	// its way to the child primary, late on its way to the child replica.
	g.write("n1", "b", "parent's")
	var late []envelope
	g.queue = slices.DeleteFunc(g.queue, func(e envelope) bool {
		if e.from == "n1" && e.kind == KindReplicate && (e.to == "cp" || e.to == "cr") {
			if e.to == "cr" {
				late = append(late, e)
			}
			return true
		}
		return false
	})
	// The hand-off commits: the parent retires, the child primary acts
	// as its shard's primary in the parent's term.
	p.Retire()
	delete(g.copies, "n1")
	delete(g.copies, "n2")
	cr := g.followers["cr"]
	g.copies["cp"], g.copies["cr"] = cp, cr
	delete(g.followers, "cp")
	delete(g.followers, "cr")
	cp.Promote(1)
	g.inSync = []string{"a-cp", "a-cr"}
	g.updateGroup("cp")
	g.run(2) // the child primary's first requests reach the child replica
	for _, e := range late {
		g.deliver(e)
	}
	res := g.write("cp", "c", "child's")
	g.run(4)
	if *res == nil || (*res).Err != nil {
		t.Fatalf("the child primary's write: %+v", *res)
	}
	if v, ok := g.value("cr", "c"); !ok || v != "child's" {
		t.Fatalf("the child replica acknowledged c (lcp %d) without holding it: c = %q, %v; b = %q",
			cr.LocalCheckpoint(), v, ok, func() string { v, _ := g.value("cr", "b"); return v }())
	}
}

// A hand-off that commits after the parent gave up waiting for it (its
// writes unblocked) finds the child copies unequal: one holds an
// operation its sibling, the child primary, never got. The parent's
// global checkpoint covers that operation (the parent's own copies hold
// it), but no child copy may take it as its own: the child primary's first
// request must undo it there, or it takes the sequence number of a write
// the child primary acknowledges.
func TestAChildCopyTakesNoGlobalCheckpointItsSiblingsMayNotHold(t *testing.T) {
	g := newGroup(t, 6, "n1", "n2")
	cp := g.follow("n1", "cp", 0, 1<<32)
	cr := g.follow("n1", "cr", 0, 1<<32)
	p := g.copies["n1"]
	g.write("n1", "a", "v1")
	g.run(3)
	p.BlockWrites()
	g.run(2)
	if _, maxSeq, ok := p.HandoffReady(); !ok || maxSeq != 0 {
		t.Fatalf("HandoffReady = %d, %v; want 0, true", maxSeq, ok)
	}
	// The hand-off is proposed but not committed in time: writes go on,
	// and the child primary's node hears none of them.
	p.Unblock()
	g.down["cp"] = true
	g.write("n1", "b", "parent's")
	g.run(3)
	if cr.LocalCheckpoint() != 1 || cp.LocalCheckpoint() != 0 || cr.GlobalCheckpoint() < 0 {
		t.Fatalf("child replica at %d (gcp %d), child primary at %d; want 1, 0", cr.LocalCheckpoint(), cr.GlobalCheckpoint(), cp.LocalCheckpoint())
	}
	g.down["cp"] = false
	g.queue = slices.DeleteFunc(g.queue, func(e envelope) bool { return e.to == "cp" || e.from == "cp" })
	// The hand-off commits.
	p.Retire()
	delete(g.copies, "n1")
	delete(g.copies, "n2")
	g.copies["cp"], g.copies["cr"] = cp, cr
	delete(g.followers, "cp")
	delete(g.followers, "cr")
	cp.Promote(1)
	g.inSync = []string{"a-cp", "a-cr"}
	g.updateGroup("cp")
	g.run(2)
	res := g.write("cp", "c", "child's")
	g.run(4)
	if *res == nil || (*res).Err != nil {
		t.Fatalf("the child primary's write: %+v", *res)
	}
	if v, ok := g.value("cr", "c"); !ok || v != "child's" {
		t.Fatalf("the child replica acknowledged c (lcp %d, gcp %d) without holding it: c = %q, %v",
			cr.LocalCheckpoint(), cr.GlobalCheckpoint(), v, ok)
	}
}

// noWaitStore is a memStore that applies a primary's operations without
// waiting for durability, recording what the primary had sent when it
// waited for its own sync.
type noWaitStore struct {
	*memStore
	g       *group
	waited  []int // messages queued when each wait began
	durable int64 // the local checkpoint the last wait made durable
}

func (s *noWaitStore) ApplyNoWait(ops []Op, undo bool) (func() error, error) {
	if err := s.memStore.Apply(ops, undo); err != nil {
		return nil, err
	}
	lcp := s.memStore.LocalCheckpoint()
	return func() error {
		s.waited = append(s.waited, len(s.g.queue))
		s.durable = lcp
		return nil
	}, nil
}

// TestAPrimarySendsItsOperationsBeforeItsOwnSyncEnds: a primary whose
// store can apply without waiting for the fsync sends the operations to
// its replicas before it waits for its own (the two fsyncs overlap, as
// OpenSearch's primary replicates before its translog sync), and the write
// is acknowledged only once every copy, the primary too, made it durable.
func TestAPrimarySendsItsOperationsBeforeItsOwnSyncEnds(t *testing.T) {
	g := newGroup(t, 9, "n1", "n2")
	st := &noWaitStore{memStore: g.stores["n1"], g: g, durable: NoOpsPerformed}
	g.copies["n1"].store = st
	res := g.write("n1", "d1", "v1")
	if len(st.waited) != 1 || st.waited[0] == 0 {
		t.Fatalf("messages queued when the primary waited for its sync: %v; want the replicate request already sent", st.waited)
	}
	if st.durable != 0 || *res != nil {
		t.Fatalf("after the primary's flush: durable to %d, result %+v; want 0 and not yet acknowledged", st.durable, *res)
	}
	g.run(1)
	if *res == nil || (*res).Err != nil {
		t.Fatalf("write result after a round = %+v, want acknowledged", *res)
	}
	if v, ok := g.value("n2", "d1"); !ok || v != "v1" {
		t.Fatalf("the replica holds d1 = %q, %v; want v1", v, ok)
	}
}

// TestAReplicaAnswersOnlyOnceItsFlushEnded: a replica whose store applies
// without waiting applies its primary's operations when its flush starts,
// and answers, with the local checkpoint, only when it ends: after its
// fsync (a node starts every copy's flush, then ends each, so the fsyncs
// overlap).
func TestAReplicaAnswersOnlyOnceItsFlushEnded(t *testing.T) {
	g := newGroup(t, 10, "n1", "n2")
	st := &noWaitStore{memStore: g.stores["n2"], g: g, durable: NoOpsPerformed}
	g.copies["n2"].store = st
	g.write("n1", "d1", "v1")
	replica := g.copies["n2"]
	for _, e := range g.queue {
		if e.kind == KindReplicate && e.to == "n2" {
			var r replicateRequest
			if err := json.Unmarshal(e.body, &r); err != nil {
				t.Fatal(err)
			}
			replica.OnReplicate("n1", r)
		}
	}
	g.queue = nil
	end := replica.FlushStart()
	if v, ok := g.value("n2", "d1"); !ok || v != "v1" {
		t.Fatalf("after the flush's start the replica holds d1 = %q, %v; want it applied", v, ok)
	}
	if len(g.queue) != 0 || len(st.waited) != 0 {
		t.Fatalf("before the flush's end: %d messages sent, %d waits; want none", len(g.queue), len(st.waited))
	}
	end()
	if len(st.waited) != 1 || len(g.queue) != 1 || g.queue[0].kind != KindResponse {
		t.Fatalf("after the flush's end: waits %v, messages %+v; want one wait, then the answer", st.waited, g.queue)
	}
	var resp replicateResponse
	if err := json.Unmarshal(g.queue[0].body, &resp); err != nil || resp.LCP != 0 {
		t.Fatalf("the answer %+v (%v), want local checkpoint 0", resp, err)
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

// A copy closed and opened again on its files (its node took it back, or
// it became its shard's only valid copy) knows the global checkpoint it
// knew: a copy's global checkpoint never goes back while its files are
// kept, primary and replica alike.
func TestACopyOpenedAgainOnItsStoreKeepsItsGlobalCheckpoint(t *testing.T) {
	g := newGroup(t, 9, "n1", "n2", "n3")
	for i := range 4 {
		g.write("n1", fmt.Sprint("d", i), "v")
	}
	g.run(3) // the replicas hear the global checkpoint and every copy ticks
	for _, n := range []string{"n1", "n2", "n3"} {
		before := g.copies[n].GlobalCheckpoint()
		if before != 3 {
			t.Fatalf("%s: global checkpoint after 4 replicated writes = %d, want 3", n, before)
		}
		again := NewCopy(Config{Shard: g.shard, AllocationID: "a-" + n, Node: n, Store: g.stores[n],
			Env: groupEnv{g: g, node: n}}, 2)
		if got := again.GlobalCheckpoint(); got != before {
			t.Fatalf("%s: copy opened again on its store has global checkpoint %d, want %d", n, got, before)
		}
		if n == "n1" {
			again.Promote(2)
			if got := again.GlobalCheckpoint(); got != before {
				t.Fatalf("%s: reopened primary's global checkpoint = %d, want %d", n, got, before)
			}
		}
	}
}

// A primary whose history no longer holds the operations a copy needs
// fails the copy (it is rebuilt by a recovery) instead of sending it
// requests with nothing in them: each would be answered and sent again,
// without end, and the answers keep the copy from ever counting as silent.
func TestAPrimaryFailsACopyWhoseOperationsItsHistoryNoLongerHolds(t *testing.T) {
	g := newGroup(t, 1, "n1", "n2")
	g.down["n2"] = true
	g.write("n1", "d1", "v1")
	g.run(1)
	g.queue = nil
	if err := g.stores["n1"].TrimHistory(g.stores["n1"].LocalCheckpoint()); err != nil {
		t.Fatal(err)
	}
	g.down["n2"] = false
	g.run(10)
	if !slices.ContainsFunc(g.failed, func(f failRequest) bool { return f.aid == "a-n2" }) {
		t.Fatalf("the copy missing operation 0, which the primary's history no longer holds, was not failed (failed: %+v)", g.failed)
	}
}

// A new primary's history starts after the global checkpoint (as a
// replica it dropped what is below it), and the other copies hold
// everything up to it: one whose first request was lost is sent its
// stream again from the global checkpoint on, not from the start of
// the history, and is not failed for what no copy needs.
func TestANewPrimaryResendsToACopyWhoseFirstRequestWasLostWithoutFailingIt(t *testing.T) {
	g := newGroup(t, 1, "n1", "n2", "n3")
	for i := range 5 {
		g.write("n1", fmt.Sprint("d", i), "v")
	}
	g.run(3) // the writes, their answers, the global checkpoint to the replicas and their trims
	if gcp := g.copies["n2"].GlobalCheckpoint(); gcp < 4 {
		t.Fatalf("n2 knows global checkpoint %d, the test needs 4", gcp)
	}
	g.down["n1"] = true
	g.queue = nil
	delete(g.copies, "n1")
	g.inSync = []string{"a-n2", "a-n3"}
	g.copies["n2"].Promote(2)
	g.updateGroup("n2")
	g.queue = nil // the new primary's first request to n3 is lost
	g.run(10)
	if slices.ContainsFunc(g.failed, func(f failRequest) bool { return f.aid == "a-n3" }) {
		t.Fatalf("n3, which holds every operation the new primary has, was failed (failed: %+v)", g.failed)
	}
	res := g.write("n2", "d9", "new")
	g.run(2)
	if *res == nil || (*res).Err != nil {
		t.Fatalf("a write under the new primary = %+v, want acknowledged", *res)
	}
}

// A child copy built from its parent's copy on its node (the local
// strategy) holds the parent's documents up to its local checkpoint and no
// history below it, and knows no global checkpoint until the parent sends
// one. With the parent's first request carrying the global checkpoint to
// the followers lost, the hand-off still ends with the child primary
// streaming to its sibling, which holds everything the child primary
// holds, without failing it (a global checkpoint below the child
// primary's history would start the stream where it holds nothing).
func TestAChildPrimaryBuiltLocallyDoesNotFailASiblingThatHoldsWhatItHolds(t *testing.T) {
	g := newGroup(t, 7, "n1", "n2")
	for i := range 3 {
		g.write("n1", fmt.Sprint("d", i), "v")
	}
	g.run(3)
	p := g.copies["n1"]
	child := ShardKey{Index: g.shard.Index, Shard: 1}
	local := func(n, from string) *Copy {
		src := g.stores[from]
		s := newMemStore()
		for k, d := range src.docs {
			s.docs[k] = d
		}
		s.lcp = src.lcp // the history is excised; the undo floor is the parent's, not the child's
		g.stores[n] = s
		c := NewCopy(Config{Shard: child, AllocationID: "a-" + n, Node: n, Store: s, Env: groupEnv{g: g, node: n},
			Follow: &Follow{Keyspace: 0, Spans: []routing.Span{{Start: 0, End: 1 << 32}}}}, 1)
		g.followers[n] = c
		p.StartFollowing("a-"+n, n, child, s.lcp)
		return c
	}
	cp, cr := local("cp", "n1"), local("cr", "n2")
	p.BlockWrites()
	for i := 0; ; i++ {
		if i == 20 {
			t.Fatal("the hand-off never became ready")
		}
		if _, _, ok := p.HandoffReady(); ok {
			break // the node proposes the hand-off, which commits
		}
		if i == 0 {
			p.Tick()
			g.queue = nil // the first global checkpoint sent to the followers is lost
			continue
		}
		g.run(1)
	}
	p.Retire()
	delete(g.copies, "n1")
	delete(g.copies, "n2")
	g.copies["cp"], g.copies["cr"] = cp, cr
	delete(g.followers, "cp")
	delete(g.followers, "cr")
	cp.Promote(1)
	g.inSync = []string{"a-cp", "a-cr"}
	g.updateGroup("cp")
	g.run(5)
	if len(g.failed) != 0 {
		t.Fatalf("a child copy holding everything its primary holds was failed: %+v", g.failed)
	}
	res := g.write("cp", "d9", "child's")
	g.run(3)
	if *res == nil || (*res).Err != nil {
		t.Fatalf("the child primary's write: %+v", *res)
	}
}
