package clusternode

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/replication"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/transport"
)

// load writes documents of new ids through every live node, a few each
// round, and remembers the acknowledged ones.
type load struct {
	w        *world
	index    string
	next     int
	inflight int
	byNode   map[*Node]int // writes in flight by the node (the life) that coordinates them
	acked    map[string]string
	failed   int
	errs     []error
}

func newLoad(w *world, index string) *load {
	return &load{w: w, index: index, acked: map[string]string{}, byNode: map[*Node]int{}}
}

// pending counts the writes in flight on live nodes: a crashed node's
// never answer.
func (l *load) pending() int {
	n := 0
	for _, wn := range l.w.live() {
		n += l.byNode[wn.n]
	}
	return n
}

// issue sends k writes, round robin over the live nodes.
func (l *load) issue(k int) {
	live := l.w.live()
	for range k {
		id, v := fmt.Sprint("d", l.next), fmt.Sprint("v", l.next)
		node := live[l.next%len(live)].n
		l.next++
		l.inflight++
		l.byNode[node]++
		node.IndexDoc(l.index, id, "", []byte(v), false, func(r DocResult, err error) {
			l.inflight--
			l.byNode[node]--
			if err != nil {
				l.failed++
				l.errs = append(l.errs, err)
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

// rounds runs k rounds with writes.
func (l *load) rounds(k int) {
	for range k {
		l.issue(2)
		l.w.round()
	}
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

// createSplittable creates index, one shard of 8 routing shards and one
// replica, under the recover strategy: the one in which the parent
// primary streams to every child copy, which these tests follow.
func (w *world) createSplittable(name, index string) {
	w.t.Helper()
	w.createSplittableWith(name, index, cluster.StrategyRecover)
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

// splitCrashPoint is where a crash hits a split.
type splitCrashPoint struct {
	name string
	// at reports whether the split reached the point; victim names the
	// node to crash there.
	at     func(w *world) bool
	victim func(w *world) string
	// cancels: the split is rolled back, else it completes.
	cancels bool
	// childReplica: the point needs a child replica before the hand-off,
	// which handoff-first never has.
	childReplica bool
}

func parentPrimaryNode(w *world) string {
	st := w.any().State()
	im := st.Indices["logs"]
	if sp, ok := im.Splits[0]; ok {
		for _, c := range im.Copies[sp.Children[0]] {
			if c.Primary {
				return c.Node
			}
		}
	}
	for _, h := range im.Handoffs {
		for _, c := range im.Copies[h.Children[0]] {
			if c.Primary {
				return c.Node // the child primaries were built there, unless one failed over since
			}
		}
	}
	return primaryNode(im, 0)
}

func childReplicaNode(w *world) string {
	im := w.any().State().Indices["logs"]
	if sp, ok := im.Splits[0]; ok {
		for _, ch := range sp.Children {
			for _, c := range im.Copies[ch] {
				if !c.Primary && c.Assigned() {
					return c.Node
				}
			}
		}
	}
	return ""
}

// builtChildReplicaNode names the node of a child replica of the split in
// progress that has its copy open (under local, built from the node's own
// parent replica after the cut), or "".
func builtChildReplicaNode(w *world) string {
	im := w.any().State().Indices["logs"]
	sp, ok := im.Splits[0]
	if !ok {
		return ""
	}
	for _, ch := range sp.Children {
		for _, c := range im.Copies[ch] {
			if c.Primary || !c.Assigned() {
				continue
			}
			if wn := w.nodes[c.Node]; !wn.dead {
				if lc := wn.n.copies[copyKey{index: im.UUID, shard: ch}]; lc != nil && lc.c != nil {
					return c.Node
				}
			}
		}
	}
	return ""
}

func leaderNode(w *world) string {
	for _, wn := range w.live() {
		if wn.n.Manager().IsLeader() {
			return wn.name
		}
	}
	return ""
}

// splitSeeds is how many seeds each crash point runs.
var splitSeeds = uint64(2)

var splitCrashPoints = []splitCrashPoint{
	{name: "parent primary before the hand-off", cancels: true,
		at:     func(w *world) bool { return w.splitting("logs") },
		victim: parentPrimaryNode},
	{name: "child replica before the hand-off", cancels: true, childReplica: true,
		at:     func(w *world) bool { return w.splitting("logs") && childReplicaNode(w) != "" },
		victim: childReplicaNode},
	{name: "child replica built from its own store before the hand-off", cancels: true, childReplica: true,
		at:     func(w *world) bool { return builtChildReplicaNode(w) != "" },
		victim: builtChildReplicaNode},
	{name: "parent primary after the hand-off",
		at:     func(w *world) bool { return w.handedOff("logs") },
		victim: parentPrimaryNode},
	{name: "cluster-manager leader after the hand-off",
		at:     func(w *world) bool { return w.handedOff("logs") && leaderNode(w) != "" },
		victim: leaderNode},
}

// TestAHandedOffChildReplicaHasEveryAcknowledgedWrite: a child replica
// whose replication lags is promoted when the node of the child primaries
// crashes right after the hand-off: the hand-off waited for it, so it has
// every write acknowledged before.
func TestAHandedOffChildReplicaHasEveryAcknowledgedWrite(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		w := newWorld(t, seed, "n1", "n2", "n3")
		w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
		w.createSplittable("n1", "logs")
		w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
		l := newLoad(w, "logs")
		l.runWriting(100, "some writes", func() bool { return len(l.acked) >= 20 })
		w.nodes["n2"].n.SplitShard("logs", 0, 2, func(error) {})
		l.runWriting(600, "child replicas assigned", func() bool { return childReplicaNode(w) != "" })
		parent := parentPrimaryNode(w)
		w.lagging = map[string]bool{}
		im := w.any().State().Indices["logs"]
		for _, ch := range im.Splits[0].Children {
			for _, c := range im.Copies[ch] {
				if !c.Primary && c.Assigned() {
					w.lagging[c.AllocationID] = true
				}
			}
		}
		// Crash the parent primary's node in the round the hand-off
		// commits on it, before any other node can catch up.
		l.runWriting(1200, "the hand-off applied on the parent's node", func() bool {
			_, ok := w.nodes[parent].n.State().Indices["logs"].Handoffs[0]
			return ok
		})
		w.crash(parent)
		w.lagging = nil
		l.rounds(20)
		w.start(parent)
		l.runWriting(1500, "green", func() bool { return w.health("logs") == cluster.Green && !w.splitting("logs") })
		w.runUntil(400, "writes answered", func() bool { return l.pending() == 0 })
		l.check(w.live()[0].name)
		w.runUntil(100, "copies equal", func() bool { return w.copiesEqual("logs") == nil })
		t.Logf("seed %d: %d writes acknowledged", seed, len(l.acked))
	}
}

// TestASplitSurvivesACrashAtEachStep: under writes through every node, a
// node crashes at a step of a replicated split; the split rolls back
// before the hand-off and completes after it, the index ends green with
// every acknowledged write readable and its copies equal.
func TestASplitSurvivesACrashAtEachStep(t *testing.T) {
	splitSurvivesCrashes(t, cluster.StrategyRecover, splitSeeds)
}

// TestEveryReplicaSplitStrategySurvivesACrashAtEachStep: the crashes of
// TestASplitSurvivesACrashAtEachStep under the local and handoff-first
// strategies. Under handoff-first the crash of the child primaries' node
// right after the hand-off hits the window with one copy per child: the
// children wait for that node, whose disk holds them.
func TestEveryReplicaSplitStrategySurvivesACrashAtEachStep(t *testing.T) {
	for _, strategy := range []string{cluster.StrategyLocal, cluster.StrategyHandoffFirst} {
		t.Run(strategy, func(t *testing.T) { splitSurvivesCrashes(t, strategy, 1) })
	}
}

func splitSurvivesCrashes(t *testing.T, strategy string, seeds uint64) {
	for _, p := range splitCrashPoints {
		if p.childReplica && strategy == cluster.StrategyHandoffFirst {
			continue
		}
		for seed := uint64(1); seed <= seeds; seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", p.name, seed), func(t *testing.T) {
				w := newWorld(t, seed, "n1", "n2", "n3")
				w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
				w.createSplittableWith("n1", "logs", strategy)
				w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
				l := newLoad(w, "logs")
				l.runWriting(100, "some writes", func() bool { return len(l.acked) >= 20 })
				w.nodes["n2"].n.SplitShard("logs", 0, 2, func(error) {})
				l.runWriting(600, p.name, func() bool { return p.at(w) })
				victim := p.victim(w)
				if victim == "" {
					t.Fatal("no node to crash")
				}
				w.crash(victim)
				l.rounds(30)
				w.start(victim)
				l.runWriting(1500, "green with no split running", func() bool {
					return w.health("logs") == cluster.Green && !w.splitting("logs")
				})
				w.runUntil(400, "writes answered", func() bool { return l.pending() == 0 })
				if got := w.handedOff("logs"); got == p.cancels {
					t.Fatalf("handed off = %v after a crash at %s", got, p.name)
				}
				l.check(w.live()[0].name)
				w.runUntil(100, "copies equal", func() bool { return w.copiesEqual("logs") == nil })
				t.Logf("crashed %s: %d writes acknowledged, %d failed %v", victim, len(l.acked), l.failed, l.errs)
			})
		}
	}
}

// TestAStaleCoordinatorsWriteToTheRetiredParentLandsOnAChild: a node
// whose cluster state predates the hand-off routes a write to the parent;
// the retired parent refuses it with a retry (it is neither applied nor
// failed), and once the node has the new state the write lands on a child.
func TestAStaleCoordinatorsWriteToTheRetiredParentLandsOnAChild(t *testing.T) {
	w := newWorld(t, 1, "n1", "n2", "n3")
	w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
	w.createSplittable("n1", "logs")
	w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
	coord := w.handOffPastADeafCoordinator()
	if _, ok := w.nodes[coord].n.State().Indices["logs"].Handoffs[0]; ok {
		t.Fatal("the coordinator already has the hand-off")
	}
	before := w.nodes[coord].n.Stats().StaleRetries
	var got *docAnswer
	w.nodes[coord].n.IndexDoc("logs", "stale", "", []byte("v"), false, func(r DocResult, err error) { got = &docAnswer{r, err} })
	for range 5 {
		w.round()
	}
	if got != nil {
		t.Fatalf("a write routed to the retired parent was answered: %+v", *got)
	}
	w.deaf = nil
	w.runUntil(200, "the write answered", func() bool { return got != nil })
	children := w.any().State().Indices["logs"].Handoffs[0].Children
	if got.err != nil || !slices.Contains(children, got.res.Shard) {
		t.Fatalf("the stale coordinator's write = %+v, want it on one of %v", *got, children)
	}
	if g := w.get(coord, "logs", "stale"); g.err != nil || !g.found || string(g.doc.Source) != "v" {
		t.Fatalf("the write reads %+v", g)
	}
	if n := w.nodes[coord].n.Stats().StaleRetries - before; n != 1 {
		t.Errorf("the coordinator counted %d stale retries for its one write to the retired parent, want 1", n)
	}
	var handoffs uint64
	for _, wn := range w.nodes {
		handoffs += wn.n.Stats().Handoffs
	}
	if handoffs != 1 {
		t.Errorf("the nodes counted %d hand-offs, want 1", handoffs)
	}
}

// TestAParentThatCannotHearTheManagerUnblocksItsWrites: a parent primary
// whose node hears nothing from the cluster manager after it blocked its
// writes for the hand-off lets them through again within handoffTicks;
// once it hears again, the split completes with nothing acknowledged lost.
func TestAParentThatCannotHearTheManagerUnblocksItsWrites(t *testing.T) {
	w := newWorld(t, 2, "n1", "n2", "n3")
	w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
	w.createSplittable("n1", "logs")
	w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
	l := newLoad(w, "logs")
	l.runWriting(100, "some writes", func() bool { return len(l.acked) >= 20 })
	w.nodes["n2"].n.SplitShard("logs", 0, 2, func(error) {})
	parent := parentPrimaryNode(w)
	im := w.any().State().Indices["logs"]
	pk := copyKey{index: im.UUID, shard: 0}
	blocked := func() bool {
		lc := w.nodes[parent].n.copies[pk]
		return lc != nil && lc.c != nil && lc.c.Blocked()
	}
	l.runWriting(600, "the parent blocked", blocked)
	w.deaf = map[string]bool{parent: true}
	blockedAt := w.nodes[parent].n.tick
	l.runWriting(handoffTicks+5, "the parent unblocked", func() bool { return !blocked() })
	if waited := w.nodes[parent].n.tick - blockedAt; waited > handoffTicks+1 {
		t.Fatalf("the parent stayed blocked %d ticks", waited)
	}
	w.deaf = nil
	l.runWriting(1500, "green with no split running", func() bool {
		return w.health("logs") == cluster.Green && !w.splitting("logs")
	})
	w.runUntil(400, "writes answered", func() bool { return l.pending() == 0 })
	l.check(w.live()[0].name)
	w.runUntil(100, "copies equal", func() bool { return w.copiesEqual("logs") == nil })
	t.Logf("%d writes acknowledged, %d failed %v; handed off %v", len(l.acked), l.failed, l.errs, w.handedOff("logs"))
}

// TestASearchThatReachesTheRetiredParentAnswersFromTheChildren: a node
// whose cluster state predates the hand-off searches the parent; the
// retired parent refuses with a retry, and once the node has the new state
// the search answers from the children, every document once.
func TestASearchThatReachesTheRetiredParentAnswersFromTheChildren(t *testing.T) {
	w := newWorld(t, 1, "n1", "n2", "n3")
	w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
	w.createSplittable("n1", "logs")
	w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
	const docs = 12
	for i := range docs {
		if a := w.index("n1", "logs", fmt.Sprint("d", i), "v"); a.err != nil {
			t.Fatalf("index d%d: %v", i, a.err)
		}
	}
	coord := w.handOffPastADeafCoordinator()
	type answer struct {
		res SearchResult
		err error
	}
	var got *answer
	w.nodes[coord].n.Search("logs", nil, 100, func(r SearchResult, err error) { got = &answer{r, err} })
	for range 5 {
		w.round()
	}
	w.deaf = nil
	w.runUntil(400, "the search answered", func() bool { return got != nil })
	if got.err != nil || got.res.Total != docs || len(got.res.Docs) != docs {
		t.Fatalf("search across the hand-off: total %d, %d docs, err %v; want %d", got.res.Total, len(got.res.Docs), got.err, docs)
	}
}

// TestASplitCancelledAndBegunAgainBetweenTwoTicksHandsOff: the parent
// primary's node applies a cancel and a new split of the same shard (whose
// children take the same ids) before it ticks again; the first split's
// child copies are gone, so it must stop streaming to them, and the new
// split hands off under writes with nothing acknowledged lost.
func TestASplitCancelledAndBegunAgainBetweenTwoTicksHandsOff(t *testing.T) {
	w := newWorld(t, 1, "n1", "n2", "n3")
	w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
	w.createSplittable("n1", "logs")
	w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
	l := newLoad(w, "logs")
	l.runWriting(100, "some writes", func() bool { return len(l.acked) >= 20 })
	w.nodes["n2"].n.SplitShard("logs", 0, 2, func(error) {})
	l.runWriting(600, "a child replica assigned", func() bool { return childReplicaNode(w) != "" })
	parent := parentPrimaryNode(w)
	pn := w.nodes[parent].n
	im := pn.State().Indices["logs"]
	pk := copyKey{index: im.UUID, shard: 0}
	first := len(pn.copies[pk].c.Followers())
	if first == 0 {
		t.Fatal("the parent follows no child copy")
	}
	var cancelErr, splitErr error
	cancelled, began := false, false
	w.nodes["n2"].n.propose(cluster.Task{SplitCancel: &cluster.SplitCancel{Index: "logs", Shard: 0, Reason: "test"}},
		func(err error) {
			cancelErr, cancelled = err, true
			w.nodes["n2"].n.SplitShard("logs", 0, 2, func(err error) { splitErr, began = err, true })
		})
	w.round()
	if !cancelled || cancelErr != nil || !began || splitErr != nil {
		t.Fatalf("cancel %v %v, split again %v %v in one round", cancelled, cancelErr, began, splitErr)
	}
	l.runWriting(1500, "the new split handed off and green", func() bool {
		return w.handedOff("logs") && w.health("logs") == cluster.Green
	})
	w.runUntil(400, "writes answered", func() bool { return l.pending() == 0 })
	l.check(w.live()[0].name)
	w.runUntil(100, "copies equal", func() bool { return w.copiesEqual("logs") == nil })
}

// handOffPastADeafCoordinator splits shard 0 of logs and runs until the
// parent's node applied the hand-off while one node, neither the leader nor
// the parent primary's, hears nothing: that node (coord) keeps a cluster
// state from before the hand-off. It returns the deaf coordinator.
func (w *world) handOffPastADeafCoordinator() (coord string) {
	w.t.Helper()
	w.nodes["n2"].n.SplitShard("logs", 0, 2, func(error) {})
	w.runUntil(600, "every child copy in sync", func() bool {
		for _, wn := range w.live() {
			sp, ok := wn.n.State().Indices["logs"].Splits[0]
			if !ok || sp.Phase != cluster.SplitReady {
				return false
			}
		}
		return true
	})
	parent := parentPrimaryNode(w)
	for _, name := range w.names {
		if name != parent && name != leaderNode(w) {
			coord = name
		}
	}
	if coord == "" {
		w.t.Fatal("no node is neither the leader nor the parent's")
	}
	w.deaf = map[string]bool{coord: true}
	w.runUntil(200, "the hand-off applied on the parent's node", func() bool {
		_, ok := w.nodes[parent].n.State().Indices["logs"].Handoffs[0]
		return ok
	})
	return coord
}

func (w *world) createSplittableWith(name, index, strategy string) {
	w.t.Helper()
	err := do(w, name, func(n *Node, done func(error)) {
		n.CreateIndex(index, map[string]string{"index.number_of_shards": "1", "index.number_of_replicas": "1",
			"index.number_of_routing_shards": "8", cluster.SettingReplicaSplit: strategy}, nil, 0, done)
	})
	if err != nil {
		w.t.Fatalf("create index %s: %v", index, err)
	}
}

// oneCopyChild reports whether a child of the handed-off split of shard 0
// has a single in-sync copy: handoff-first's window.
func (w *world) oneCopyChild(index string) bool {
	im := w.any().State().Indices[index]
	h, ok := im.Handoffs[0]
	if !ok {
		return false
	}
	for _, ch := range h.Children {
		if len(im.InSync[ch]) == 1 {
			return true
		}
	}
	return false
}

// TestEveryReplicaSplitStrategySplitsUnderWritesWithNothingLost: under
// writes through every node, a shard with one replica splits with each
// strategy of index.shardsplit.replica_split; the index ends green with
// every acknowledged write readable and the copies of each child equal.
// Under handoff-first the state shows the window with one copy per child.
func TestEveryReplicaSplitStrategySplitsUnderWritesWithNothingLost(t *testing.T) {
	for _, strategy := range cluster.Strategies {
		for seed := uint64(1); seed <= 2; seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", strategy, seed), func(t *testing.T) {
				w := newWorld(t, seed, "n1", "n2", "n3")
				w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
				w.createSplittableWith("n1", "logs", strategy)
				w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
				l := newLoad(w, "logs")
				l.runWriting(100, "some writes", func() bool { return len(l.acked) >= 40 })
				from := l.next
				before := w.sentBytes()
				manifests := w.delivered[replication.KindRecoveryManifest]
				var splitErr error
				began, window := false, false
				w.nodes["n2"].n.SplitShard("logs", 0, 2, func(err error) { splitErr, began = err, true })
				l.runWriting(600, "the split handed off and green", func() bool {
					window = window || w.oneCopyChild("logs")
					return began && w.handedOff("logs") && w.health("logs") == cluster.Green
				})
				if splitErr != nil {
					t.Fatalf("split: %v", splitErr)
				}
				if want := strategy == cluster.StrategyHandoffFirst; window != want {
					t.Fatalf("a child with one copy after the hand-off seen: %v, want %v", window, want)
				}
				w.runUntil(300, "writes answered", func() bool { return l.inflight == 0 })
				during := 0
				for i := from; i < l.next; i++ {
					if _, ok := l.acked[fmt.Sprint("d", i)]; ok {
						during++
					}
				}
				if during < 5 {
					t.Fatalf("only %d writes acknowledged while the split ran", during)
				}
				// local copies no file: every child copy is built from a
				// parent copy on its own node.
				recovered := w.sentBytes().RecoveryBytes - before.RecoveryBytes
				if copied := recovered > 0; copied != (strategy != cluster.StrategyLocal) {
					t.Fatalf("%d bytes of recovery sent during a %s split", recovered, strategy)
				}
				// No child replica's files are sent twice: one recovery each,
				// none under local.
				want := 2
				if strategy == cluster.StrategyLocal {
					want = 0
				}
				if got := w.delivered[replication.KindRecoveryManifest] - manifests; got != want {
					t.Fatalf("%d recoveries sent their files during a %s split of two children with a replica each, want %d", got, strategy, want)
				}
				l.check("n3")
				w.runUntil(50, "copies equal", func() bool { return w.copiesEqual("logs") == nil })
				t.Logf("%d writes acknowledged (%d while the split ran), %d failed; %d recovery bytes sent",
					len(l.acked), during, l.failed, recovered)
			})
		}
	}
}

