package clustersim

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/clusternode"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
	"github.com/shardsplit/shardsplit/tests/simkit"
	"github.com/shardsplit/shardsplit/transport"
)

// The split seeds (TestClusterSplitSim): the same runs as TestClusterSim,
// with one shard of the index split in place (by the seed's strategy of
// index.shardsplit.replica_split) under the clients' writes, reads and
// searches, and one fault placed at one point of the split (the fault
// matrix). See doc.go, "Splits".

// point is where in a split the seed's fault strikes.
type point int

const (
	// p0BeforeSplit: the split is about to be requested (it is, a few
	// steps later).
	p0BeforeSplit point = iota
	// p1CatchUp: the split began, its child primaries are catching up
	// with the parent (phase CATCHING_UP).
	p1CatchUp
	// p2ReplicasRecovering: the child primaries are in sync, the child
	// replicas recovering (phase RECOVERING_REPLICAS).
	p2ReplicasRecovering
	// p3Handoff: the hand-off is in progress: the parent primary holds
	// its writes (phase READY, the parent blocked).
	p3Handoff
	// p4Committed: the hand-off record and the metadata commit are one
	// raft entry (SplitHandoff); the point is that entry committed and
	// applied by some node (the leader) while the parent primary's node
	// has not applied it yet (its parent still primary, or blocked).
	p4Committed
	// p5BeforeCleanup: the parent primary's node applied the commit (the
	// parent retired there, its files deleted); a parent replica is still
	// open on a node that has not applied it yet.
	p5BeforeCleanup
	numPoints
)

var pointNames = [numPoints]string{"P0 before the split", "P1 child catch-up", "P2 child replicas recovering",
	"P3 hand-off (parent blocked)", "P4 committed, parent's node not applied", "P5 committed, parent replica not cleaned up"}

// faultKind is the fault the seed places at its point.
type faultKind int

const (
	fKillParentPrimary faultKind = iota
	fKillChildReplica
	fKillLeader
	fPartitionParent      // the parent primary's node from the cluster manager, not from coordinators
	fPartitionCoordinator // a coordinator from the cluster manager
	numFaults
)

var faultNames = [numFaults]string{"kill parent primary's node", "kill a child replica's node", "kill the CM leader",
	"partition parent primary from CM", "partition a coordinator from CM"}

const numCells = int(numPoints) * int(numFaults)

// cellOf is the seed's cell of the matrix: consecutive seeds walk the
// cells, those of P3-P5 twice in each walk of 45 seeds (a split reaches
// its later points less often: it may roll back first, or hand off in the
// quiet phase; and P4 has no width when the parent primary's node is the
// leader, which applies the entry as it learns it is committed).
func cellOf(seed uint64) (point, faultKind) {
	c := int((seed - 1) % uint64(walkSeeds))
	if c >= numCells {
		c -= 3 * int(numFaults)
	}
	return point(c / int(numFaults)), faultKind(c % int(numFaults))
}

// walkSeeds is how many consecutive seeds walk the cells once (cellOf).
const walkSeeds = numCells + 3*int(numFaults)

// strategyOf is the seed's strategy of index.shardsplit.replica_split:
// consecutive walks of the cells take the strategies in turn, so every
// strategy meets every cell once in each walk it takes (and each in 135
// seeds).
func strategyOf(seed uint64) string {
	return cluster.Strategies[((seed-1)/uint64(walkSeeds))%uint64(len(cluster.Strategies))]
}

// pointApplies says whether a split of the strategy has the point: a
// handoff-first split hands off before its child replicas exist, so it
// has no phase of child replicas recovering.
func pointApplies(strategy string, p point) bool {
	return !(strategy == cluster.StrategyHandoffFirst && p == p2ReplicasRecovering)
}

// maxSplits bounds how often a seed's split begins (a split rolled back
// by a failure is requested again; a refused request is repeated a few
// steps later).
const maxSplits = 3

