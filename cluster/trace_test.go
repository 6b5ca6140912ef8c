package cluster_test

// Cluster-state traces: testdata/trace/*.txt drive Apply task by task and
// show the routing table, in-sync sets and primary terms after each, so a
// reader can follow OpenSearch's rules through a failover or a restart.
// Allocation ids print as a<n>, their number in the cluster (AllocationID).
// Every Apply is checked as everywhere in these tests (input unchanged,
// Validate, CheckTransition). Regenerate with -rewrite and review the diff
// like code.
//
// Commands:
//
//	bootstrap nodes=(n1,n2,...)
//	create-index name=I shards=N replicas=R [routing=N] [delayed=T] [replica-split=S]
//	delete-index name=I
//	update-replicas index=I replicas=R
//	start-all                                  report every initializing copy started, round after round
//	shard-started index=I shard=S aid=aN [term=T]
//	shard-failed index=I shard=S aid=aN [term=T] [stale] [reason=...]
//	node-left name=N
//	node-joined name=N [restart] [disk]        restart: a new incarnation; disk: report the copies its disk kept
//	reroute
//	split-shard index=I shard=S children=N
//	split-handoff index=I shard=S term=T [max-seq=M]
//	split-cancel index=I shard=S [reason=...]
//	state | health

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	. "github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/routing"
)

type clusterTrace struct {
	t *testing.T
	s *State
	// disks are the copies each node's disk holds: the cluster's view
	// while the node is a member, kept as it was when the node left.
	disks       map[string][]LocalCopy
	incarnation map[string]int
	aliases     map[string]string // allocation id → aN
}

func TestClusterTraces(t *testing.T) {
	datadriven.Walk(t, "testdata/trace", func(t *testing.T, path string) {
		env := &clusterTrace{t: t, s: &State{}, disks: map[string][]LocalCopy{}, incarnation: map[string]int{}, aliases: map[string]string{}}
		datadriven.RunTest(t, path, env.handle)
	})
}

func (env *clusterTrace) handle(t *testing.T, td *datadriven.TestData) string {
	switch td.Cmd {
	case "state":
		return env.show()
	case "health":
		return env.health() + "\n"
	case "start-all":
		return env.startAll(td)
	}
	task, err := env.task(td)
	if err != nil {
		td.Fatalf(t, "%v", err)
	}
	next, err := apply(t, env.s, task)
	if err != nil {
		return env.alias(fmt.Sprintf("refused: %v\n", err))
	}
	env.s = next
	env.remember()
	return env.show()
}

