package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/shardsplit/shardsplit/routing"
)

// Validate checks the state's structural invariants and returns every
// violation found (up to a limit), wrapping ErrInvalidState:
//
//   - Nodes are keyed by name, with distinct ids; a node's disk copies are
//     of existing shards, one per shard.
//   - Each index has exactly its routing table's shards (0..Shards-1
//     until a split; then the table's active shards and the children of
//     its splits in progress) in its terms, in-sync sets and copies; its
//     splits in progress are the table's, with the same children; every
//     committed split has a hand-off record; each shard has one primary
//     and Replicas replicas.
//   - An unassigned copy has no node and no allocation id; an assigned one
//     is on a node of the cluster, which records that copy on its disk; no
//     node holds two copies of a shard; allocation ids are unique in the
//     cluster.
//   - A started copy's id is in the in-sync set; a replica is assigned
//     only while its primary is started; a primary initializes from an
//     empty store only while the in-sync set is empty, else from an
//     existing store under an in-sync id, or, for a child of a split in
//     progress with an empty in-sync set, in place from its parent; a
//     shard with an assigned primary or an in-sync id has a primary term
//     of at least 1.
//
// What must hold between two states (terms never decrease, in-sync ids
// appear only when a copy starts, promotions only from the in-sync set
// with a greater term) is CheckTransition's.
func (s *State) Validate() error {
	v := &violations{}
	if !s.Bootstrapped() && (len(s.Nodes) > 0 || len(s.Indices) > 0) {
		v.addf("the state has nodes or indices but no cluster uuid")
	}
	if err := validateNodes(s); err != nil {
		v.add(err)
	}
	for _, name := range s.IndexNames() {
		if err := validateIndex(s, name, s.Indices[name]); err != nil {
			v.add(err)
		}
	}
	ids := map[string]shardName{}
	for c := range s.AllCopies() {
		if !c.Copy.Assigned() {
			continue
		}
		if other, dup := ids[c.Copy.AllocationID]; dup {
			v.addf("allocation id [%s] is used by %s and %s", c.Copy.AllocationID, other, shardName{c.Index, c.Shard})
		}
		ids[c.Copy.AllocationID] = shardName{c.Index, c.Shard}
	}
	return v.err()
}

type violations struct{ errs []error }

const maxViolations = 20

func (v *violations) add(err error) {
	if len(v.errs) < maxViolations {
		v.errs = append(v.errs, err)
	}
}

func (v *violations) addf(format string, args ...any) { v.add(fmt.Errorf(format, args...)) }

func (v *violations) err() error {
	if len(v.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidState, errors.Join(v.errs...))
}

// validateNodes checks the node table (see Validate).
func validateNodes(s *State) error {
	v := &violations{}
	byUUID := make(map[string]*IndexMeta, len(s.Indices))
	for _, im := range s.Indices {
		byUUID[im.UUID] = im
	}
	ids := map[string]string{}
	for _, name := range s.NodeNames() {
		n := s.Nodes[name]
		if n.Name != name || n.ID == "" {
			v.addf("node [%s] is keyed as [%s] with id [%s]", n.Name, name, n.ID)
		}
		if other, dup := ids[n.ID]; dup {
			v.addf("nodes [%s] and [%s] have the same id [%s]", other, name, n.ID)
		}
		ids[n.ID] = name
		for i, c := range n.Copies {
			im := byUUID[c.IndexUUID]
			_, exists := im.Copies[c.Shard]
			if c.AllocationID == "" || im == nil || !exists {
				v.addf("node [%s] has a copy of shard [%d] of index uuid [%s] with allocation id [%s], which the cluster cannot have", name, c.Shard, c.IndexUUID, c.AllocationID)
			}
			if i > 0 && compareLocalCopy(n.Copies[i-1], c) >= 0 {
				v.addf("node [%s] lists its copies out of order or twice at shard [%d] of index uuid [%s]", name, c.Shard, c.IndexUUID)
			}
		}
	}
	return v.err()
}