// splitResult is what a split seed reports for the matrix.
type splitResult struct {
	on       bool
	strategy string
	point    point
	fault    faultKind
	fired    bool   // the fault struck at its point
	outcome  string // "handed off", "rolled back", "never began"
	// reached marks the points the seed's split passed through (whatever
	// its fault).
	reached  [numPoints]bool
	searches int
}

// splitRun drives a seed's split and checks it.
type splitRun struct {
	w   *world
	rng *rand.Rand // the split's own draws: the world's stay those of TestClusterSim

	strategy string // index.shardsplit.replica_split
	point    point
	fault    faultKind
	parent   routing.ShardID
	ways     int

	issueAt  int // the first request's step
	nextTry  int
	repairAt int
	attempts int
	began    int // accepted requests
	inFlight *splitRequest

	fired   bool
	firedAt int
	healAt  int         // the step the fault's partition heals and its killed node restarts
	killed  string      // the node the fault killed
	cmCuts  [][2]string // links whose cluster-manager traffic is cut (both ways)
	reached [numPoints]bool

	parentNode string          // the parent primary's node, as last seen
	parentAids map[string]bool // every allocation id the parent's copies had
	handoff    *cluster.Handoff
	// applied records, per node and life, that it applied the hand-off.
	applied map[string]bool

	searches int
	// calm: the swarm's own node and partition faults wait while the
	// split runs until the seed's fault struck (in two seeds of three), so
	// that the fault at its point is the first the split meets.
	calm bool
}

type splitRequest struct {
	node string
	life int
}

func newSplitRun(w *world) *splitRun {
	s := &splitRun{w: w, rng: rand.New(rand.NewPCG(w.seed, 0x5b117)), parentAids: map[string]bool{}, applied: map[string]bool{}}
	s.point, s.fault = cellOf(w.seed)
	s.strategy = strategyOf(w.seed)
	s.parent = routing.ShardID(s.rng.IntN(w.sw.shards))
	s.ways = 2 + s.rng.IntN(2)
	s.issueAt = 5 + s.rng.IntN(min(40, max(1, w.sw.steps/4)))
	s.nextTry = s.issueAt
	s.calm = s.rng.IntN(3) != 0
	return s
}

func (s *splitRun) result() splitResult {
	r := splitResult{on: true, strategy: s.strategy, point: s.point, fault: s.fault, fired: s.fired, reached: s.reached, searches: s.searches}
	switch {
	case s.handoff != nil:
		r.outcome = "handed off"
	case s.began > 0:
		r.outcome = "rolled back"
	default:
		r.outcome = "never began"
	}
	return r
}

func (s *splitRun) begin() {
	s.w.logf("split", "plan: shard %d into %d (strategy %s) from step %d; fault %q at %q", s.parent, s.ways, s.strategy, s.issueAt,
		faultNames[s.fault], pointNames[s.point])
}

// step runs once per safety step, before the swarm's faults: it requests
// the split (again, after a roll-back) and heals the fault's partition.
func (s *splitRun) step() {
	w := s.w
	if s.fired && s.healAt == w.step {
		s.heal("its time")
	}
	if s.inFlight != nil {
		if sn := w.nodes[s.inFlight.node]; sn.dead || sn.lives != s.inFlight.life {
			s.inFlight = nil // the coordinator died: the request's outcome shows in the state
			s.nextTry = w.step + 2
		}
		return
	}
	if s.handoff != nil || s.began >= maxSplits || w.step < s.nextTry || w.step > w.sw.steps-10 {
		return
	}
	st := w.latest()
	im := st.Indices[index]
	if im == nil {
		return
	}
	if _, running := im.Splits[s.parent]; running {
		return
	}
	if s.repair(st) {
		return
	}
	if s.point == p0BeforeSplit && !s.fired {
		if !s.fire() {
			return // tried again next step
		}
		s.nextTry = w.step + 1 + s.rng.IntN(4)
		return
	}
	sn := w.anyLive()
	if sn == nil {
		return
	}
	s.attempts++
	s.reached[p0BeforeSplit] = true
	req := &splitRequest{node: sn.name, life: sn.lives}
	s.inFlight = req
	attempt := s.attempts
	sn.n.SplitShard(index, s.parent, s.ways, func(err error) {
		if s.inFlight == req {
			s.inFlight = nil
		}
		if err != nil {
			w.logf("split", "request %d via %s: %v", attempt, sn.name, err)
			s.nextTry = w.step + 3 + s.rng.IntN(6)
			return
		}
		s.began++
		w.logf("split", "request %d via %s: began", attempt, sn.name)
	})
	sn.n.Flush()
}

