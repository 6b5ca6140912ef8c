package cluster

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/shardsplit/shardsplit/routing"
)

// Apply returns the state after task t. s is never modified: the result
// shares what t did not change with s (copy-on-write), so neither may be
// modified by the caller afterwards (Clone first).
//
// A refused task returns a *RefusedError (errors.Is with the Err* values)
// and no state; the caller keeps s. Every applied task bumps the state's
// Version, bumps the Version of every index it changed, and ends with the
// allocator (reroute) and the in-sync and primary-term bookkeeping of
// IndexMetadataUpdater. Apply then checks the indices and nodes it changed
// against Validate's invariants and returns an error wrapping
// ErrInvalidState rather than a broken state.
//
// Apply is deterministic: the same state and task give the same result,
// byte for byte once encoded, on every node.
func Apply(s *State, t Task) (*State, error) {
	kind := t.Kind()
	if kind == "invalid" {
		return nil, invalid("cluster: a task sets exactly one of its variants")
	}
	if t.Bootstrap == nil && !s.Bootstrapped() {
		return nil, refuse(RefusedNotBootstrapped, "", "cluster: %s before bootstrap: the cluster has no uuid yet", kind)
	}
	a := newApplier(s)
	var rerr *RefusedError
	switch {
	case t.Bootstrap != nil:
		rerr = a.bootstrap(t.Bootstrap)
	case t.NodeJoined != nil:
		rerr = a.nodeJoined(t.NodeJoined)
	case t.NodeLeft != nil:
		rerr = a.nodeLeft(t.NodeLeft)
	case t.CreateIndex != nil:
		rerr = a.createIndex(t.CreateIndex)
	case t.DeleteIndex != nil:
		rerr = a.deleteIndex(t.DeleteIndex)
	case t.UpdateReplicas != nil:
		rerr = a.updateReplicas(t.UpdateReplicas)
	case t.ShardStarted != nil:
		rerr = a.shardStarted(t.ShardStarted)
	case t.ShardFailed != nil:
		rerr = a.shardFailed(t.ShardFailed)
	case t.Reroute != nil:
		a.expireDelayed(t.Reroute.ExpireDelayed)
	case t.SplitShard != nil:
		rerr = a.splitShard(t.SplitShard)
	case t.SplitHandoff != nil:
		rerr = a.splitHandoff(t.SplitHandoff)
	case t.SplitCancel != nil:
		rerr = a.splitCancel(t.SplitCancel)
	case t.SplitCut != nil:
		rerr = a.splitCut(t.SplitCut)
	}
	if rerr == nil {
		// Before its hand-off a split whose parent or child lost a copy
		// rolls back; after it there is no parent to roll back to.
		rerr = a.rollBackSplits()
	}
	if rerr != nil {
		return nil, rerr
	}
	a.reroute()
	a.applyChanges()
	a.updateSplitPhases()
	a.finish()
	if err := a.check(); err != nil {
		return nil, fmt.Errorf("cluster: %s left %w", kind, err)
	}
	return a.next, nil
}

// applier is one Apply in progress: the state being built and what this
// allocation round changed, as OpenSearch's RoutingAllocation carries its
// RoutingNodes and IndexMetadataUpdater.
type applier struct {
	prev  *State
	next  *State
	owned map[string]bool // indices of next copied for writing (or new)
	// updates are IndexMetadataUpdater's per-shard changes, applied to the
	// in-sync sets and primary terms once the round's routing is final.
	updates map[shardKey]*shardUpdates
	// ignore is a node a shard may not be allocated to in this round: the
	// node it just failed on (AllocationService.applyFailedShards →
	// RoutingAllocation.addIgnoreShardForNode).
	ignore map[shardKey]string
	nodes  []string // sorted node names, for the allocator
	// ownedCopies are the nodes whose Copies list next owns (copied in
	// this Apply); nodesChanged is set when a node joined, left or had its
	// disk copies edited.
	ownedCopies  map[string]bool
	nodesChanged bool
	// cancels are the splits in progress a failure of this task touched.
	cancels map[shardKey]bool
}

