package cluster

import (
	"cmp"
	"maps"
	"slices"

	"github.com/shardsplit/shardsplit/routing"
)

// unassignedInfo is why a copy became unassigned (UnassignedInfo).
type unassignedInfo struct {
	reason, details string
	failed          int // failed allocations so far
	// lastNode is the node a copy left with its node; delayed, that a
	// replica slot waits for it (ShardCopy.Delayed).
	lastNode string
	delayed  bool
}

func unassignedCopy(primary bool, src RecoverySource, info unassignedInfo) ShardCopy {
	return ShardCopy{
		Primary: primary, State: Unassigned, RecoverySource: src,
		UnassignedReason: info.reason, UnassignedDetails: info.details, FailedAllocations: info.failed,
		AllocationStatus: StatusNoAttempt, LastNode: info.lastNode, Delayed: info.delayed && !primary,
	}
}

// shardUpdates are one round's changes to a shard that its metadata must
// follow: IndexMetadataUpdater.Updates.
type shardUpdates struct {
	increaseTerm       bool
	added, removed     []string // allocation ids for, and out of, the in-sync set
	initializedPrimary string
	firstFailedPrimary string
}

func (a *applier) updatesFor(k shardKey) *shardUpdates {
	u := a.updates[k]
	if u == nil {
		u = &shardUpdates{}
		a.updates[k] = u
	}
	return u
}

// failCopy fails the assigned copy aid of a shard: RoutingNodes.failShard
// with the IndexMetadataUpdater.shardFailed observer.
//
//   - A failing primary first fails the replicas recovering from it
//     (PRIMARY_FAILED), as they cannot finish.
//   - A failing primary is replaced by a started replica in the in-sync
//     set, if there is one (unassignPrimaryAndPromoteActiveReplicaIfExists;
//     OpenSearch takes the one on the node of the highest version, ours all
//     have one version, so the lowest node name), and becomes an unassigned
//     replica itself; else it stays an unassigned primary.
//   - The failure of an active primary raises the shard's primary term
//     (once per round, however many fail).
//   - markStale removes an active copy's id from the in-sync set
//     (AllocationService.applyFailedShards → removeAllocationId).
func (a *applier) failCopy(index string, shard routing.ShardID, aid string, info unassignedInfo, markStale bool) {
	a.noteSplitFailure(index, shard)
	im := a.mutIndex(index)
	c := im.Copies[shard][im.copyIndex(shard, aid)]
	u := a.updatesFor(shardKey{index, shard})
	if markStale && c.Active() {
		u.removed = append(u.removed, aid)
	}
	if c.Primary {
		for _, r := range slices.Clone(im.Copies[shard]) {
			if !r.Primary && r.State == Initializing {
				a.failCopy(index, shard, r.AllocationID,
					unassignedInfo{reason: ReasonPrimaryFailed, details: "primary failed while replica initializing"}, false)
			}
		}
		if c.Active() {
			u.increaseTerm = true
			if u.firstFailedPrimary == "" {
				u.firstFailedPrimary = aid
			}
		}
	}
	copies := im.Copies[shard]
	i, j := im.copyIndex(shard, aid), -1
	if c.Primary {
		j = a.promotable(im, shard)
	}
	switch {
	case !c.Primary:
		copies[i] = unassignedCopy(false, Peer, info)
	case j >= 0:
		copies[i] = unassignedCopy(false, Peer, info)
		copies[j].Primary = true
		a.setLocalCopy(copies[j].Node, LocalCopy{IndexUUID: im.UUID, Shard: shard, AllocationID: copies[j].AllocationID, Primary: true})
	default:
		copies[i] = unassignedCopy(true, a.primarySource(im, shard), info)
	}
}

// promotable returns the position of the replica to promote when the
// shard's primary fails: a started replica whose id is in the in-sync set,
// on the lowest node name; -1 if none.
func (a *applier) promotable(im *IndexMeta, shard routing.ShardID) int {
	best := -1
	for i, c := range im.Copies[shard] {
		if c.Primary || !c.Active() || !im.inSync(shard, c.AllocationID) {
			continue
		}
		if best < 0 || c.Node < im.Copies[shard][best].Node {
			best = i
		}
	}
	return best
}

// primarySource is where an unassigned primary will recover from: the
// store of an in-sync copy once the shard has one, else empty
// (ShardRouting.moveToUnassigned keeps EMPTY_STORE for a primary that was
// never active).
func (a *applier) primarySource(im *IndexMeta, shard routing.ShardID) RecoverySource {
	if u := a.updates[shardKey{im.Name, shard}]; len(im.InSync[shard]) > 0 || (u != nil && len(u.added) > 0) {
		return ExistingStore
	}
	return EmptyStore
}

