package cluster_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"

	"pgregory.net/rapid"

	. "github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/routing"
)

// TestRandomTasksKeepTheStateValid applies random task sequences, stale
// and bad ones among them: after every Apply the input is unchanged, a
// refusal is a *RefusedError, and a result passes Validate and
// CheckTransition (terms monotone, in-sync ids only from starts, new
// primaries only from the in-sync set under a greater term). The same
// tasks replayed, each from the previous state encoded and decoded as a
// snapshot carries it, give byte-identical states and the same refusals. Once
// quiet (all copies started, a reroute), the allocator has left nothing
// it could place, and every split in progress hands off.
func TestRandomTasksKeepTheStateValid(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		g := &taskGen{rt: rt, disks: map[string][]LocalCopy{}, incarnation: map[string]int{}}
		s := &State{}
		var tasks []Task
		var trail []string // each step's encoded state or refusal
		steps := rapid.IntRange(1, 80).Draw(rt, "steps")
		for i := range steps {
			task := g.next(s, i)
			tasks = append(tasks, task)
			next, err := apply(rt, s, task)
			if err != nil {
				trail = append(trail, "refused: "+err.Error())
				continue
			}
			s = next
			g.remember(s)
			trail = append(trail, encode(rt, s))
		}
		// Replayed, each step starts from the previous state as a snapshot
		// would carry it: encoded and decoded.
		replay := &State{}
		for i, task := range tasks {
			var decoded State
			if err := json.Unmarshal([]byte(encode(rt, replay)), &decoded); err != nil {
				rt.Fatalf("decode: %v", err)
			}
			next, err := Apply(&decoded, task)
			got := ""
			if err != nil {
				got = "refused: " + err.Error()
			} else {
				replay = next
				got = encode(rt, replay)
			}
			if got != trail[i] {
				rt.Fatalf("step %d (%s) replayed differently:\n%s\nvs\n%s", i, task.Kind(), got, trail[i])
			}
		}
		if s.Bootstrapped() {
			s = quiesce(rt, s)
			checkQuiet(rt, s)
			// Once quiet, every split in progress has its children in
			// sync: its hand-off commits.
			for _, name := range s.IndexNames() {
				for _, p := range slices.Sorted(maps.Keys(s.Indices[name].Splits)) {
					im := s.Indices[name]
					if len(s.Nodes) <= im.Replicas {
						continue // a child replica has no node to go to
					}
					s = mustApply(rt, s, Task{SplitHandoff: &SplitHandoff{Index: name, Shard: p, ParentTerm: im.PrimaryTerms[p]}})
				}
			}
			checkQuiet(rt, quiesce(rt, s))
		}
	})
}

// taskGen draws tasks that fit the state most of the time.
type taskGen struct {
	rt          *rapid.T
	disks       map[string][]LocalCopy // what each node's disk holds, kept while it is away
	incarnation map[string]int
}

var (
	nodePool  = []string{"n1", "n2", "n3", "n4", "n5"}
	indexPool = []string{"i1", "i2", "i3"}
)

func (g *taskGen) remember(s *State) {
	for name, n := range s.Nodes {
		g.disks[name] = n.Copies
	}
}

func (g *taskGen) node(name string) NodeInfo {
	return NodeInfo{Name: name, ID: "id-" + name, EphemeralID: fmt.Sprintf("%s-%d", name, g.incarnation[name])}
}

func (g *taskGen) next(s *State, step int) Task {
	rt := g.rt
	if !s.Bootstrapped() && (step == 0 || rapid.Bool().Draw(rt, "bootstrap")) {
		n := rapid.IntRange(1, 3).Draw(rt, "bootstrap nodes")
		b := &Bootstrap{ClusterName: "c", ClusterUUID: "uuid"}
		for _, name := range nodePool[:n] {
			b.Nodes = append(b.Nodes, g.node(name))
		}
		return Task{Bootstrap: b}
	}
	switch k := rapid.IntRange(0, 99).Draw(rt, "kind"); {
	case k < 30:
		return g.started(s)
	case k < 44:
		return g.failed(s)
	case k < 52:
		return Task{NodeLeft: &NodeLeft{Name: rapid.SampledFrom(nodePool).Draw(rt, "leaves")}}
	case k < 64:
		return g.joined(s)
	case k < 74:
		name := rapid.SampledFrom(indexPool).Draw(rt, "create")
		shards := rapid.IntRange(1, 3).Draw(rt, "shards")
		ct := createTask(name+fmt.Sprint(step), shards, rapid.IntRange(0, 2).Draw(rt, "replicas"))
		if f := rapid.SampledFrom([]int{1, 4}).Draw(rt, "routing factor"); f > 1 {
			ct.CreateIndex.Settings["index.number_of_routing_shards"] = fmt.Sprint(shards * f) // room to split
		}
		ct.CreateIndex.Settings[SettingReplicaSplit] = rapid.SampledFrom(Strategies).Draw(rt, "replica split")
		return ct
	case k < 78:
		if names := s.IndexNames(); len(names) > 0 {
			return Task{DeleteIndex: &DeleteIndex{Name: rapid.SampledFrom(names).Draw(rt, "delete")}}
		}
		return Task{DeleteIndex: &DeleteIndex{Name: "none"}}
	case k < 86:
		return g.split(s)
	case k < 88:
		if names := s.IndexNames(); len(names) > 0 {
			return Task{UpdateReplicas: &UpdateReplicas{Index: rapid.SampledFrom(names).Draw(rt, "index"), Replicas: rapid.IntRange(-1, 3).Draw(rt, "replicas")}}
		}
		return Task{UpdateReplicas: &UpdateReplicas{Index: "none", Replicas: 1}}
	default:
		return Task{Reroute: &Reroute{}}
	}
}