// validateIndex checks one index against the state's nodes (see Validate).
func validateIndex(s *State, name string, im *IndexMeta) error {
	v := &violations{}
	if im.Name != name || im.UUID == "" {
		v.addf("index [%s] is keyed as [%s] with uuid [%s]", im.Name, name, im.UUID)
	}
	if im.Shards < 1 || im.Replicas < 0 || im.RoutingShards < im.Shards {
		v.addf("index [%s] has %d shards, %d replicas, %d routing shards", name, im.Shards, im.Replicas, im.RoutingShards)
		return v.err()
	}
	want, err := expectedShards(im)
	if err != nil {
		v.add(err)
		return v.err()
	}
	for _, sh := range want {
		_, t := im.PrimaryTerms[sh]
		_, i := im.InSync[sh]
		_, c := im.Copies[sh]
		if !t || !i || !c {
			v.addf("index [%s] shard [%d] has a term %t, an in-sync set %t, copies %t", name, sh, t, i, c)
		}
	}
	if len(im.PrimaryTerms) != len(want) || len(im.InSync) != len(want) || len(im.Copies) != len(want) {
		v.addf("index [%s] has shards %v but %d terms, %d in-sync sets, %d copy lists", name, want, len(im.PrimaryTerms), len(im.InSync), len(im.Copies))
	}
	for _, sh := range im.ShardIDs() {
		validateShard(v, s, im, sh)
	}
	return v.err()
}