// initialize puts the unassigned copy at position i on a node with an
// allocation id: RoutingNodes.initializeShard with the
// IndexMetadataUpdater.shardInitialized observer, which raises the primary
// term whenever a primary initializes (so a new shard's first primary has
// term 1). The copy becomes the node's copy of that shard on disk.
func (a *applier) initialize(index string, shard routing.ShardID, i int, node, aid string, src RecoverySource) {
	im := a.mutIndex(index)
	c := &im.Copies[shard][i]
	c.AllocationID, c.Node, c.State, c.RecoverySource = aid, node, Initializing, src
	if c.Primary {
		u := a.updatesFor(shardKey{index, shard})
		u.increaseTerm = true
		u.initializedPrimary = aid
	}
	a.setLocalCopy(node, LocalCopy{IndexUUID: im.UUID, Shard: shard, AllocationID: aid, Primary: c.Primary})
}

// newAllocationID hands out the next allocation id.
func (a *applier) newAllocationID() string {
	id := AllocationID(a.next.ClusterUUID, a.next.NextAllocation)
	a.next.NextAllocation++
	return id
}

// setLocalCopy records lc as the node's copy of its shard, replacing any
// other. The node's list is copied on its first change in this Apply.
func (a *applier) setLocalCopy(node string, lc LocalCopy) {
	n := a.next.Nodes[node]
	if !a.ownedCopies[node] {
		n.Copies = slices.Clone(n.Copies)
		a.ownedCopies[node] = true
	}
	if i, found := slices.BinarySearchFunc(n.Copies, lc, compareLocalCopy); found {
		n.Copies[i] = lc
	} else {
		n.Copies = slices.Insert(n.Copies, i, lc)
	}
	a.next.Nodes[node] = n
}

// dropLocalCopy forgets the node's copy of a shard on disk if it is aid's.
func (a *applier) dropLocalCopy(node, uuid string, shard routing.ShardID, aid string) {
	n, ok := a.next.Nodes[node]
	if !ok {
		return
	}
	i, found := slices.BinarySearchFunc(n.Copies, LocalCopy{IndexUUID: uuid, Shard: shard}, compareLocalCopy)
	if !found || n.Copies[i].AllocationID != aid {
		return
	}
	if !a.ownedCopies[node] {
		n.Copies = slices.Clone(n.Copies)
		a.ownedCopies[node] = true
	}
	n.Copies = slices.Delete(n.Copies, i, i+1)
	a.next.Nodes[node] = n
}

// applyChanges brings the in-sync sets and primary terms of the shards this
// round changed up to date: IndexMetadataUpdater.applyChanges, run once
// the round's routing is final.
func (a *applier) applyChanges() {
	keys := slices.SortedFunc(maps.Keys(a.updates), func(x, y shardKey) int {
		return cmp.Or(cmp.Compare(x.index, y.index), cmp.Compare(x.shard, y.shard))
	})
	for _, k := range keys {
		if a.next.Indices[k.index] == nil {
			continue
		}
		u := a.updates[k]
		im := a.mutIndex(k.index)
		if in := updatedInSync(im, k.shard, u); in != nil {
			im.InSync[k.shard] = in
		}
		if u.increaseTerm {
			im.PrimaryTerms[k.shard]++
		}
	}
}

// updatedInSync is IndexMetadataUpdater.updateInSyncAllocations on its
// standard path (we never force an empty or stale primary, its other
// path): the old set plus the started ids minus the stale ones; trimmed
// to number_of_replicas + 1 ids, those of assigned copies first, when it
// grew past that (so it does not grow without bound while nodes with
// replicas keep leaving); keeping a failed primary's id when no copy of
// the shard is active any more. It returns nil when the set would be
// empty: an in-sync set that was not empty never becomes so.
func updatedInSync(im *IndexMeta, shard routing.ShardID, u *shardUpdates) []string {
	old := im.InSync[shard]
	set := slices.Clone(old)
	for _, id := range u.added {
		if !slices.Contains(set, id) {
			set = append(set, id)
		}
	}
	set = slices.DeleteFunc(set, func(id string) bool { return slices.Contains(u.removed, id) })
	if maxActive := im.Replicas + 1; len(set) > len(old) && len(set) > maxActive {
		assigned := map[string]bool{}
		for _, c := range im.Copies[shard] {
			if c.Assigned() {
				assigned[c.AllocationID] = true
			}
		}
		// OpenSearch keeps the first maxActive of a hash set sorted by
		// "has a routing entry"; among equals we keep the smaller ids, to
		// be deterministic.
		slices.SortFunc(set, func(x, y string) int {
			if assigned[x] != assigned[y] {
				if assigned[x] {
					return -1
				}
				return 1
			}
			return cmp.Compare(x, y)
		})
		set = set[:maxActive]
	}
	if u.firstFailedPrimary != "" && !slices.ContainsFunc(im.Copies[shard], ShardCopy.Active) && !slices.Contains(set, u.firstFailedPrimary) {
		set = append(set, u.firstFailedPrimary)
	}
	if len(set) == 0 {
		return nil
	}
	slices.Sort(set)
	return set
}