// current says which point the split is at (by the latest committed
// state a live node applied, and the nodes' copies), if any.
func (s *splitRun) current() (point, bool) {
	w := s.w
	st := w.latest()
	if st == nil {
		return 0, false
	}
	im := st.Indices[index]
	if im == nil {
		return 0, false
	}
	if p, ok := st.Primary(index, s.parent); ok && p.Assigned() {
		s.parentNode = p.Node
	}
	if h, ok := im.Handoffs[s.parent]; ok {
		if s.handoff == nil {
			s.handoff = &h
		}
		pn := w.nodes[s.parentNode]
		if pn == nil || pn.dead {
			return 0, false
		}
		if pim := pn.n.State().Indices[index]; pim == nil || !hasHandoff(pim, s.parent) {
			return p4Committed, true
		}
		for _, sn := range w.live() {
			if pim := sn.n.State().Indices[index]; pim != nil && hasHandoff(pim, s.parent) {
				continue
			}
			for _, ci := range sn.n.Copies() {
				if ci.Index == im.UUID && ci.Shard == s.parent {
					return p5BeforeCleanup, true
				}
			}
		}
		return 0, false
	}
	sp, ok := im.Splits[s.parent]
	if !ok {
		return 0, false
	}
	for _, c := range im.Copies[s.parent] {
		if c.AllocationID != "" {
			s.parentAids[c.AllocationID] = true
		}
	}
	switch sp.Phase {
	case cluster.SplitCatchingUp:
		return p1CatchUp, true
	case cluster.SplitRecoveringReplicas:
		return p2ReplicasRecovering, true
	case cluster.SplitReady:
		if pn := w.nodes[s.parentNode]; pn != nil && !pn.dead {
			for _, ci := range pn.n.Copies() {
				if ci.Index == im.UUID && ci.Shard == s.parent && ci.Primary && ci.Blocked {
					return p3Handoff, true
				}
			}
		}
	}
	return 0, false
}

// repair readies the cluster for the split's request, as an operator
// would: while a copy of the index is not started, the swarm's partitions
// heal and a dead node restarts (one action every few steps). It reports
// whether it acted (the request waits).
func (s *splitRun) repair(st *cluster.State) bool {
	w := s.w
	if st.Health().Indices[index].Status == cluster.Green || w.step < s.repairAt {
		return false
	}
	s.repairAt = w.step + 5
	if len(w.cuts) > 0 {
		w.net.Heal()
		w.logf("split-prep", "heal every link (was %v) for the split", w.cuts)
		w.cuts = nil
		return true
	}
	if dead := w.dead(); len(dead) > 0 {
		w.logf("split-prep", "restart %s for the split", dead[0])
		w.restart(dead[0])
		return true
	}
	return false
}

// holdFaults reports whether the swarm's node and partition faults wait
// (see calm).
func (s *splitRun) holdFaults() bool {
	return s.calm && !s.fired && s.w.step >= s.issueAt && s.handoff == nil
}

func hasHandoff(im *cluster.IndexMeta, shard routing.ShardID) bool {
	_, ok := im.Handoffs[shard]
	return ok
}

// watch runs after every delivered message and every round of ticks: it
// notes the point the split is at, fires the seed's fault there, and runs
// the split's per-moment checks.
func (s *splitRun) watch() {
	w := s.w
	if w.finding != "" || w.step == 0 {
		return
	}
	p, ok := s.current()
	if !ok {
		return
	}
	if !s.reached[p] {
		s.reached[p] = true
		w.logf("split", "at %s", pointNames[p])
	}
	if !s.fired && p == s.point && w.step <= w.sw.steps {
		s.fire()
	}
	if p >= p4Committed {
		s.checkRetired()
	}
}