// expectedShards returns the shards an index must have, ascending: the
// routing table's active shards and the children of its splits in
// progress, which must be the index's Splits; a committed split's parent
// has a hand-off record.
func expectedShards(im *IndexMeta) ([]routing.ShardID, error) {
	if im.Routing == nil {
		if len(im.Splits) > 0 || len(im.Handoffs) > 0 {
			return nil, fmt.Errorf("index [%s] has splits or hand-offs but no routing table", im.Name)
		}
		ids := make([]routing.ShardID, im.Shards)
		for i := range ids {
			ids[i] = routing.ShardID(i)
		}
		return ids, nil
	}
	t, err := im.Table()
	if err != nil {
		return nil, fmt.Errorf("index [%s] routing table: %w", im.Name, err)
	}
	if t.Settings().Shards != im.Shards {
		return nil, fmt.Errorf("index [%s] has %d shards, its routing table %d roots", im.Name, im.Shards, t.Settings().Shards)
	}
	ids := t.ActiveShards()
	inProgress := t.InProgress()
	if !slices.Equal(inProgress, slices.Sorted(maps.Keys(im.Splits))) {
		return nil, fmt.Errorf("index [%s] splits in progress are %v in its routing table, %v in its metadata", im.Name, inProgress, slices.Sorted(maps.Keys(im.Splits)))
	}
	for _, p := range inProgress {
		rec, _ := t.Split(p)
		var children []routing.ShardID
		for _, c := range rec.Children {
			children = append(children, c.Shard)
		}
		if !slices.Equal(children, im.Splits[p].Children) {
			return nil, fmt.Errorf("index [%s] split of [%d] has children %v in its routing table, %v in its metadata", im.Name, p, children, im.Splits[p].Children)
		}
		ids = append(ids, children...)
	}
	for _, rec := range t.Splits() {
		if _, ok := im.Handoffs[rec.Parent]; !rec.InProgress && !ok {
			return nil, fmt.Errorf("index [%s] split of [%d] is committed without a hand-off record", im.Name, rec.Parent)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

func validateShard(v *violations, s *State, im *IndexMeta, shard routing.ShardID) {
	where := shardName{im.Name, shard} // formatted only for a violation: Apply runs this on every change
	copies, inSync := im.Copies[shard], im.InSync[shard]
	if len(copies) != im.Replicas+1 {
		v.addf("%s has %d copies, want %d", where, len(copies), im.Replicas+1)
	}
	for i, id := range inSync {
		if id == "" || (i > 0 && inSync[i-1] >= id) {
			v.addf("%s in-sync set %v is not sorted unique ids", where, inSync)
			break
		}
	}
	primaries := 0
	var primary ShardCopy
	for i, c := range copies {
		if c.Primary {
			primaries++
			primary = c
		}
		if !c.Assigned() {
			if c.State != Unassigned || c.Node != "" || c.AllocationID != "" || c.UnassignedReason == "" {
				v.addf("%s has an unassigned copy %+v", where, c)
			}
			continue
		}
		if c.AllocationID == "" || (c.State != Initializing && c.State != Started) {
			v.addf("%s has an assigned copy %+v", where, c)
		}
		n, ok := s.Nodes[c.Node]
		if !ok {
			v.addf("%s has copy [%s] on node [%s], which is not in the cluster", where, c.AllocationID, c.Node)
		} else if lc, ok := localCopy(n, im.UUID, shard); !ok || lc.AllocationID != c.AllocationID {
			v.addf("%s has copy [%s] on node [%s], whose disk holds %+v", where, c.AllocationID, c.Node, lc)
		}
		if slices.ContainsFunc(copies[:i], func(o ShardCopy) bool { return o.Node == c.Node }) {
			v.addf("%s has two copies on node [%s]", where, c.Node)
		}
		if c.Active() && !slices.Contains(inSync, c.AllocationID) {
			v.addf("%s copy [%s] is started but not in the in-sync set %v", where, c.AllocationID, inSync)
		}
		if c.Active() && (c.RecoverySource != "" || c.UnassignedReason != "") {
			v.addf("%s started copy %+v keeps its recovery or unassigned info", where, c)
		}
	}
	if primaries != 1 {
		v.addf("%s has %d primaries", where, primaries)
		return
	}
	validateRecovery(v, im, shard, primary)
}

// validateRecovery checks where a shard's copies recover from: replicas
// from a started primary, the primary from an empty store only while the
// in-sync set is empty, else from an in-sync copy's store.
func validateRecovery(v *violations, im *IndexMeta, shard routing.ShardID, primary ShardCopy) {
	where := shardName{im.Name, shard}
	copies, inSync := im.Copies[shard], im.InSync[shard]
	parent, child := im.SplitOf(shard)
	sp := im.Splits[parent]
	for _, c := range copies {
		if !c.Primary && c.State == Initializing && c.RecoverySource == InPlaceSplit {
			// A local split's child replica, built beside a parent replica.
			if !child || sp.Strategy != StrategyLocal {
				v.addf("%s replica %+v builds from a split though the shard is not a child of a local split in progress", where, c)
			}
			continue
		}
		if !c.Primary && c.Assigned() && !primary.Active() {
			v.addf("%s replica [%s] is %s while the primary is %s", where, c.AllocationID, c.State, primary.State)
		}
		if !c.Primary && c.State != Started && c.RecoverySource != Peer {
			v.addf("%s replica %+v does not recover from its peer", where, c)
		}
		if !c.Primary && c.Assigned() && child && sp.ChildReplicasAfterHandoff() {
			v.addf("%s replica [%s] is %s before the hand-off of a %s split", where, c.AllocationID, c.State, sp.Strategy)
		}
	}
	if primary.RecoverySource == InPlaceSplit {
		if _, child := im.SplitOf(shard); !child || primary.State != Initializing || len(inSync) > 0 {
			v.addf("%s primary %+v builds from a split though the shard is not a child of a split in progress with an empty in-sync set %v", where, primary, inSync)
		}
		return
	}
	if primary.State != Started {
		want := EmptyStore
		if len(inSync) > 0 {
			want = ExistingStore
		}
		if primary.RecoverySource != want {
			v.addf("%s primary %+v should recover from %s (in-sync %v)", where, primary, want, inSync)
		}
		if primary.State == Initializing && want == ExistingStore && !slices.Contains(inSync, primary.AllocationID) {
			v.addf("%s primary [%s] opens an existing store that is not in the in-sync set %v", where, primary.AllocationID, inSync)
		}
	}
	if (primary.Assigned() || len(inSync) > 0) && im.PrimaryTerms[shard] < 1 {
		v.addf("%s has primary term %d with primary %s and in-sync %v", where, im.PrimaryTerms[shard], primary.State, inSync)
	}
}

// shardName prints as [index][shard].
type shardName struct {
	index string
	shard routing.ShardID
}

func (n shardName) String() string { return fmt.Sprintf("[%s][%d]", n.index, n.shard) }

// CheckTransition checks what must hold between a state and the state
// Apply made of it with task t: the version grows by one; primary terms
// never decrease; an id joins an in-sync set only when t starts that copy,
// and a copy starts only then; a shard's new primary comes from its
// in-sync set as it was (or starts empty when that set was empty) under a
// strictly greater term (the simulation's I2); index versions grow when
// an index changes; indices appear and vanish only by CreateIndex and
// DeleteIndex; shards appear and vanish only by a split
// (checkSplitTransition). Tests call it after every Apply; it wraps
// ErrInvalidState.
func CheckTransition(prev, next *State, t Task) error {
	v := &violations{}
	if next.Version != prev.Version+1 {
		v.addf("version went from %d to %d", prev.Version, next.Version)
	}
	if prev.Bootstrapped() && next.ClusterUUID != prev.ClusterUUID {
		v.addf("cluster uuid changed from [%s] to [%s]", prev.ClusterUUID, next.ClusterUUID)
	}
	if next.NextAllocation < prev.NextAllocation {
		v.addf("next allocation went back from %d to %d", prev.NextAllocation, next.NextAllocation)
	}
	for _, name := range slices.Sorted(maps.Keys(prev.Indices)) {
		if next.Indices[name] == nil && (t.DeleteIndex == nil || t.DeleteIndex.Name != name) {
			v.addf("index [%s] vanished under a %s task", name, t.Kind())
		}
	}
	for _, name := range next.IndexNames() {
		was, im := prev.Indices[name], next.Indices[name]
		if was == nil || was.UUID != im.UUID {
			if t.CreateIndex == nil || t.CreateIndex.Name != name {
				v.addf("index [%s] appeared under a %s task", name, t.Kind())
			}
			continue
		}
		checkIndexTransition(v, was, im, t)
	}
	return v.err()
}

func checkIndexTransition(v *violations, was, im *IndexMeta, t Task) {
	if im.Version < was.Version {
		v.addf("index [%s] version went back from %d to %d", im.Name, was.Version, im.Version)
	}
	if im.Version == was.Version {
		a, _ := json.Marshal(was)
		b, _ := json.Marshal(im)
		if string(a) != string(b) {
			v.addf("index [%s] changed but kept version %d", im.Name, im.Version)
		}
	}
	checkSplitTransition(v, was, im, t)
	for _, shard := range im.ShardIDs() {
		if _, existed := was.Copies[shard]; !existed {
			continue // a child of a split begun by t: checkSplitTransition
		}
		where := fmt.Sprintf("[%s][%d]", im.Name, shard)
		started := ""
		if st := t.ShardStarted; st != nil && st.Index == im.Name && st.Shard == shard {
			started = st.AllocationID
		}
		term0, term1 := was.PrimaryTerms[shard], im.PrimaryTerms[shard]
		if term1 < term0 {
			v.addf("%s primary term went back from %d to %d", where, term0, term1)
		}
		for _, id := range im.InSync[shard] {
			if !slices.Contains(was.InSync[shard], id) && id != started {
				v.addf("%s in-sync set gained [%s] under a %s task", where, id, t.Kind())
			}
		}
		startedBefore := map[string]bool{}
		for _, c := range was.Copies[shard] {
			if c.Active() {
				startedBefore[c.AllocationID] = true
			}
		}
		var p0, p1 ShardCopy
		for _, c := range was.Copies[shard] {
			if c.Primary {
				p0 = c
			}
		}
		for _, c := range im.Copies[shard] {
			if c.Primary {
				p1 = c
			}
			if c.Active() && !startedBefore[c.AllocationID] && c.AllocationID != started {
				v.addf("%s copy [%s] started under a %s task", where, c.AllocationID, t.Kind())
			}
		}
		if !p1.Assigned() || (p0.Assigned() && p0.AllocationID == p1.AllocationID) {
			continue
		}
		if term1 <= term0 {
			v.addf("%s new primary [%s] kept term %d", where, p1.AllocationID, term1)
		}
		if p1.RecoverySource == EmptyStore {
			if len(was.InSync[shard]) > 0 {
				v.addf("%s new primary [%s] starts empty though the in-sync set was %v", where, p1.AllocationID, was.InSync[shard])
			}
		} else if !slices.Contains(was.InSync[shard], p1.AllocationID) {
			v.addf("%s new primary [%s] was not in the in-sync set %v", where, p1.AllocationID, was.InSync[shard])
		}
	}
}

// checkSplitTransition checks how shards appear and vanish: a shard
// appears only as a child of the split t begins, with the parent's primary
// term and its primary built in place on the parent primary's node; a
// shard vanishes only as the parent t hands off (all its children's
// copies started and in sync before) or as a child of a split rolled back
// (the parent keeps its copies); a handed-off parent never comes back.
func checkSplitTransition(v *violations, was, im *IndexMeta, t Task) {
	for _, shard := range im.ShardIDs() {
		if _, existed := was.Copies[shard]; existed {
			continue
		}
		where := fmt.Sprintf("[%s][%d]", im.Name, shard)
		s := t.SplitShard
		if s == nil || s.Index != im.Name || !slices.Contains(im.Splits[s.Shard].Children, shard) {
			v.addf("%s appeared under a %s task", where, t.Kind())
			continue
		}
		if im.PrimaryTerms[shard] != was.PrimaryTerms[s.Shard] {
			v.addf("%s child has term %d, its parent %d", where, im.PrimaryTerms[shard], was.PrimaryTerms[s.Shard])
		}
		var parent ShardCopy
		for _, c := range was.Copies[s.Shard] {
			if c.Primary {
				parent = c
			}
		}
		for _, c := range im.Copies[shard] {
			if c.Primary && (c.RecoverySource != InPlaceSplit || c.Node != parent.Node) {
				v.addf("%s child primary %+v is not built in place on the parent primary's node [%s]", where, c, parent.Node)
			}
			if !c.Primary && c.Assigned() && !slices.ContainsFunc(was.Copies[s.Shard], func(p ShardCopy) bool { return !p.Primary && p.Node == c.Node }) {
				v.addf("%s child replica %+v is not built beside a parent replica", where, c)
			}
		}
	}
	for _, shard := range was.ShardIDs() {
		if _, kept := im.Copies[shard]; kept {
			continue
		}
		where := fmt.Sprintf("[%s][%d]", im.Name, shard)
		if h := t.SplitHandoff; h != nil && h.Index == im.Name && h.Shard == shard {
			sp := was.Splits[shard]
			if sp.Strategy == StrategyLocal && sp.Cut == nil {
				v.addf("%s local split handed off with no cut", where)
			}
			for _, child := range sp.Children {
				for _, c := range was.Copies[child] {
					if sp.ChildReplicasAfterHandoff() && !c.Primary {
						continue
					}
					if !c.Active() || !slices.Contains(was.InSync[child], c.AllocationID) {
						v.addf("%s handed off while child [%d] copy [%s] was %s and not in sync", where, child, c.AllocationID, c.State)
					}
				}
			}
			continue
		}
		parent, child := was.SplitOf(shard)
		if !child {
			v.addf("%s vanished under a %s task", where, t.Kind())
			continue
		}
		if _, still := im.Splits[parent]; still {
			v.addf("%s child vanished while the split of [%d] goes on", where, parent)
		}
		if _, ok := im.Copies[parent]; !ok {
			v.addf("%s child vanished with its parent [%d]", where, parent)
		}
	}
	for p := range was.Handoffs {
		if _, ok := im.Handoffs[p]; !ok {
			v.addf("[%s][%d] lost its hand-off record", im.Name, p)
		}
		if _, ok := im.Copies[p]; ok {
			v.addf("[%s][%d] has copies after its hand-off", im.Name, p)
		}
	}
}