// sentBytes sums what the live nodes sent to each other.
func (w *world) sentBytes() Stats {
	var b Stats
	for _, wn := range w.live() {
		st := wn.n.Stats()
		b.RecoveryBytes += st.RecoveryBytes
		b.ReplicationBytes += st.ReplicationBytes
		b.OtherBytes += st.OtherBytes
	}
	return b
}

// BenchmarkReplicaSplitStrategies splits a shard with one replica holding
// parentDocs documents of 1 KiB under writes through every node, with
// each strategy, in the simulated cluster (rounds, not time), and reports
// what crosses the network while it runs: bytes of peer recovery and of
// replication, against the parent's size; rounds from the request to the
// hand-off and to green; and rounds after the hand-off with a child that
// has a single in-sync copy (handoff-first's window).
func BenchmarkReplicaSplitStrategies(b *testing.B) {
	const parentDocs = 2000
	// Incompressible values, so that the bytes sent are the documents'.
	rng := rand.New(rand.NewPCG(1, 2))
	value := func() []byte {
		b := make([]byte, 1024)
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
		}
		return b
	}
	for _, strategy := range cluster.Strategies {
		b.Run(strategy, func(b *testing.B) {
			var recovery, replication, parent, toHandoff, toGreen, oneCopy float64
			for i := 0; i < b.N; i++ {
				w := newWorld(b, uint64(i+1), "n1", "n2", "n3")
				w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
				w.createSplittableWith("n1", "logs", strategy)
				w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
				acked, next := 0, 0
				write := func(k int) {
					live := w.live()
					for range k {
						id := fmt.Sprint("d", next)
						node := live[next%len(live)].n
						next++
						node.IndexDoc("logs", id, "", value(), false, func(_ DocResult, err error) {
							if err == nil {
								acked++
							}
						})
					}
				}
				for r := 0; acked < parentDocs; r++ {
					if r == 2000 {
						b.Fatalf("%d of %d documents acknowledged after %d rounds", acked, parentDocs, r)
					}
					if next < parentDocs {
						write(50)
					}
					w.round()
				}
				before := w.sentBytes()
				began := false
				w.nodes["n2"].n.SplitShard("logs", 0, 2, func(err error) {
					if err != nil {
						b.Fatalf("split: %v", err)
					}
					began = true
				})
				rounds, handoff, window := 0, 0, 0
				for !(began && w.handedOff("logs") && w.health("logs") == cluster.Green) {
					if rounds == 3000 {
						b.Fatalf("the split did not end green within %d rounds", rounds)
					}
					write(2)
					w.round()
					rounds++
					if handoff == 0 && w.handedOff("logs") {
						handoff = rounds
					}
					if w.oneCopyChild("logs") {
						window++
					}
				}
				sent := w.sentBytes()
				b.Logf("seed %d: recovery %d replication %d rounds %d", i+1, sent.RecoveryBytes-before.RecoveryBytes, sent.ReplicationBytes-before.ReplicationBytes, rounds)
				recovery += float64(sent.RecoveryBytes - before.RecoveryBytes)
				replication += float64(sent.ReplicationBytes - before.ReplicationBytes)
				parent += float64(acked * 1024)
				toHandoff += float64(handoff)
				toGreen += float64(rounds)
				oneCopy += float64(window)
			}
			n := float64(b.N)
			b.ReportMetric(recovery/n, "recovery-B/op")
			b.ReportMetric(100*recovery/parent, "recovery-%-of-parent")
			b.ReportMetric(replication/n, "replication-B/op")
			b.ReportMetric(toHandoff/n, "rounds-to-handoff")
			b.ReportMetric(toGreen/n, "rounds-to-green")
			b.ReportMetric(oneCopy/n, "rounds-one-copy")
		})
	}
}