type shardKey struct {
	index string
	shard routing.ShardID
}

func newApplier(s *State) *applier {
	next := *s
	next.Nodes = maps.Clone(s.Nodes)
	if next.Nodes == nil {
		next.Nodes = map[string]NodeInfo{}
	}
	next.Indices = maps.Clone(s.Indices)
	if next.Indices == nil {
		next.Indices = map[string]*IndexMeta{}
	}
	return &applier{prev: s, next: &next, owned: map[string]bool{}, updates: map[shardKey]*shardUpdates{},
		ignore: map[shardKey]string{}, ownedCopies: map[string]bool{}}
}

// mutIndex returns the index to change, copying it on first write.
func (a *applier) mutIndex(name string) *IndexMeta {
	im := a.next.Indices[name]
	if !a.owned[name] {
		im = im.clone()
		a.next.Indices[name] = im
		a.owned[name] = true
	}
	return im
}

// finish puts changed shards' copies in order and bumps versions.
func (a *applier) finish() {
	for name := range a.owned {
		im := a.next.Indices[name]
		if im == nil {
			continue
		}
		for _, cs := range im.Copies {
			sortCopies(cs)
		}
		im.Version++
	}
	a.next.Version++
}

// check validates what this Apply changed (the raft checkAndReturn
// pattern): every changed index against the new node set, and the nodes
// if any changed. An index it did not change cannot have lost a node:
// removing a node fails, and so changes, every index with a copy on it.
func (a *applier) check() error {
	if a.nodesChanged || len(a.ownedCopies) > 0 {
		if err := validateNodes(a.next); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(a.owned)) {
		if im := a.next.Indices[name]; im != nil {
			if err := validateIndex(a.next, name, im); err != nil {
				return err
			}
		}
	}
	return nil
}

func (a *applier) bootstrap(b *Bootstrap) *RefusedError {
	if a.prev.Bootstrapped() {
		return refuse(RefusedAlreadyBootstrapped, "", "cluster: already bootstrapped as [%s] with uuid [%s]", a.prev.ClusterName, a.prev.ClusterUUID)
	}
	if b.ClusterName == "" || b.ClusterUUID == "" {
		return invalid("cluster: bootstrap needs a cluster name and uuid, got [%s] and [%s]", b.ClusterName, b.ClusterUUID)
	}
	if len(b.Nodes) == 0 {
		return invalid("cluster: bootstrap of [%s] names no nodes", b.ClusterName)
	}
	a.next.ClusterName, a.next.ClusterUUID = b.ClusterName, b.ClusterUUID
	for _, n := range b.Nodes {
		if err := a.addNode(n); err != nil {
			return err
		}
	}
	return nil
}

// nodeJoined follows JoinTaskExecutor: a node of a new name joins; the same
// node (name and id) joining again replaces its info; another node under a
// name or id the cluster has is refused. A join of the same node with
// another ephemeral id is a restart: the copies the cluster has on the old
// incarnation fail first (NODE_LEFT), as when OpenSearch replaces a
// restarted DiscoveryNode.
func (a *applier) nodeJoined(j *NodeJoined) *RefusedError {
	n := j.Node
	cur, ok := a.next.Nodes[n.Name]
	if !ok {
		return a.addNode(n)
	}
	if cur.ID != n.ID {
		return refuse(RefusedNodeConflict, "", "a node named [%s] with id [%s] is already in the cluster", cur.Name, cur.ID)
	}
	copies, rerr := a.diskCopies(n)
	if rerr != nil {
		return rerr
	}
	if cur.EphemeralID == n.EphemeralID {
		// A retried join: the cluster's view of the node's disk is newer
		// than what the node sent with its join.
		n.Copies = cur.Copies
		a.next.Nodes[n.Name] = n
		a.nodesChanged = true
		return nil
	}
	a.failNodeCopies(cur)
	n.Copies = copies
	a.next.Nodes[n.Name] = n
	a.nodesChanged = true
	return nil
}