func (env *clusterTrace) task(td *datadriven.TestData) (Task, error) {
	var (
		name, index, aid, reason string
		shard, term, replicas    int
		nodes                    []string
	)
	switch td.Cmd {
	case "bootstrap":
		td.ScanArgs(env.t, "nodes", &nodes)
		b := &Bootstrap{ClusterName: "trace", ClusterUUID: "trace-uuid"}
		for _, n := range nodes {
			b.Nodes = append(b.Nodes, env.node(n))
		}
		return Task{Bootstrap: b}, nil
	case "create-index":
		var shards int
		td.ScanArgs(env.t, "name", &name)
		td.ScanArgs(env.t, "shards", &shards)
		td.ScanArgs(env.t, "replicas", &replicas)
		delayed := "0"
		if td.HasArg("delayed") {
			td.ScanArgs(env.t, "delayed", &delayed)
		}
		task := delayedTask(name, shards, replicas, delayed)
		if td.HasArg("routing") {
			var routingShards string
			td.ScanArgs(env.t, "routing", &routingShards)
			task.CreateIndex.Settings["index.number_of_routing_shards"] = routingShards
		}
		if td.HasArg("replica-split") {
			var strategy string
			td.ScanArgs(env.t, "replica-split", &strategy)
			task.CreateIndex.Settings[SettingReplicaSplit] = strategy
		}
		return task, nil
	case "delete-index":
		td.ScanArgs(env.t, "name", &name)
		return Task{DeleteIndex: &DeleteIndex{Name: name}}, nil
	case "update-replicas":
		td.ScanArgs(env.t, "index", &index)
		td.ScanArgs(env.t, "replicas", &replicas)
		return Task{UpdateReplicas: &UpdateReplicas{Index: index, Replicas: replicas}}, nil
	case "shard-started", "shard-failed":
		td.ScanArgs(env.t, "index", &index)
		td.ScanArgs(env.t, "shard", &shard)
		td.ScanArgs(env.t, "aid", &aid)
		td.MaybeScanArgs(env.t, "term", &term)
		id, err := env.unalias(aid)
		if err != nil {
			return Task{}, err
		}
		if td.Cmd == "shard-started" {
			return Task{ShardStarted: &ShardStarted{Index: index, Shard: routing.ShardID(shard), AllocationID: id, PrimaryTerm: uint64(term)}}, nil
		}
		td.MaybeScanArgs(env.t, "reason", &reason)
		return Task{ShardFailed: &ShardFailed{Index: index, Shard: routing.ShardID(shard), AllocationID: id,
			PrimaryTerm: uint64(term), MarkStale: td.HasArg("stale"), Reason: reason}}, nil
	case "node-left":
		td.ScanArgs(env.t, "name", &name)
		return Task{NodeLeft: &NodeLeft{Name: name}}, nil
	case "node-joined":
		td.ScanArgs(env.t, "name", &name)
		if td.HasArg("restart") {
			env.incarnation[name]++
		}
		n := env.node(name)
		if td.HasArg("disk") {
			n.Copies = env.disks[name]
		}
		return Task{NodeJoined: &NodeJoined{Node: n}}, nil
	case "split-shard", "split-handoff", "split-cancel":
		td.ScanArgs(env.t, "index", &index)
		td.ScanArgs(env.t, "shard", &shard)
		switch td.Cmd {
		case "split-shard":
			var children int
			td.ScanArgs(env.t, "children", &children)
			return Task{SplitShard: &SplitShard{Index: index, Shard: routing.ShardID(shard), Children: children}}, nil
		case "split-handoff":
			maxSeq := 0
			td.ScanArgs(env.t, "term", &term)
			td.MaybeScanArgs(env.t, "max-seq", &maxSeq)
			return Task{SplitHandoff: &SplitHandoff{Index: index, Shard: routing.ShardID(shard), ParentTerm: uint64(term), MaxSeq: int64(maxSeq)}}, nil
		}
		td.MaybeScanArgs(env.t, "reason", &reason)
		return Task{SplitCancel: &SplitCancel{Index: index, Shard: routing.ShardID(shard), Reason: reason}}, nil
	case "reroute":
		r := &Reroute{}
		if td.HasArg("expire") {
			td.ScanArgs(env.t, "expire", &r.ExpireDelayed)
		}
		return Task{Reroute: r}, nil
	}
	return Task{}, fmt.Errorf("unknown command %q", td.Cmd)
}

func (env *clusterTrace) node(name string) NodeInfo {
	return NodeInfo{Name: name, ID: "id-" + name, EphemeralID: fmt.Sprintf("%s-%d", name, env.incarnation[name])}
}

// startAll reports every initializing copy started (with its primary term
// when it is a primary), until a round starts nothing.
func (env *clusterTrace) startAll(td *datadriven.TestData) string {
	var b strings.Builder
	for range 10 {
		n := 0
		for c := range env.s.AllCopies() {
			if c.Copy.State != Initializing {
				continue
			}
			st := &ShardStarted{Index: c.Index, Shard: c.Shard, AllocationID: c.Copy.AllocationID}
			if c.Copy.Primary {
				st.PrimaryTerm = c.Term
			}
			next, err := apply(env.t, env.s, Task{ShardStarted: st})
			if err != nil {
				td.Fatalf(env.t, "start %s: %v", c.Copy.AllocationID, err)
			}
			env.s = next
			env.remember()
			n++
			fmt.Fprintf(&b, "started [%s][%d] %s\n", c.Index, c.Shard, env.alias(c.Copy.AllocationID))
		}
		if n == 0 {
			break
		}
	}
	return b.String() + env.show()
}