// replicateTo matches the replication requests addressed to copy aid.
func replicateTo(aid string) func(m transport.Message) bool {
	return func(m transport.Message) bool {
		if m.Kind != replication.KindReplicate {
			return false
		}
		_, target, err := replication.Addressee(m)
		return err == nil && target == aid
	}
}

// parentCopyLCP returns the local checkpoint of node's copy of shard 0 of
// logs.
func (w *world) parentCopyLCP(node string) int64 {
	im := w.any().State().Indices["logs"]
	lc := w.nodes[node].n.copies[copyKey{index: im.UUID, shard: 0}]
	if lc == nil || lc.store == nil {
		return -2
	}
	return lc.store.LocalCheckpoint()
}

// TestALocalChildReplicaIsNotBuiltFromOperationsTheNewPrimaryUndoes: a
// parent replica holds operations that the primary promoted when the old
// one's node crashed never had (they were never acknowledged), and has not
// yet heard that primary undo them when a local split's cut commits. A
// child replica built from it then would keep those operations and be
// streamed only what follows them, missing the new primary's writes at the
// same sequence numbers: it waits until its parent replica is in the
// current primary's term (which undid them).
func TestALocalChildReplicaIsNotBuiltFromOperationsTheNewPrimaryUndoes(t *testing.T) {
	w := newWorld(t, 1, "n1", "n2", "n3")
	w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
	err := do(w, "n1", func(n *Node, done func(error)) {
		n.CreateIndex("logs", map[string]string{"index.number_of_shards": "1", "index.number_of_replicas": "2",
			"index.number_of_routing_shards": "8", cluster.SettingReplicaSplit: cluster.StrategyLocal}, nil, 0, done)
	})
	if err != nil {
		t.Fatal(err)
	}
	w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
	l := newLoad(w, "logs")
	l.runWriting(100, "some writes", func() bool { return len(l.acked) >= 10 })
	w.runUntil(300, "writes answered", func() bool { return l.inflight == 0 })
	im := w.any().State().Indices["logs"]
	old := primaryNode(im, 0)
	aids := map[string]string{}
	var replicaNodes []string
	for _, c := range im.Copies[0] {
		aids[c.Node] = c.AllocationID
		if !c.Primary {
			replicaNodes = append(replicaNodes, c.Node)
		}
	}
	slices.Sort(replicaNodes)
	promoted, other := replicaNodes[0], replicaNodes[1] // the allocator promotes the lowest node name
	// Writes that reach one replica only: never acknowledged.
	w.hold = replicateTo(aids[promoted])
	for i := range 3 {
		w.nodes[old].n.IndexDoc("logs", fmt.Sprint("ghost", i), "", []byte("g"), false, func(DocResult, error) {})
	}
	w.runUntil(20, "a replica ahead of the other", func() bool { return w.parentCopyLCP(other) > w.parentCopyLCP(promoted) })
	// The new primary's undo does not reach the replica ahead yet.
	w.hold = replicateTo(aids[other])
	w.crash(old)
	w.runUntil(300, "a replica promoted", func() bool {
		st := w.nodes[promoted].n.State()
		return primaryNode(st.Indices["logs"], 0) == promoted
	})
	if err := do(w, promoted, func(n *Node, done func(error)) { n.UpdateReplicas("logs", 1, done) }); err != nil {
		t.Fatal(err)
	}
	w.runUntil(20, "every parent copy active", func() bool {
		cs := w.any().State().Indices["logs"].Copies[0]
		return len(cs) == 2 && cs[0].Active() && cs[1].Active()
	})
	if err := do(w, promoted, func(n *Node, done func(error)) { n.SplitShard("logs", 0, 2, done) }); err != nil {
		t.Fatalf("split: %v", err)
	}
	w.runUntil(12, "the cut committed", func() bool {
		sp, ok := w.nodes[other].n.State().Indices["logs"].Splits[0]
		return ok && sp.Cut != nil
	})
	for range 3 {
		w.round()
	}
	w.hold = nil
	l.runWriting(1500, "the split handed off and green", func() bool {
		return w.handedOff("logs") && w.health("logs") == cluster.Green
	})
	w.runUntil(400, "writes answered", func() bool { return l.pending() == 0 })
	l.check(promoted)
	for range 100 {
		if w.copiesEqual("logs") == nil {
			break
		}
		w.round()
	}
	if err := w.copiesEqual("logs"); err != nil {
		t.Fatalf("after a local split whose parent replica held undone operations at its cut: %v", err)
	}
	for i := range 3 {
		if g := w.get(promoted, "logs", fmt.Sprint("ghost", i)); g.found {
			t.Fatalf("ghost%d, never acknowledged and undone by the new primary, reads %+v", i, g)
		}
	}
}