func (a *applier) addNode(n NodeInfo) *RefusedError {
	if n.Name == "" || n.ID == "" {
		return invalid("cluster: a node needs a name and an id, got [%s] and [%s]", n.Name, n.ID)
	}
	if cur, ok := a.next.Nodes[n.Name]; ok {
		return refuse(RefusedNodeConflict, "", "a node named [%s] with id [%s] is already in the cluster", cur.Name, cur.ID)
	}
	for _, name := range a.next.NodeNames() {
		if other := a.next.Nodes[name]; other.ID == n.ID {
			return refuse(RefusedNodeConflict, "", "a node with id [%s] is already in the cluster, named [%s]", n.ID, other.Name)
		}
	}
	copies, rerr := a.diskCopies(n)
	if rerr != nil {
		return rerr
	}
	n.Copies = copies
	a.next.Nodes[n.Name] = n
	a.nodesChanged = true
	return nil
}

// diskCopies returns the copies a joining node reported that belong to
// indices the cluster has, sorted; copies of other indices (deleted while
// the node was away: OpenSearch's dangling indices) are dropped. Two
// copies of one shard, or one without an allocation id, are bad input.
func (a *applier) diskCopies(n NodeInfo) ([]LocalCopy, *RefusedError) {
	byUUID := map[string]*IndexMeta{}
	for _, im := range a.next.Indices {
		byUUID[im.UUID] = im
	}
	var out []LocalCopy
	for _, c := range n.Copies {
		if c.AllocationID == "" {
			return nil, invalid("cluster: node [%s] reports a copy of shard [%d] of index uuid [%s] without an allocation id", n.Name, c.Shard, c.IndexUUID)
		}
		im := byUUID[c.IndexUUID]
		if im == nil {
			continue
		}
		if _, ok := im.Copies[c.Shard]; !ok {
			continue // a split's parent after its hand-off, or a cancelled child
		}
		out = append(out, c)
	}
	slices.SortFunc(out, compareLocalCopy)
	for i := 1; i < len(out); i++ {
		if compareLocalCopy(out[i-1], out[i]) == 0 {
			return nil, invalid("cluster: node [%s] reports two copies of shard [%d] of index uuid [%s]: [%s] and [%s]",
				n.Name, out[i].Shard, out[i].IndexUUID, out[i-1].AllocationID, out[i].AllocationID)
		}
	}
	return out, nil
}

func compareLocalCopy(x, y LocalCopy) int {
	if x.IndexUUID != y.IndexUUID {
		if x.IndexUUID < y.IndexUUID {
			return -1
		}
		return 1
	}
	return int(x.Shard) - int(y.Shard)
}

// nodeLeft follows AllocationService.disassociateDeadNodes: every copy on
// the node fails with NODE_LEFT (a primary's in-sync replica is promoted),
// and the node is removed. Its copies' ids stay in the in-sync sets: only
// a failure with markAsStale removes one, so that after a full restart a
// primary can come back on any in-sync copy.
func (a *applier) nodeLeft(l *NodeLeft) *RefusedError {
	cur, ok := a.next.Nodes[l.Name]
	if !ok {
		return stale("node [%s] is not in the cluster", l.Name)
	}
	if l.EphemeralID != "" && l.EphemeralID != cur.EphemeralID {
		return stale("node [%s] left as incarnation [%s]; the cluster has incarnation [%s]", l.Name, l.EphemeralID, cur.EphemeralID)
	}
	a.failNodeCopies(cur)
	delete(a.next.Nodes, l.Name)
	a.nodesChanged = true
	return nil
}

// failNodeCopies fails every copy assigned to n, in index and shard order.
func (a *applier) failNodeCopies(n NodeInfo) {
	for _, nc := range a.next.CopiesOn(n.Name) {
		im := a.next.Indices[nc.Index]
		// Failing a primary may already have failed a replica recovering
		// from it, so look the copy up again.
		if i := im.copyIndex(nc.Shard, nc.Copy.AllocationID); i >= 0 && im.Copies[nc.Shard][i].Node == n.Name {
			a.failCopy(nc.Index, nc.Shard, nc.Copy.AllocationID,
				unassignedInfo{reason: ReasonNodeLeft, details: "node_left [" + n.ID + "]", lastNode: n.Name,
					delayed: DelayedTimeout(im) > 0}, false)
		}
	}
}