// remember updates the disks of the nodes in the cluster.
func (env *clusterTrace) remember() {
	for name, n := range env.s.Nodes {
		env.disks[name] = n.Copies
	}
}

func (env *clusterTrace) alias(text string) string {
	for n := uint64(len(env.aliases)); n < env.s.NextAllocation; n++ {
		env.aliases[AllocationID(env.s.ClusterUUID, n)] = "a" + strconv.FormatUint(n, 10)
	}
	for id, a := range env.aliases {
		text = strings.ReplaceAll(text, id, a)
	}
	return text
}

// aliasSorted returns the aliases of ids in their numeric order.
func (env *clusterTrace) aliasSorted(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = env.alias(id)
	}
	slices.SortFunc(out, func(x, y string) int {
		return cmp.Or(cmp.Compare(len(x), len(y)), cmp.Compare(x, y))
	})
	return out
}

func (env *clusterTrace) unalias(a string) (string, error) {
	n, err := strconv.ParseUint(strings.TrimPrefix(a, "a"), 10, 64)
	if err != nil || !strings.HasPrefix(a, "a") {
		return "", fmt.Errorf("allocation id %q is not aN", a)
	}
	return AllocationID(env.s.ClusterUUID, n), nil
}

// show prints the state: its version and nodes, then every shard: term,
// in-sync set and copies.
func (env *clusterTrace) show() string {
	var b strings.Builder
	fmt.Fprintf(&b, "v%d nodes [%s]\n", env.s.Version, strings.Join(env.s.NodeNames(), " "))
	for _, name := range env.s.IndexNames() {
		im := env.s.Indices[name]
		fmt.Fprintf(&b, "%s v%d\n", name, im.Version)
		for _, p := range slices.Sorted(maps.Keys(im.Splits)) {
			sp := im.Splits[p]
			fmt.Fprintf(&b, "  split [%d] -> %v %s %s\n", p, sp.Children, sp.Phase, sp.Strategy)
		}
		for _, p := range slices.Sorted(maps.Keys(im.Handoffs)) {
			h := im.Handoffs[p]
			fmt.Fprintf(&b, "  handed off [%d] -> %v at term %d seq %d\n", p, h.Children, h.ParentTerm, h.MaxSeq)
		}
		for _, shard := range im.ShardIDs() {
			fmt.Fprintf(&b, "  [%d] term %d in-sync [%s]\n", shard, im.PrimaryTerms[shard], strings.Join(env.aliasSorted(im.InSync[shard]), " "))
			for _, c := range im.Copies[shard] {
				b.WriteString("    " + showCopy(c) + "\n")
			}
		}
	}
	b.WriteString(env.health() + "\n")
	return env.alias(b.String())
}

func showCopy(c ShardCopy) string {
	role := "r"
	if c.Primary {
		role = "p"
	}
	f := []string{role}
	if c.Assigned() {
		f = append(f, c.AllocationID, c.Node)
	}
	f = append(f, string(c.State))
	if c.RecoverySource != "" {
		f = append(f, string(c.RecoverySource))
	}
	var why []string
	for _, w := range []string{c.UnassignedReason, c.UnassignedDetails} {
		if w != "" {
			why = append(why, w)
		}
	}
	if c.FailedAllocations > 0 {
		why = append(why, fmt.Sprintf("failed %d", c.FailedAllocations))
	}
	if !c.Assigned() && c.AllocationStatus != StatusNoAttempt {
		why = append(why, c.AllocationStatus)
	}
	if len(why) > 0 {
		f = append(f, "("+strings.Join(why, ", ")+")")
	}
	return strings.Join(f, " ")
}

func (env *clusterTrace) health() string {
	h := env.s.Health()
	var per []string
	for _, n := range slices.Sorted(maps.Keys(h.Indices)) {
		per = append(per, n+" "+string(h.Indices[n].Status))
	}
	return fmt.Sprintf("health %s: %d active primaries, %d active, %d initializing, %d unassigned, %.1f%% active [%s]",
		h.Status, h.ActivePrimaryShards, h.ActiveShards, h.InitializingShards, h.UnassignedShards, h.ActiveShardsPercent, strings.Join(per, ", "))
}