// TestALocalSplitCancelledAndBegunAgainBeforeTheParentBuiltItsChildrenHandsOff:
// under local, a child replica built on another node follows the parent
// primary as soon as it asks, which may be before the parent primary's
// node built any child primary of its own (its state lags). That node then
// applies a cancel and a new split of the same shard between two ticks:
// no child copy of its own is removed, yet the cancelled split's follower
// is gone for good and must not hold the new split's hand-off (and, once
// writes blocked, their acknowledgements) forever.
func TestALocalSplitCancelledAndBegunAgainBeforeTheParentBuiltItsChildrenHandsOff(t *testing.T) {
	w := newWorld(t, 2, "n1", "n2", "n3")
	w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
	w.createSplittableWith("n1", "logs", cluster.StrategyLocal)
	w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
	l := newLoad(w, "logs")
	l.runWriting(100, "some writes", func() bool { return len(l.acked) >= 20 })
	w.runUntil(300, "writes answered", func() bool { return l.pending() == 0 })
	parent := primaryNode(w.any().State().Indices["logs"], 0)
	other := ""
	for _, name := range w.names {
		if name != parent && name != leaderNode(w) {
			other = name
		}
	}
	if leaderNode(w) == parent || other == "" {
		t.Fatalf("the parent primary's node %s leads: this seed does not set the stage", parent)
	}
	pn := w.nodes[parent].n
	w.nodes[other].n.SplitShard("logs", 0, 2, func(error) {})
	w.runUntil(20, "the split begun on the parent's node", func() bool { return len(pn.State().Indices["logs"].Splits) > 0 })
	// The parent's node hears nothing more of the cluster manager: the cut
	// commits without it.
	w.deaf = map[string]bool{parent: true}
	var replicaNode string
	w.runUntil(20, "a child replica built and followed", func() bool {
		replicaNode = builtChildReplicaNode(w)
		return replicaNode != "" && len(pn.copies[copyKey{index: pn.State().Indices["logs"].UUID, shard: 0}].c.Followers()) > 0
	})
	im := pn.State().Indices["logs"]
	for _, ch := range im.Splits[0].Children {
		if pn.copies[copyKey{index: im.UUID, shard: ch}] != nil {
			t.Fatalf("the parent's node built child %d with no cut in its state", ch)
		}
	}
	cancelled, began := false, false
	w.nodes[other].n.propose(cluster.Task{SplitCancel: &cluster.SplitCancel{Index: "logs", Shard: 0, Reason: "test"}},
		func(err error) {
			if err != nil {
				t.Errorf("cancel: %v", err)
			}
			cancelled = true
			w.nodes[other].n.SplitShard("logs", 0, 2, func(err error) {
				if err != nil {
					t.Errorf("split again: %v", err)
				}
				began = true
			})
		})
	w.runUntil(20, "cancelled and begun again", func() bool { return cancelled && began })
	w.deaf = nil
	l.runWriting(1500, "the new split handed off and green", func() bool {
		return w.handedOff("logs") && w.health("logs") == cluster.Green
	})
	w.runUntil(400, "writes answered", func() bool { return l.pending() == 0 })
	l.check(w.live()[0].name)
	w.runUntil(100, "copies equal", func() bool { return w.copiesEqual("logs") == nil })
}