// createIndex follows MetadataCreateIndexService: the index gets its
// shards, each with an unassigned primary (EMPTY_STORE, primary term 0
// until it initializes) and number_of_replicas unassigned replicas, which
// reroute places.
func (a *applier) createIndex(c *CreateIndex) *RefusedError {
	if c.Name == "" || c.UUID == "" {
		return invalid("cluster: create index needs a name and a uuid, got [%s] and [%s]", c.Name, c.UUID)
	}
	if cur := a.next.Indices[c.Name]; cur != nil {
		return refuse(RefusedIndexExists, "ResourceAlreadyExistsException", "index [%s/%s] already exists", cur.Name, cur.UUID)
	}
	for _, name := range a.next.IndexNames() {
		if a.next.Indices[name].UUID == c.UUID {
			return invalid("cluster: index uuid [%s] is already the uuid of index [%s]", c.UUID, name)
		}
	}
	shards, rerr := intSetting(c.Settings, "index.number_of_shards", 1, -1)
	if rerr != nil {
		return rerr
	}
	replicas, rerr := intSetting(c.Settings, "index.number_of_replicas", 0, -1)
	if rerr != nil {
		return rerr
	}
	routingShards, rerr := intSetting(c.Settings, "index.number_of_routing_shards", shards, shards)
	if rerr != nil {
		return rerr
	}
	im := &IndexMeta{
		Name: c.Name, UUID: c.UUID, CreationDate: c.CreationDate,
		Settings: maps.Clone(c.Settings), Mappings: slices.Clone(c.Mappings),
		Shards: shards, Replicas: replicas, RoutingShards: routingShards,
		PrimaryTerms: map[routing.ShardID]uint64{},
		InSync:       map[routing.ShardID][]string{},
		Copies:       map[routing.ShardID][]ShardCopy{},
	}
	if im.Settings == nil {
		im.Settings = map[string]string{}
	}
	created := unassignedInfo{reason: ReasonIndexCreated}
	for sh := range shards {
		id := routing.ShardID(sh)
		im.PrimaryTerms[id] = 0
		im.InSync[id] = []string{}
		copies := []ShardCopy{unassignedCopy(true, EmptyStore, created)}
		for range replicas {
			copies = append(copies, unassignedCopy(false, Peer, created))
		}
		im.Copies[id] = copies
	}
	a.next.Indices[c.Name] = im
	a.owned[c.Name] = true
	return nil
}

// intSetting reads an integer setting of at least min; def (when >= 0)
// stands in for a missing one. The ">= min" words are Setting.parseInt's.
func intSetting(settings map[string]string, key string, min, def int) (int, *RefusedError) {
	v, ok := settings[key]
	if !ok {
		if def >= 0 {
			return def, nil
		}
		return 0, invalid("cluster: setting [%s] is missing", key)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, invalid("Failed to parse value [%s] for setting [%s]", v, key)
	}
	if n < min {
		return 0, invalid("Failed to parse value [%s] for setting [%s] must be >= %d", v, key, min)
	}
	return n, nil
}

