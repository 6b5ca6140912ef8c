package cluster

import (
	"errors"
	"maps"
	"slices"

	"github.com/shardsplit/shardsplit/routing"
)

// SettingReplicaSplit is index.shardsplit.replica_split: how the children
// of a split get their replicas.
const SettingReplicaSplit = "index.shardsplit.replica_split"

// Strategies of index.shardsplit.replica_split.
const (
	// StrategyRecover builds child primaries on the parent primary's node
	// and child replicas by peer recovery from them, hands off once every
	// child copy is in sync.
	StrategyRecover = "recover"
	// StrategyLocal builds every child copy where a parent copy is, from
	// that copy's own store at or above an agreed cut (SplitCut): child
	// primaries beside the parent primary, child replicas beside the
	// parent replicas; nothing is copied over the network. Hands off once
	// every child copy is in sync.
	StrategyLocal = "local"
	// StrategyHandoffFirst builds child primaries as recover does and
	// hands off once they are in sync, before any child replica exists;
	// the child replicas are then built by peer recovery as any replica:
	// a window with one copy per child.
	StrategyHandoffFirst = "handoff-first"
)

// DefaultStrategy is the strategy of an index that does not set
// index.shardsplit.replica_split: local, because it is the one the
// measurements favour. Side by side on three processes under the same
// writes (clusterbench --only split, 5 runs each), local's
// write-unavailability window was about a quarter of recover's at p50 and
// p99, it was green again in a sixth of the time, and it sent no recovery
// bytes where recover sent 2.7 times the parent; one run each at a 1 GiB
// parent gave the same order (design/2026-12-07-replica-split-strategies.md).
// All three are model-checked or simulated.
const DefaultStrategy = StrategyLocal

// Strategies lists the values index.shardsplit.replica_split accepts.
var Strategies = []string{StrategyRecover, StrategyLocal, StrategyHandoffFirst}

// ReasonSplitChild is the unassigned reason of a child replica created by
// a split.
const ReasonSplitChild = "CHILD_SHARD_CREATED"

// splitShard begins a split (see SplitShard).
func (a *applier) splitShard(t *SplitShard) *RefusedError {
	im := a.next.Indices[t.Index]
	if im == nil {
		return refuse(RefusedIndexNotFound, "IndexNotFoundException", "no such index [%s]", t.Index)
	}
	strategy := im.Settings[SettingReplicaSplit]
	if strategy == "" {
		strategy = DefaultStrategy
	}
	if !slices.Contains(Strategies, strategy) {
		return refuse(RefusedInvalid, "IllegalArgumentException", "unknown value [%s] for setting [%s] of index [%s]; expected one of %v",
			strategy, SettingReplicaSplit, t.Index, Strategies)
	}
	if _, running := im.Splits[t.Shard]; running {
		return refuse(RefusedSplit, "IllegalArgumentException", "Split of shard [%d] is already in progress or completed.", t.Shard)
	}
	if _, child := im.SplitOf(t.Shard); child {
		return refuse(RefusedSplit, "IllegalArgumentException", "Cannot split shard [%d] of index [%s]: it is a child of a split in progress", t.Shard, t.Index)
	}
	copies, ok := im.Copies[t.Shard]
	if !ok {
		return invalid("Shard ID doesn't exist in the current list of shard ranges")
	}
	for _, c := range copies {
		if !c.Active() {
			return refuse(RefusedSplit, "IllegalStateException", "Cannot split shard [%d] of index [%s]: all copies of the shard must be active, copy [%s] is %s", t.Shard, t.Index, c.AllocationID, c.State)
		}
	}
	tbl, err := im.Table()
	if err != nil {
		return invalid("cluster: routing table of index [%s]: %v", t.Index, err)
	}
	next, err := routing.Apply(tbl, routing.Edit{Kind: routing.BeginSplit, Shard: t.Shard, Ways: t.Children})
	if err != nil {
		var re *routing.Error
		if errors.As(err, &re) {
			return refuse(RefusedInvalid, re.Exception.String(), "%s", re.Message)
		}
		return invalid("cluster: split of [%s][%d]: %v", t.Index, t.Shard, err)
	}
	rec, _ := next.Split(t.Shard)
	children := make([]routing.ShardID, len(rec.Children))
	for i, c := range rec.Children {
		children[i] = c.Shard
	}
	primary := copies[primaryPos(copies)]
	im = a.mutIndex(t.Index)
	im.Routing = next.Encode()
	if im.Splits == nil {
		im.Splits = map[routing.ShardID]ShardSplit{}
	}
	im.Splits[t.Shard] = ShardSplit{Children: children, Phase: SplitCatchingUp, Strategy: strategy}
	term := im.PrimaryTerms[t.Shard]
	for _, child := range children {
		aid := a.newAllocationID()
		cs := []ShardCopy{{AllocationID: aid, Node: primary.Node, Primary: true, State: Initializing, RecoverySource: InPlaceSplit,
			UnassignedReason: ReasonSplitChild}}
		if strategy == StrategyLocal {
			// A child replica beside each parent replica, built from it.
			for _, c := range copies {
				if c.Primary {
					continue
				}
				raid := a.newAllocationID()
				cs = append(cs, ShardCopy{AllocationID: raid, Node: c.Node, State: Initializing, RecoverySource: InPlaceSplit,
					UnassignedReason: ReasonSplitChild})
				a.setLocalCopy(c.Node, LocalCopy{IndexUUID: im.UUID, Shard: child, AllocationID: raid})
			}
		} else {
			for range im.Replicas {
				cs = append(cs, unassignedCopy(false, Peer, unassignedInfo{reason: ReasonSplitChild}))
			}
		}
		im.Copies[child] = cs
		im.InSync[child] = []string{}
		im.PrimaryTerms[child] = term
		a.setLocalCopy(primary.Node, LocalCopy{IndexUUID: im.UUID, Shard: child, AllocationID: aid, Primary: true})
	}
	return nil
}