func copies(s *State, keep func(ShardCopy) bool) []ShardCopyOf {
	var out []ShardCopyOf
	for c := range s.AllCopies() {
		if keep(c.Copy) {
			out = append(out, c)
		}
	}
	return out
}

// started mostly starts an initializing copy under its term; sometimes it
// sends a stale or wrong-term report.
func (g *taskGen) started(s *State) Task {
	rt := g.rt
	cands := copies(s, func(c ShardCopy) bool { return c.State == Initializing })
	if len(cands) == 0 || rapid.IntRange(0, 9).Draw(rt, "stale start") == 0 {
		all := copies(s, ShardCopy.Assigned)
		if len(all) == 0 {
			return Task{ShardStarted: &ShardStarted{Index: "none", AllocationID: "x"}}
		}
		c := rapid.SampledFrom(all).Draw(rt, "any copy")
		return Task{ShardStarted: &ShardStarted{Index: c.Index, Shard: c.Shard, AllocationID: c.Copy.AllocationID, PrimaryTerm: uint64(rapid.IntRange(0, 5).Draw(rt, "term"))}}
	}
	c := rapid.SampledFrom(cands).Draw(rt, "initializing copy")
	term := uint64(0)
	if c.Copy.Primary {
		term = c.Term
	}
	return Task{ShardStarted: &ShardStarted{Index: c.Index, Shard: c.Shard, AllocationID: c.Copy.AllocationID, PrimaryTerm: term}}
}

// failed fails an assigned copy (by itself, or by its primary under the
// current or an older term), or asks to mark an in-sync id without a copy
// stale.
func (g *taskGen) failed(s *State) Task {
	rt := g.rt
	var cands []ShardCopyOf
	cands = append(cands, copies(s, ShardCopy.Assigned)...)
	for _, name := range s.IndexNames() {
		im := s.Indices[name]
		for _, shard := range im.ShardIDs() {
			for _, id := range im.InSync[shard] {
				if !slices.ContainsFunc(im.Copies[shard], func(c ShardCopy) bool { return c.AllocationID == id }) {
					cands = append(cands, ShardCopyOf{Index: name, IndexUUID: im.UUID, Shard: shard, Term: im.PrimaryTerms[shard], Copy: ShardCopy{AllocationID: id}})
				}
			}
		}
	}
	if len(cands) == 0 {
		return Task{ShardFailed: &ShardFailed{Index: "none", AllocationID: "x"}}
	}
	c := rapid.SampledFrom(cands).Draw(rt, "failed copy")
	term := []uint64{0, c.Term, c.Term - min(c.Term, 1)}[rapid.IntRange(0, 2).Draw(rt, "term choice")]
	return Task{ShardFailed: &ShardFailed{Index: c.Index, Shard: c.Shard, AllocationID: c.Copy.AllocationID,
		PrimaryTerm: term, MarkStale: rapid.Bool().Draw(rt, "mark stale"), Reason: "test"}}
}

// joined joins a node: a new one with its disk, a retry, a restart, a
// conflicting one, or one whose disk lists a bogus in-sync id.
func (g *taskGen) joined(s *State) Task {
	rt := g.rt
	name := rapid.SampledFrom(nodePool).Draw(rt, "joins")
	switch rapid.IntRange(0, 9).Draw(rt, "join kind") {
	case 0:
		n := g.node(name)
		n.ID = "other"
		return Task{NodeJoined: &NodeJoined{Node: n}}
	case 1, 2:
		g.incarnation[name]++
	}
	n := g.node(name)
	n.Copies = slices.Clone(g.disks[name])
	if rapid.IntRange(0, 9).Draw(rt, "bogus copy") == 0 {
		if ids := copies(s, ShardCopy.Assigned); len(ids) > 0 {
			c := rapid.SampledFrom(ids).Draw(rt, "claimed copy")
			n.Copies = slices.DeleteFunc(n.Copies, func(l LocalCopy) bool { return l.IndexUUID == s.Indices[c.Index].UUID && l.Shard == c.Shard })
			n.Copies = append(n.Copies, LocalCopy{IndexUUID: s.Indices[c.Index].UUID, Shard: c.Shard, AllocationID: c.Copy.AllocationID})
		}
	}
	return Task{NodeJoined: &NodeJoined{Node: n}}
}