// deleteIndex follows MetadataDeleteIndexService. The nodes delete their
// copies of it, so the cluster forgets them from the nodes' disks too.
func (a *applier) deleteIndex(d *DeleteIndex) *RefusedError {
	im := a.next.Indices[d.Name]
	if im == nil {
		return refuse(RefusedIndexNotFound, "IndexNotFoundException", "no such index [%s]", d.Name)
	}
	if d.UUID != "" && d.UUID != im.UUID {
		return refuse(RefusedIndexNotFound, "IndexNotFoundException", "no such index [%s] with uuid [%s]: it has uuid [%s]", d.Name, d.UUID, im.UUID)
	}
	delete(a.next.Indices, d.Name)
	delete(a.owned, d.Name)
	for _, name := range a.next.NodeNames() {
		n := a.next.Nodes[name]
		if slices.ContainsFunc(n.Copies, func(c LocalCopy) bool { return c.IndexUUID == im.UUID }) {
			n.Copies = slices.DeleteFunc(slices.Clone(n.Copies), func(c LocalCopy) bool { return c.IndexUUID == im.UUID })
			a.next.Nodes[name] = n
			a.nodesChanged = true
		}
	}
	return nil
}

// updateReplicas follows RoutingTable.Builder.updateNumberOfReplicas:
// added copies are unassigned (REPLICA_ADDED); removed ones are taken
// unassigned first, then initializing, then started, and among equals the
// one on the node holding the most copies (then the greatest node name),
// which keeps the allocation balanced. The removed copies' ids stay in the
// in-sync set, as in OpenSearch (IndexMetadataUpdater trims it only when
// it grows): the primary marks them stale before it acknowledges a write
// without them.
func (a *applier) updateReplicas(u *UpdateReplicas) *RefusedError {
	cur := a.next.Indices[u.Index]
	if cur == nil {
		return refuse(RefusedIndexNotFound, "IndexNotFoundException", "no such index [%s]", u.Index)
	}
	if u.Replicas < 0 {
		return invalid("Failed to parse value [%d] for setting [index.number_of_replicas] must be >= 0", u.Replicas)
	}
	if u.Replicas == cur.Replicas {
		return nil
	}
	if len(cur.Splits) > 0 {
		return refuse(RefusedSplit, "IllegalStateException", "Cannot update [index.number_of_replicas] of index [%s] while shard [%d] is being split",
			u.Index, slices.Sorted(maps.Keys(cur.Splits))[0])
	}
	counts := a.nodeCounts()
	im := a.mutIndex(u.Index)
	im.Settings = maps.Clone(im.Settings)
	im.Settings["index.number_of_replicas"] = strconv.Itoa(u.Replicas)
	for _, id := range im.ShardIDs() {
		copies := im.Copies[id]
		for range u.Replicas - im.Replicas {
			copies = append(copies, unassignedCopy(false, Peer, unassignedInfo{reason: ReasonReplicaAdded}))
		}
		for range im.Replicas - u.Replicas {
			v := victim(copies, counts)
			copies = slices.Delete(copies, v, v+1)
		}
		im.Copies[id] = copies
	}
	im.Replicas = u.Replicas
	return nil
}