// TestAChildCopyOnTheDiskOfANodeThatCrashedDuringASplitIsDeletedOnceTheSplitRolledBack:
// a node crashes after it built a child copy from its own parent copy; the
// split rolls back while it is away, so no state it acts on after it
// rejoins has that child. Its directory (hard links to the parent's
// tables) is deleted, as a cancelled child's is on a running node.
func TestAChildCopyOnTheDiskOfANodeThatCrashedDuringASplitIsDeletedOnceTheSplitRolledBack(t *testing.T) {
	w := newWorld(t, 1, "n1", "n2", "n3")
	w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
	w.createSplittableWith("n1", "logs", cluster.StrategyLocal)
	w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
	l := newLoad(w, "logs")
	l.runWriting(100, "some writes", func() bool { return len(l.acked) >= 20 })
	w.nodes["n2"].n.SplitShard("logs", 0, 2, func(error) {})
	l.runWriting(600, "a child replica built", func() bool { return builtChildReplicaNode(w) != "" })
	victim := builtChildReplicaNode(w)
	uuid := w.any().State().Indices["logs"].UUID
	w.crash(victim)
	l.rounds(30)
	w.start(victim)
	l.runWriting(1500, "green with no split running", func() bool {
		return w.health("logs") == cluster.Green && !w.splitting("logs")
	})
	w.runUntil(400, "writes answered", func() bool { return l.pending() == 0 })
	if w.handedOff("logs") {
		t.Fatal("the split handed off though a child copy's node crashed before")
	}
	dirs, err := w.nodes[victim].n.cfg.FS.List(filepath.Join("/data", "indices", uuid))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if d != "0" && d != "recovery" {
			t.Fatalf("%s keeps %s of a cancelled child on disk (its index dir holds %v)", victim, d, dirs)
		}
	}
	l.check(w.live()[0].name)
}