// quiesce starts every initializing copy, round after round, then reroutes.
func quiesce(rt *rapid.T, s *State) *State {
	for range 50 {
		// A local split's parent primary proposes its cut first.
		for _, name := range s.IndexNames() {
			im := s.Indices[name]
			for _, p := range slices.Sorted(maps.Keys(im.Splits)) {
				if sp := im.Splits[p]; sp.Strategy == StrategyLocal && sp.Cut == nil {
					s = mustApply(rt, s, Task{SplitCut: &SplitCut{Index: name, Shard: p, ParentTerm: im.PrimaryTerms[p], Seq: 3}})
				}
			}
		}
		init := copies(s, func(c ShardCopy) bool { return c.State == Initializing })
		if len(init) == 0 {
			return mustApply(rt, s, Task{Reroute: &Reroute{}})
		}
		for _, c := range init {
			term := uint64(0)
			if c.Copy.Primary {
				term = c.Term
			}
			s = mustApply(rt, s, Task{ShardStarted: &ShardStarted{Index: c.Index, Shard: c.Shard, AllocationID: c.Copy.AllocationID, PrimaryTerm: term}})
		}
	}
	rt.Fatalf("copies kept initializing")
	return nil
}

// checkQuiet: in a quiet state the allocator has placed all it could. A
// primary is unassigned only when the shard was active before and no node
// holds an in-sync copy; a replica only when every node holds a copy of
// the shard or its primary is not active.
func checkQuiet(rt *rapid.T, s *State) {
	for _, name := range s.IndexNames() {
		im := s.Indices[name]
		for _, shard := range im.ShardIDs() {
			sh := shard
			p, _ := s.Primary(name, shard)
			assigned := 0
			for _, c := range im.Copies[shard] {
				if c.Assigned() {
					assigned++
				}
			}
			if !p.Assigned() {
				if len(im.InSync[shard]) == 0 && len(s.Nodes) > 0 {
					rt.Fatalf("[%s][%d] has a new primary unassigned with %d nodes", name, sh, len(s.Nodes))
				}
				for _, n := range s.NodeNames() {
					for _, lc := range s.Nodes[n].Copies {
						if lc.IndexUUID == im.UUID && lc.Shard == shard && slices.Contains(im.InSync[shard], lc.AllocationID) &&
							!slices.ContainsFunc(im.Copies[shard], func(c ShardCopy) bool { return c.AllocationID == lc.AllocationID }) {
							rt.Fatalf("[%s][%d] primary unassigned though %s holds in-sync copy %s", name, sh, n, lc.AllocationID)
						}
					}
				}
				continue
			}
			if parent, child := im.SplitOf(shard); child && im.Splits[parent].ChildReplicasAfterHandoff() {
				continue // its replicas wait for the hand-off
			}
			if assigned < len(im.Copies[shard]) && assigned < len(s.Nodes) && p.Active() {
				rt.Fatalf("[%s][%d] has %d of %d copies assigned on %d nodes", name, sh, assigned, len(im.Copies[shard]), len(s.Nodes))
			}
		}
	}
}

// split begins, hands off or cancels a split: mostly one that fits (a
// split in progress, handed off under its parent's term once its children
// may be in sync), sometimes one that does not.
func (g *taskGen) split(s *State) Task {
	rt := g.rt
	names := s.IndexNames()
	if len(names) == 0 {
		return Task{SplitShard: &SplitShard{Index: "none", Children: 2}}
	}
	type running struct {
		index  string
		parent routing.ShardID
	}
	var splits []running
	for _, name := range names {
		for _, p := range slices.Sorted(maps.Keys(s.Indices[name].Splits)) {
			splits = append(splits, running{name, p})
		}
	}
	if len(splits) > 0 && rapid.IntRange(0, 3).Draw(rt, "act on a split") > 0 {
		sp := rapid.SampledFrom(splits).Draw(rt, "split")
		if rapid.IntRange(0, 4).Draw(rt, "cancel") == 0 {
			return Task{SplitCancel: &SplitCancel{Index: sp.index, Shard: sp.parent, Reason: "test"}}
		}
		term := s.Indices[sp.index].PrimaryTerms[sp.parent] - uint64(rapid.IntRange(0, 5).Draw(rt, "old term")/5)
		if rapid.IntRange(0, 2).Draw(rt, "cut") == 0 {
			return Task{SplitCut: &SplitCut{Index: sp.index, Shard: sp.parent, ParentTerm: term, Seq: int64(rapid.IntRange(-1, 9).Draw(rt, "cut seq"))}}
		}
		return Task{SplitHandoff: &SplitHandoff{Index: sp.index, Shard: sp.parent, ParentTerm: term, MaxSeq: 7}}
	}
	name := rapid.SampledFrom(names).Draw(rt, "split index")
	shard := rapid.SampledFrom(s.Indices[name].ShardIDs()).Draw(rt, "split shard")
	return Task{SplitShard: &SplitShard{Index: name, Shard: shard, Children: rapid.IntRange(1, 3).Draw(rt, "children")}}
}