// victim picks the replica to remove (see updateReplicas).
func victim(copies []ShardCopy, counts map[string]int) int {
	rank := map[ShardState]int{Unassigned: 0, Initializing: 1, Started: 2}
	best := -1
	for i, c := range copies {
		if c.Primary {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := copies[best]
		switch {
		case rank[c.State] != rank[b.State]:
			if rank[c.State] < rank[b.State] {
				best = i
			}
		case counts[c.Node] != counts[b.Node]:
			if counts[c.Node] > counts[b.Node] {
				best = i
			}
		case c.Node > b.Node:
			best = i
		}
	}
	return best
}

// shardStarted follows ShardStateAction.ShardStartedClusterStateTaskExecutor:
// a report for a copy that is not initializing (any more), or from a
// primary of an earlier term, changes nothing; otherwise the copy starts
// and IndexMetadataUpdater.shardStarted adds its id to the in-sync set.
func (a *applier) shardStarted(t *ShardStarted) *RefusedError {
	im := a.next.Indices[t.Index]
	if im == nil {
		return stale("shard started for index [%s], which does not exist", t.Index)
	}
	i := im.copyIndex(t.Shard, t.AllocationID)
	if i < 0 {
		return stale("shard started for [%s][%d] allocation id [%s], which the shard does not have", t.Index, t.Shard, t.AllocationID)
	}
	c := im.Copies[t.Shard][i]
	if term := im.PrimaryTerms[t.Shard]; c.Primary && t.PrimaryTerm > 0 && t.PrimaryTerm != term {
		return stale("shard started for [%s][%d] allocation id [%s] under primary term [%d]; the current term is [%d]", t.Index, t.Shard, t.AllocationID, t.PrimaryTerm, term)
	}
	if c.State != Initializing {
		return stale("shard started for [%s][%d] allocation id [%s], which is %s, not INITIALIZING", t.Index, t.Shard, t.AllocationID, c.State)
	}
	if parent, child := im.SplitOf(t.Shard); child && im.Splits[parent].Strategy == StrategyLocal && im.Splits[parent].Cut == nil {
		return stale("shard started for [%s][%d] allocation id [%s], a child of a local split with no cut yet", t.Index, t.Shard, t.AllocationID)
	}
	if p := primaryPos(im.Copies[t.Shard]); !c.Primary && (p < 0 || !im.Copies[t.Shard][p].Active()) {
		return stale("shard started for replica [%s][%d] allocation id [%s] before its primary is active", t.Index, t.Shard, t.AllocationID)
	}
	im = a.mutIndex(t.Index)
	im.Copies[t.Shard][i] = ShardCopy{AllocationID: c.AllocationID, Node: c.Node, Primary: c.Primary, State: Started}
	u := a.updatesFor(shardKey{t.Index, t.Shard})
	u.added = append(u.added, c.AllocationID)
	return nil
}

// shardFailed follows ShardStateAction.ShardFailedClusterStateTaskExecutor.
// A report from a primary (PrimaryTerm > 0) of another term is refused
// with NoLongerPrimaryShardException's words. A copy the routing table has
// fails (AllocationService.applyFailedShards), may not go back to its node
// in this round, and leaves the in-sync set when MarkStale. An id only in
// the in-sync set is removed from it when a primary asks
// (removeStaleIdsWithoutRoutings; OpenSearch requires PrimaryTerm > 0 for
// that, whatever markAsStale says). Anything else is stale.
func (a *applier) shardFailed(t *ShardFailed) *RefusedError {
	im := a.next.Indices[t.Index]
	if im == nil {
		return stale("shard failed for index [%s], which does not exist", t.Index)
	}
	if _, ok := im.Copies[t.Shard]; !ok {
		return stale("shard failed for [%s][%d]; the index has no such shard", t.Index, t.Shard)
	}
	if term := im.PrimaryTerms[t.Shard]; t.PrimaryTerm > 0 && t.PrimaryTerm != term {
		if t.PrimaryTerm > term {
			return invalid("cluster: shard failed for [%s][%d] under primary term [%d], above the current term [%d]", t.Index, t.Shard, t.PrimaryTerm, term)
		}
		return refuse(RefusedNoLongerPrimary, "NoLongerPrimaryShardException", "primary term [%d] did not match current primary term [%d]", t.PrimaryTerm, term)
	}
	i := im.copyIndex(t.Shard, t.AllocationID)
	if i < 0 {
		if t.PrimaryTerm == 0 || !im.inSync(t.Shard, t.AllocationID) {
			return stale("shard failed for [%s][%d] allocation id [%s], which the shard does not have", t.Index, t.Shard, t.AllocationID)
		}
		remaining := slices.DeleteFunc(slices.Clone(im.InSync[t.Shard]), func(id string) bool { return id == t.AllocationID })
		if len(remaining) > 0 { // never empty an in-sync set: that would allow an empty primary
			a.mutIndex(t.Index).InSync[t.Shard] = remaining
		}
		return nil
	}
	c := im.Copies[t.Shard][i]
	a.ignore[shardKey{t.Index, t.Shard}] = c.Node
	details := "failed shard on node [" + a.next.Nodes[c.Node].ID + "]: " + t.Reason
	a.failCopy(t.Index, t.Shard, t.AllocationID,
		unassignedInfo{reason: ReasonAllocationFailed, details: details, failed: c.FailedAllocations + 1}, t.MarkStale)
	return nil
}