// splitHandoff commits a split (see SplitHandoff).
func (a *applier) splitHandoff(t *SplitHandoff) *RefusedError {
	im := a.next.Indices[t.Index]
	if im == nil {
		return stale("split hand-off for index [%s], which does not exist", t.Index)
	}
	sp, ok := im.Splits[t.Shard]
	if !ok {
		return stale("split hand-off for [%s][%d], which is not being split", t.Index, t.Shard)
	}
	if term := im.PrimaryTerms[t.Shard]; t.ParentTerm != term {
		return refuse(RefusedNoLongerPrimary, "NoLongerPrimaryShardException", "primary term [%d] did not match current primary term [%d]", t.ParentTerm, term)
	}
	for _, child := range sp.Children {
		for _, c := range im.Copies[child] {
			if sp.ChildReplicasAfterHandoff() && !c.Primary {
				continue // built after the hand-off
			}
			if !c.Active() || !im.inSync(child, c.AllocationID) {
				return refuse(RefusedSplit, "IllegalStateException", "Cannot hand off shard [%d] of index [%s]: copy [%s] of child shard [%d] is %s, not started and in sync",
					t.Shard, t.Index, c.AllocationID, child, c.State)
			}
		}
	}
	tbl, err := im.Table()
	if err != nil {
		return invalid("cluster: routing table of index [%s]: %v", t.Index, err)
	}
	next, err := routing.Apply(tbl, routing.Edit{Kind: routing.CommitSplit, Shard: t.Shard, Children: sp.Children})
	if err != nil {
		return invalid("cluster: commit of the split of [%s][%d]: %v", t.Index, t.Shard, err)
	}
	im = a.mutIndex(t.Index)
	im.Routing = next.Encode()
	a.dropShard(t.Index, t.Shard)
	delete(im.Splits, t.Shard)
	if im.Handoffs == nil {
		im.Handoffs = map[routing.ShardID]Handoff{}
	}
	im.Handoffs[t.Shard] = Handoff{Children: sp.Children, ParentTerm: t.ParentTerm, MaxSeq: t.MaxSeq}
	return nil
}

// splitCut records a local split's agreed cut (see SplitCut).
func (a *applier) splitCut(t *SplitCut) *RefusedError {
	im := a.next.Indices[t.Index]
	if im == nil {
		return stale("split cut for index [%s], which does not exist", t.Index)
	}
	sp, ok := im.Splits[t.Shard]
	if !ok {
		return stale("split cut for [%s][%d], which is not being split", t.Index, t.Shard)
	}
	if sp.Strategy != StrategyLocal {
		return invalid("cluster: split cut for [%s][%d], whose split's strategy is [%s], not [%s]", t.Index, t.Shard, sp.Strategy, StrategyLocal)
	}
	if sp.Cut != nil {
		return stale("split cut for [%s][%d]: the cut is [%d] already", t.Index, t.Shard, *sp.Cut)
	}
	if term := im.PrimaryTerms[t.Shard]; t.ParentTerm != term {
		return refuse(RefusedNoLongerPrimary, "NoLongerPrimaryShardException", "primary term [%d] did not match current primary term [%d]", t.ParentTerm, term)
	}
	if t.Seq < -1 {
		return invalid("cluster: split cut for [%s][%d] at sequence number [%d]", t.Index, t.Shard, t.Seq)
	}
	im = a.mutIndex(t.Index)
	cut := t.Seq
	sp.Cut = &cut
	sp.Children = slices.Clone(sp.Children)
	im.Splits[t.Shard] = sp
	return nil
}