// TestANodeRemovedFromTheClusterRetiresAParentWhoseHandoffItApplies: the
// parent primary's node, cut from the cluster manager after it blocked its
// writes and proposed the hand-off, may apply the committed hand-off in a
// state that no longer counts it a member. The parent is retired all the
// same: the hand-off gave its ranges to the children, and a parent left
// primary would let its writes through again once its block times out.
func TestANodeRemovedFromTheClusterRetiresAParentWhoseHandoffItApplies(t *testing.T) {
	w := newWorld(t, 2, "n1", "n2", "n3")
	w.runUntil(300, "a cluster of three", func() bool { return len(w.any().State().Nodes) == 3 })
	w.createSplittable("n1", "logs")
	w.runUntil(300, "logs green", func() bool { return w.health("logs") == cluster.Green })
	w.nodes["n2"].n.SplitShard("logs", 0, 2, func(error) {})
	parent := parentPrimaryNode(w)
	im := w.any().State().Indices["logs"]
	pk := copyKey{index: im.UUID, shard: 0}
	pn := w.nodes[parent].n
	w.runUntil(600, "the parent blocked", func() bool {
		lc := pn.copies[pk]
		return lc != nil && lc.c != nil && lc.c.Blocked()
	})
	// The committed hand-off, in a state that removed the parent's node.
	b, err := json.Marshal(pn.State())
	if err != nil {
		t.Fatal(err)
	}
	var st cluster.State
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	st.Version++
	delete(st.Nodes, parent)
	sim := st.Indices["logs"]
	sp := sim.Splits[0]
	sim.Handoffs = map[routing.ShardID]cluster.Handoff{0: {Children: sp.Children, ParentTerm: sim.PrimaryTerms[0], MaxSeq: pn.copies[pk].c.LocalCheckpoint()}}
	pn.reconcile(&st)
	if c := pn.copies[pk]; c != nil && c.c != nil && c.c.IsPrimary() {
		t.Fatalf("%s applied the hand-off of shard 0 as a node no longer in the cluster, yet its parent copy is still primary", parent)
	}
}