// fire places the seed's fault; it reports whether it could (a node to
// kill, a leader to partition).
func (s *splitRun) fire() bool {
	w := s.w
	st := w.latest()
	if st == nil || len(w.live()) < 2 {
		return false
	}
	leader := ""
	for _, sn := range w.live() {
		if sn.n.Manager().IsLeader() {
			leader = sn.name
		}
	}
	parentNode := s.parentNode
	if p, ok := st.Primary(index, s.parent); ok && p.Assigned() {
		parentNode = p.Node
	}
	alive := func(name string) bool { sn := w.nodes[name]; return sn != nil && !sn.dead }
	what := ""
	switch s.fault {
	case fKillParentPrimary:
		if !alive(parentNode) {
			return false
		}
		s.kill(parentNode, "the parent primary's node")
		what = "killed " + parentNode
	case fKillChildReplica:
		node := s.childReplicaNode(st, parentNode)
		if node == "" {
			return false
		}
		s.kill(node, "a child replica's node")
		what = "killed " + node
	case fKillLeader:
		if leader == "" {
			return false
		}
		s.kill(leader, "the cluster manager's leader")
		w.stats.leaderKills++
		what = "killed " + leader
	case fPartitionParent:
		if leader == "" || !alive(parentNode) {
			return false
		}
		s.cutFromManager(parentNode, leader)
		what = fmt.Sprintf("cut %s (parent primary) from the cluster manager %s", parentNode, leader)
	case fPartitionCoordinator:
		if leader == "" {
			return false
		}
		var cands []string
		for _, sn := range w.live() {
			if sn.name != leader && sn.name != parentNode {
				cands = append(cands, sn.name)
			}
		}
		if len(cands) == 0 {
			return false
		}
		c := cands[s.rng.IntN(len(cands))]
		s.cutFromManager(c, leader)
		what = fmt.Sprintf("cut coordinator %s from the cluster manager %s", c, leader)
	}
	s.fired, s.firedAt = true, w.step
	s.healAt = w.step + 5 + s.rng.IntN(30)
	w.logf("split-fault", "%s at %s (heals/restarts at step %d)", what, pointNames[s.point], s.healAt)
	return true
}

// childReplicaNode returns the live node of an assigned child replica; at
// a point with none assigned yet (before the split, during the child
// primaries' catch-up, and under handoff-first until the hand-off) the
// live node of a parent replica, where the allocator puts the child
// replicas.
func (s *splitRun) childReplicaNode(st *cluster.State, parentNode string) string {
	w := s.w
	im := st.Indices[index]
	var children []routing.ShardID
	if sp, ok := im.Splits[s.parent]; ok {
		children = sp.Children
	} else if h, ok := im.Handoffs[s.parent]; ok {
		children = h.Children
	}
	var cands []string
	for _, ch := range children {
		for _, c := range im.Copies[ch] {
			if !c.Primary && c.Assigned() && !w.nodes[c.Node].dead && !slices.Contains(cands, c.Node) {
				cands = append(cands, c.Node)
			}
		}
	}
	_, splitting := im.Splits[s.parent]
	beforeReplicas := splitting && s.strategy == cluster.StrategyHandoffFirst // assigned by the hand-off
	if len(cands) == 0 && len(children) > 0 && s.point >= p2ReplicasRecovering && !beforeReplicas {
		return ""
	}
	if len(cands) == 0 {
		for _, c := range im.Copies[s.parent] {
			if !c.Primary && c.Assigned() && c.Node != parentNode && !w.nodes[c.Node].dead && !slices.Contains(cands, c.Node) {
				cands = append(cands, c.Node)
			}
		}
	}
	if len(cands) == 0 {
		return ""
	}
	slices.Sort(cands)
	return cands[s.rng.IntN(len(cands))]
}

func (s *splitRun) kill(name, why string) {
	s.w.crash(name, why+", split fault")
	s.killed = name
}