// splitCancel cancels a split in progress (see SplitCancel).
func (a *applier) splitCancel(t *SplitCancel) *RefusedError {
	im := a.next.Indices[t.Index]
	if im == nil {
		return stale("split cancel for index [%s], which does not exist", t.Index)
	}
	if _, ok := im.Splits[t.Shard]; !ok {
		return stale("split cancel for [%s][%d], which is not being split", t.Index, t.Shard)
	}
	return a.cancelSplit(t.Index, t.Shard)
}

// cancelSplit rolls a split back: the routing reservation and the child
// shards go; the parent is untouched.
func (a *applier) cancelSplit(index string, parent routing.ShardID) *RefusedError {
	im := a.next.Indices[index]
	sp := im.Splits[parent]
	tbl, err := im.Table()
	if err != nil {
		return invalid("cluster: routing table of index [%s]: %v", index, err)
	}
	next, err := routing.Apply(tbl, routing.Edit{Kind: routing.CancelSplit, Shard: parent})
	if err != nil {
		return invalid("cluster: cancel of the split of [%s][%d]: %v", index, parent, err)
	}
	im = a.mutIndex(index)
	im.Routing = next.Encode()
	for _, child := range sp.Children {
		a.dropShard(index, child)
	}
	delete(im.Splits, parent)
	if len(im.Splits) == 0 {
		im.Splits = nil
	}
	return nil
}

// dropShard removes a shard's copies, term and in-sync set, and its
// copies from the nodes' disks as the cluster sees them (the nodes delete
// them).
func (a *applier) dropShard(index string, shard routing.ShardID) {
	im := a.mutIndex(index)
	delete(im.Copies, shard)
	delete(im.InSync, shard)
	delete(im.PrimaryTerms, shard)
	delete(a.updates, shardKey{index, shard})
	delete(a.ignore, shardKey{index, shard})
	for _, name := range a.next.NodeNames() {
		if _, ok := localCopy(a.next.Nodes[name], im.UUID, shard); ok {
			a.removeLocalCopy(name, im.UUID, shard)
		}
	}
}

// removeLocalCopy forgets a node's copy of a shard.
func (a *applier) removeLocalCopy(node, uuid string, shard routing.ShardID) {
	n := a.next.Nodes[node]
	if !a.ownedCopies[node] {
		n.Copies = slices.Clone(n.Copies)
		a.ownedCopies[node] = true
	}
	n.Copies = slices.DeleteFunc(n.Copies, func(c LocalCopy) bool { return c.IndexUUID == uuid && c.Shard == shard })
	a.next.Nodes[node] = n
}

// noteSplitFailure records that a copy of a split's parent or child
// failed: before the hand-off the split rolls back (rollBackSplits).
func (a *applier) noteSplitFailure(index string, shard routing.ShardID) {
	im := a.next.Indices[index]
	if im == nil || len(im.Splits) == 0 {
		return
	}
	parent, child := im.SplitOf(shard)
	if !child {
		if _, ok := im.Splits[shard]; !ok {
			return
		}
		parent = shard
	}
	if a.cancels == nil {
		a.cancels = map[shardKey]bool{}
	}
	a.cancels[shardKey{index, parent}] = true
}

// rollBackSplits cancels the splits a failure of this task touched.
func (a *applier) rollBackSplits() *RefusedError {
	keys := slices.SortedFunc(maps.Keys(a.cancels), func(x, y shardKey) int {
		if x.index != y.index {
			if x.index < y.index {
				return -1
			}
			return 1
		}
		return int(x.shard) - int(y.shard)
	})
	for _, k := range keys {
		im := a.next.Indices[k.index]
		if im == nil {
			continue
		}
		if _, ok := im.Splits[k.shard]; !ok {
			continue
		}
		if rerr := a.cancelSplit(k.index, k.shard); rerr != nil {
			return rerr
		}
	}
	a.cancels = nil
	return nil
}

// updateSplitPhases sets each split's phase from its children's copies.
func (a *applier) updateSplitPhases() {
	for name := range a.owned {
		im := a.next.Indices[name]
		if im == nil {
			continue
		}
		for _, p := range slices.Sorted(maps.Keys(im.Splits)) {
			sp := im.Splits[p]
			phase := SplitReady
			for _, child := range sp.Children {
				for _, c := range im.Copies[child] {
					if sp.ChildReplicasAfterHandoff() && !c.Primary {
						continue
					}
					switch {
					case c.Primary && !c.Active():
						phase = SplitCatchingUp
					case !c.Active() || !im.inSync(child, c.AllocationID):
						if phase == SplitReady {
							phase = SplitRecoveringReplicas
						}
					}
				}
			}
			if phase != sp.Phase {
				sp.Phase = phase
				im.Splits[p] = sp
			}
		}
	}
}