// cutFromManager cuts the cluster-manager traffic (cm/*) between a node
// and the leader, both ways, leaving the document traffic; a leader cut
// from itself is cut from every other node (it loses its quorum, and the
// node is then cut from the new leader).
func (s *splitRun) cutFromManager(node, leader string) {
	if node != leader {
		s.cmCuts = append(s.cmCuts, [2]string{node, leader})
		return
	}
	for _, name := range s.w.names {
		if name != node {
			s.cmCuts = append(s.cmCuts, [2]string{node, name})
		}
	}
}

// managerCut reports whether m is cluster-manager traffic on a cut link
// (dropped at delivery).
func (s *splitRun) managerCut(m transport.Message) bool {
	if len(s.cmCuts) == 0 || !strings.HasPrefix(m.Kind, "cm/") {
		return false
	}
	for _, l := range s.cmCuts {
		if (m.From == l[0] && m.To == l[1]) || (m.From == l[1] && m.To == l[0]) {
			return true
		}
	}
	return false
}

// heal ends the fault: the cluster-manager cut heals, a killed node
// restarts.
func (s *splitRun) heal(why string) {
	if len(s.cmCuts) > 0 {
		s.w.logf("split-heal", "cluster-manager links %v (%s)", s.cmCuts, why)
		s.cmCuts = nil
	}
	if s.killed != "" && s.w.nodes[s.killed].dead && why != "quiet" {
		s.w.restart(s.killed)
	}
	s.killed = ""
}

// settled: the quiet phase waits for the split to end (handed off or
// rolled back) and for every node to have let go of a handed-off parent.
func (s *splitRun) settled(st *cluster.State) bool {
	im := st.Indices[index]
	if im == nil || len(im.Splits) > 0 {
		return false
	}
	for _, sn := range s.w.live() {
		for _, ci := range sn.n.Copies() {
			if ci.Index == im.UUID && hasHandoff(im, ci.Shard) {
				return false
			}
		}
	}
	return true
}

// --- checks

// checkTransition runs on every committed state a node applies:
//
//   - after the hand-off record no parent copy is promotable: the
//     parent has no copies and no in-sync set, no copy of any shard has a
//     parent copy's allocation id, and the record stays;
//   - a split is committed in the routing table only with its hand-off
//     record;
//   - the hand-off commits only with every child copy started and in
//     sync (every child primary, under handoff-first), and every child copy open on the applying node holds every
//     operation up to the record's sequence number: its local checkpoint
//     advanced over the operations of the other children's ranges, which
//     it filtered out.
func (s *splitRun) checkTransition(node string, life int, prev, next *cluster.State) {
	w := s.w
	pi, ni := prev.Indices[index], next.Indices[index]
	for p := range pi.Splits {
		for _, c := range pi.Copies[p] {
			if c.AllocationID != "" {
				s.parentAids[c.AllocationID] = true
			}
		}
	}
	for p := range pi.Handoffs {
		if _, ok := ni.Handoffs[p]; !ok {
			w.fail("%s applied v%d: the hand-off record of shard %d is lost", node, next.Version, p)
			return
		}
	}
	if tbl, err := ni.Table(); err == nil {
		for _, rec := range tbl.Splits() {
			if _, ok := ni.Handoffs[rec.Parent]; !rec.InProgress && !ok {
				w.fail("%s applied v%d: the split of shard %d is committed in the routing table without a hand-off record", node, next.Version, rec.Parent)
				return
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(ni.Handoffs)) {
		h := ni.Handoffs[p]
		if len(ni.Copies[p]) > 0 || len(ni.InSync[p]) > 0 {
			w.fail("%s applied v%d: shard %d handed off yet has copies %v, in sync %v: a parent copy is promotable for its moved ranges",
				node, next.Version, p, ni.Copies[p], ni.InSync[p])
			return
		}
		for _, sh := range ni.ShardIDs() {
			for _, c := range ni.Copies[sh] {
				if p == s.parent && s.parentAids[c.AllocationID] {
					w.fail("%s applied v%d: copy %s of the handed-off parent %d is a copy of shard %d", node, next.Version, c.AllocationID, p, sh)
					return
				}
			}
		}
		if _, was := pi.Handoffs[p]; was || next.Version != prev.Version+1 {
			continue
		}
		// A handoff-first split hands off with its child primaries alone
		// in sync; its child replicas are assigned by the hand-off itself.
		primariesOnly := pi.Splits[p].ChildReplicasAfterHandoff()
		for _, ch := range h.Children {
			for _, c := range ni.Copies[ch] {
				if primariesOnly && !c.Primary {
					continue
				}
				if !c.Active() || !slices.Contains(ni.InSync[ch], c.AllocationID) {
					w.fail("%s applied v%d: shard %d handed off while child %d's copy %s is %s, in sync %v", node, next.Version, p, ch,
						c.AllocationID, c.State, ni.InSync[ch])
					return
				}
			}
		}
		sn := w.nodes[node]
		if sn.dead || sn.lives != life {
			continue
		}
		for _, ci := range sn.n.Copies() {
			if ci.Index != ni.UUID || !slices.Contains(h.Children, ci.Shard) || ci.Recovering || !slices.Contains(ni.InSync[ci.Shard], ci.AllocationID) {
				continue
			}
			if ci.LCP < h.MaxSeq {
				w.fail("%s applied v%d: shard %d handed off at seq %d, yet in-sync child copy %s of shard %d has local checkpoint %d",
					node, next.Version, p, h.MaxSeq, ci.AllocationID, ci.Shard, ci.LCP)
				return
			}
		}
	}
}

// checkRetired: a node that applied the hand-off holds no copy of the
// parent as primary (nothing there takes a write for a moved range).
func (s *splitRun) checkRetired() {
	w := s.w
	for _, sn := range w.live() {
		im := sn.n.State().Indices[index]
		if im == nil || !hasHandoff(im, s.parent) {
			continue
		}
		for _, ci := range sn.n.Copies() {
			if ci.Index == im.UUID && ci.Shard == s.parent && ci.Primary {
				w.fail("%s applied the hand-off of shard %d, yet its copy %s is still primary", sn.name, s.parent, ci.AllocationID)
				return
			}
		}
	}
}

// search: a client's match-all search through a node. A search counts
// every document once: no id twice (parent and children both visible for
// one range), and a total that is its hits.
func (s *splitRun) search(c *client, sn *simNode) {
	w := s.w
	c.busy = true
	s.searches++
	step := w.step
	sn.n.Search(index, nil, 10*len(w.keys), func(r clusternode.SearchResult, err error) {
		c.busy = false
		if err != nil {
			w.logf("c"+fmt.Sprint(c.id)+" search", "via %s (from step %d): %v", sn.name, step, err)
			return
		}
		seen := map[string]routing.ShardID{}
		for i, d := range r.Docs {
			if sh, dup := seen[d.ID]; dup {
				w.fail("c%d search via %s (from step %d): document %s counted twice, from shards %d and %d", c.id, sn.name, step, d.ID, sh, r.Shard[i])
				return
			}
			seen[d.ID] = r.Shard[i]
		}
		if r.Total != len(r.Docs) || r.Total > len(w.keys) {
			w.fail("c%d search via %s (from step %d): total %d, %d hits, %d keys", c.id, sn.name, step, r.Total, len(r.Docs), len(w.keys))
			return
		}
		w.logf("c"+fmt.Sprint(c.id)+" search", "via %s (from step %d): %d hits over %d shards", sn.name, step, r.Total, r.Shards)
	})
	sn.n.Flush()
}

// checkEnd runs once the cluster settled: every document lives in the
// shard that owns its routing partition in the committed table, and in no
// other (nothing misplaced or duplicated; copiesEqual compared the
// copies and the final reads found nothing lost).
func (s *splitRun) checkEnd() {
	w := s.w
	st := w.latest()
	im := st.Indices[index]
	tbl, err := im.Table()
	if err != nil {
		w.fail("routing table: %v", err)
		return
	}
	where := map[string]routing.ShardID{}
	for _, shard := range im.ServingShards() {
		p, ok := st.Primary(index, shard)
		if !ok {
			w.fail("shard %d has no primary once settled", shard)
			return
		}
		if cv, ok := w.openCopies()[p.AllocationID]; !ok || !cv.info.Primary {
			w.fail("shard %d: its primary %s on %s is not open as a primary once settled (%+v)", shard, p.AllocationID, p.Node, cv.info)
			return
		}
		err := w.nodes[p.Node].n.ScanCopy(im.UUID, shard, func(d storage.Doc) error {
			if _, owner := tbl.Route(d.ID, d.Routing); owner != shard {
				return fmt.Errorf("document %s is in shard %d, its routing partition is shard %d's", d.ID, shard, owner)
			}
			if other, dup := where[d.ID]; dup {
				return fmt.Errorf("document %s is in shards %d and %d", d.ID, other, shard)
			}
			where[d.ID] = shard
			return nil
		})
		if err != nil {
			w.fail("once settled: %v", err)
			return
		}
	}
	w.logf("split", "end: %s; %d documents placed by the table (v%d)", s.result().outcome, len(where), st.Version)
}

// --- the test

// TestClusterSplitSim runs the split seeds (doc.go, "Splits"): every
// seed splits a replicated shard, with one fault of the matrix at one
// point of the split. It prints the matrix (how many seeds reached each
// point × fault, and how their splits ended) and, over the CI range or
// more, fails if a cell was never reached.
func TestClusterSplitSim(t *testing.T) {
	def := defaultSeeds
	if raceEnabled {
		def = raceSeeds
	}
	first, n := simkit.SeedRange(t, def)
	start := time.Now()
	results := runSeedsWith(first, n, runSplitSeed)
	elapsed := time.Since(start)
	var total stats
	searches := 0
	for _, r := range results {
		total.add(r.stats)
		searches += r.split.searches
	}
	failed := splitReport.Failures(t, simkit.Outcomes(results, result.outcome), first)
	t.Logf("%s; exercised: %d steps, %d rounds, %d writes (%d acknowledged), %d reads, %d searches, %d crashes, %d partition changes",
		simkit.Ran("split seeds", n, first, elapsed, len(failed)), total.steps, total.rounds, total.writes, total.acked,
		total.reads, searches, total.crashes, total.partitions)
	var byStrategy []string
	for _, strategy := range cluster.Strategies {
		seeds, fails := 0, 0
		for _, r := range results {
			if r.split.strategy == strategy {
				seeds++
				if r.finding != "" {
					fails++
				}
			}
		}
		byStrategy = append(byStrategy, fmt.Sprintf("%s %d/%d", strategy, fails, seeds))
	}
	t.Logf("failed seeds by strategy: %s", strings.Join(byStrategy, ", "))
	t.Logf("slowest seeds:\n%s", slowest(results, 10))
	all := tally(results, "")
	for _, strategy := range cluster.Strategies {
		m := tally(results, strategy)
		if m.seeds == 0 {
			continue
		}
		t.Logf("the fault matrix, strategy %s (%d seeds):\n%s%s", strategy, m.seeds, m, m.unreached(strategy))
	}
	splitReport.Summarize(t, failed)
	if n >= defaultSeeds {
		for p := range numPoints {
			for f := range numFaults {
				if all.fired[p][f] == 0 {
					t.Errorf("cell %s × %s never reached by any strategy in seeds %d-%d", pointNames[p], faultNames[f], first, first+uint64(n)-1)
				}
			}
		}
	}
}

// slowest lists the k seeds that took longest, with their steps and
// rounds (a seed that spins shows as many rounds for its steps).
func slowest(results []result, k int) string {
	rs := slices.Clone(results)
	slices.SortFunc(rs, func(a, b result) int { return int(b.took - a.took) })
	var b strings.Builder
	for _, r := range rs[:min(k, len(rs))] {
		status := "passed"
		if r.finding != "" {
			status = "failed"
		}
		fmt.Fprintf(&b, "  seed %d (%s, %s at %s, %s): %v, %d steps, %d rounds; %s\n", r.seed, r.split.strategy,
			faultNames[r.split.fault], pointNames[r.split.point][:2], r.split.outcome, r.took.Round(time.Millisecond), r.stats.steps, r.stats.rounds, status)
	}
	return b.String()
}

// splitReport reports TestClusterSplitSim's failed seeds: report, with
// the split seeds' rerun line.
var splitReport = func() simkit.Report {
	r := report
	r.Repro = splitReproLine
	return r
}()

func splitReproLine(seed uint64) string {
	return fmt.Sprintf("SHARDSPLIT_SIM_SEED=%d SHARDSPLIT_SIM_SEEDS=1 go test ./tests/sim/cluster -run 'TestClusterSplitSim$' -v (strategy %s)", seed, strategyOf(seed))
}

func runSplitSeed(seed uint64) result {
	w := newWorld(seed)
	w.split = newSplitRun(w)
	return runWorld(w)
}

// matrix counts, per point × fault, the seeds that tried the cell, the
// seeds whose fault struck there, and how those seeds' splits ended.
type matrix struct {
	tried, fired, handedOff, rolledBack, failed [numPoints][numFaults]int
	passed                                      [numPoints]int // seeds whose split passed the point
	seeds                                       int
}

// tally counts the seeds of one strategy (all seeds for "").
func tally(results []result, strategy string) *matrix {
	m := &matrix{}
	for _, r := range results {
		s := r.split
		if !s.on || (strategy != "" && s.strategy != strategy) {
			continue
		}
		m.seeds++
		m.tried[s.point][s.fault]++
		for p, ok := range s.reached {
			if ok {
				m.passed[p]++
			}
		}
		if !s.fired {
			continue
		}
		m.fired[s.point][s.fault]++
		switch {
		case r.finding != "":
			m.failed[s.point][s.fault]++
		case s.outcome == "handed off":
			m.handedOff[s.point][s.fault]++
		default:
			m.rolledBack[s.point][s.fault]++
		}
	}
	return m
}

// unreached names the cells of the strategy that no seed's fault struck
// (a cell the strategy does not have is named apart).
func (m *matrix) unreached(strategy string) string {
	var miss, none []string
	for p := range numPoints {
		for f := range numFaults {
			if m.fired[p][f] > 0 {
				continue
			}
			cell := fmt.Sprintf("%s × %s (tried %d)", pointNames[p][:2], faultNames[f], m.tried[p][f])
			if pointApplies(strategy, p) {
				miss = append(miss, cell)
			} else {
				none = append(none, cell)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  cells reached: %d of %d", numCells-len(miss)-len(none), numCells-len(none))
	if len(none) > 0 {
		fmt.Fprintf(&b, " (%d the strategy does not have)", len(none))
	}
	b.WriteString("\n")
	for _, c := range miss {
		fmt.Fprintf(&b, "  not reached: %s\n", c)
	}
	return b.String()
}

// String prints the matrix: each cell "reached/tried (handed off,
// rolled back or never began, failed)".
func (m *matrix) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  cell: seeds whose fault struck at the point / seeds that tried the cell (splits handed off h, rolled back or never begun r, seeds failed x)\n")
	fmt.Fprintf(&b, "  %-44s", "point \\ fault")
	for f := range numFaults {
		fmt.Fprintf(&b, " | %-34s", faultNames[f])
	}
	b.WriteString(" | seeds passing the point\n")
	for p := range numPoints {
		fmt.Fprintf(&b, "  %-44s", pointNames[p])
		for f := range numFaults {
			fmt.Fprintf(&b, " | %-34s", fmt.Sprintf("%d/%d (h%d r%d x%d)", m.fired[p][f], m.tried[p][f], m.handedOff[p][f], m.rolledBack[p][f], m.failed[p][f]))
		}
		fmt.Fprintf(&b, " | %d of %d\n", m.passed[p], m.seeds)
	}
	return b.String()
}
