package clusternode

import (
	"fmt"
	"path/filepath"
	"slices"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/replication"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/transport"
)

// The in-place split of a replicated shard, as the nodes carry it out from
// the committed cluster state. Under the default strategy, `recover`:
//
//   - On the parent primary's node, each child primary (IN_PLACE_SPLIT) is
//     built from a checkpoint of the parent's store (hard links, foreign
//     ranges excised) and follows the parent's stream from the
//     checkpoint's sequence number; it reports itself started once it
//     caught up with the parent's global checkpoint.
//   - A child replica recovers by peer recovery: files from the child
//     primary's store, then the parent's stream from their checkpoint on
//     (a follower of the parent, under a retention lease on the parent
//     while the files travel).
//   - Once every child copy is started and in sync (phase READY), the
//     parent primary blocks its writes, waits until every follower holds
//     all it has, and proposes the hand-off (SplitHandoff). A hand-off not
//     committed within handoffTicks unblocks the writes, and the primary
//     tries again handoffRetryTicks later; from the first block on, a
//     write is acknowledged only once every follower has it, so a
//     hand-off that commits late loses nothing acknowledged.
//   - Applying the hand-off, the parent retires (held writes answered
//     with a retry, which the coordinator routes with the new table) and
//     the child copies act as their own shard's primary and replicas. A
//     cancelled split's child copies are deleted and the parent unblocks.
//
// Under `local` no file crosses the network: the parent primary proposes
// its global checkpoint as the split's cut (SplitCut) and holds its
// history above it (a retention lease); once the cut is committed, the
// child primaries are built as above and every node with a parent replica
// builds its child replicas from that replica's store (its local
// checkpoint is at or above the cut), then asks the parent primary to
// stream the rest to them (kindSplitFollow). The parent primary reports
// them started once they caught up and their primary started; the
// hand-off waits for every child copy, as under recover.
//
// Under `handoff-first` the hand-off waits for the child primaries alone;
// the child replicas are assigned in the hand-off and recover from the
// child primaries as any replica: until then each child has one copy.

// handoffTicks bounds how long a parent primary keeps its writes blocked
// waiting for its hand-off to commit; handoffRetryTicks is how long it
// then waits before it blocks again.
const (
	handoffTicks      = 30
	handoffRetryTicks = 20
)

// handoff is a parent primary's progress towards its hand-off.
type handoff struct {
	blockedAt uint64
	proposed  bool
	retryAt   uint64
	// cutAt is the tick a local split's cut was last proposed (0: never);
	// lease the first sequence number its history is held from for the
	// child copies (0: not yet).
	cutAt uint64
	lease int64
}

// leaseFrom returns where the cut's lease holds history from, or def.
func (h *handoff) leaseFrom(def int64) int64 {
	if h.lease == 0 {
		return def
	}
	return h.lease
}

// kindSplitFollow: a node that built a child copy of a local split from
// its own parent replica asks the parent primary to stream to it.
const kindSplitFollow = "op/split_follow"

// splitFollow asks a parent primary to make a child copy built on another
// node a follower from its local checkpoint on.
type splitFollow struct {
	Index        string          `json:"index"` // uuid
	Parent       routing.ShardID `json:"parent"`
	Child        routing.ShardID `json:"child"`
	AllocationID string          `json:"allocation_id"`
	Node         string          `json:"node"`
	LCP          int64           `json:"lcp"`
}

// cutLease names the retention lease a local split's parent primary holds
// from the cut on, so that every child copy finds the history above the
// point its own store was built at.
func cutLease(parent routing.ShardID) string { return fmt.Sprintf("split-cut/%d", parent) }

// SplitShard proposes the in-place split of a shard of an index into
// children; done is called once the split began (the cluster state has
// its children) or was refused.
func (n *Node) SplitShard(index string, shard routing.ShardID, children int, done func(error)) {
	n.propose(cluster.Task{SplitShard: &cluster.SplitShard{Index: index, Shard: shard, Children: children}}, done)
}

// CancelSplit proposes the cancel of a split in progress: its children and
// their copies are removed and the parent serves on. It is refused
// (cluster.ErrStale) once the split is no longer in progress: handed off,
// or rolled back already.
func (n *Node) CancelSplit(index string, shard routing.ShardID, reason string, done func(error)) {
	n.propose(cluster.Task{SplitCancel: &cluster.SplitCancel{Index: index, Shard: shard, Reason: reason}}, done)
}

// indexByUUID returns the index of a uuid in st, or nil.
func indexByUUID(st *cluster.State, uuid string) *cluster.IndexMeta {
	if st == nil {
		return nil
	}
	for _, im := range st.Indices {
		if im.UUID == uuid {
			return im
		}
	}
	return nil
}

// childFollow returns the range a copy of shard follows when the shard is
// a child of a split in progress, else nil.
func childFollow(im *cluster.IndexMeta, shard routing.ShardID) *replication.Follow {
	if _, ok := im.SplitOf(shard); !ok {
		return nil
	}
	ks, spans, err := Spans(im, shard)
	if err != nil {
		return nil
	}
	return &replication.Follow{Keyspace: ks, Spans: spans}
}

// buildChildPrimary builds a child primary of a split in progress on this
// node (the parent primary's), which then follows its parent until the
// hand-off. A build (a checkpoint, a store opened and trimmed) holds the
// node's loop: tickSplits builds one child per tick, so the node keeps
// answering the cluster manager's checks between builds.
func (n *Node) buildChildPrimary(a assigned, parent routing.ShardID) {
	if n.copies[a.key] != nil || a.copy.State != cluster.Initializing {
		return
	}
	pk := copyKey{index: a.key.index, shard: parent}
	plc := n.copies[pk]
	if plc == nil || plc.c == nil || plc.store == nil || !plc.c.IsPrimary() {
		n.failCopy(a.key.shardKey(), a.copy.AllocationID, 0, false, "the parent's primary is not on this node")
		return
	}
	lc := n.buildChild(a, plc, parent, true)
	if lc == nil {
		return
	}
	lcp := lc.store.LocalCheckpoint()
	plc.c.StartFollowing(lc.aid, n.cfg.Name, a.key.shardKey(), lcp)
	n.log.Info("child primary built from its parent", zap.String("index", a.index.Name), zap.Int("parent", int(parent)),
		zap.Int("child", int(a.key.shard)), zap.Int64("local_checkpoint", lcp))
}

// buildChildReplica builds, under the local strategy, a child replica on
// this node from its own replica of the parent, once the split's cut is
// committed: the store holds every operation up to the cut (and its own
// up to its local checkpoint); the parent primary is then asked to stream
// the rest (askFollow).
func (n *Node) buildChildReplica(a assigned, parent routing.ShardID, cut int64) {
	if n.copies[a.key] != nil || a.copy.State != cluster.Initializing {
		return
	}
	plc := n.copies[copyKey{index: a.key.index, shard: parent}]
	if plc == nil || plc.c == nil || plc.store == nil || plc.c.IsPrimary() {
		n.failCopy(a.key.shardKey(), a.copy.AllocationID, 0, false, "no replica of the parent on this node")
		return
	}
	if lcp := plc.store.LocalCheckpoint(); lcp < cut {
		n.failCopy(a.key.shardKey(), a.copy.AllocationID, 0, false,
			fmt.Sprintf("the parent's replica holds up to [%d], below the split's cut [%d]", lcp, cut))
		return
	}
	lc := n.buildChild(a, plc, parent, false)
	if lc == nil {
		return
	}
	n.log.Info("child replica built from its parent's replica", zap.String("index", a.index.Name), zap.Int("parent", int(parent)),
		zap.Int("child", int(a.key.shard)), zap.Int64("cut", cut), zap.Int64("local_checkpoint", lc.store.LocalCheckpoint()))
	n.askFollow(lc, a.index, parent)
}

// askFollow asks the parent primary to stream to a child copy built here.
func (n *Node) askFollow(lc *localCopy, im *cluster.IndexMeta, parent routing.ShardID) {
	var p cluster.ShardCopy
	for _, c := range im.Copies[parent] {
		if c.Primary {
			p = c
		}
	}
	if p.Node == "" || lc.c == nil {
		return
	}
	lc.asked = n.tick
	n.send(p.Node, kindSplitFollow, splitFollow{Index: lc.key.index, Parent: parent, Child: lc.key.shard,
		AllocationID: lc.aid, Node: n.cfg.Name, LCP: lc.c.LocalCheckpoint()})
}

// onSplitFollow, on a parent primary, streams to a child copy built on
// another node, unless it does already or the copy is not one of its
// split's child copies in this node's state.
func (n *Node) onSplitFollow(m transport.Message) {
	var r splitFollow
	if m.Decode(&r) != nil {
		return
	}
	plc := n.copies[copyKey{index: r.Index, shard: r.Parent}]
	im := indexByUUID(n.applied, r.Index)
	if plc == nil || plc.c == nil || !plc.c.IsPrimary() || im == nil {
		return
	}
	sp, ok := im.Splits[r.Parent]
	if !ok || !slices.Contains(sp.Children, r.Child) {
		return
	}
	assigned := false
	for _, c := range im.Copies[r.Child] {
		if c.AllocationID == r.AllocationID && c.Node == r.Node && c.State == cluster.Initializing {
			assigned = true
		}
	}
	if !assigned {
		return
	}
	if _, ok := plc.c.Followers()[r.AllocationID]; ok {
		return
	}
	plc.c.StartFollowing(r.AllocationID, r.Node, replication.ShardKey{Index: r.Index, Shard: int(r.Child)}, r.LCP)
	n.log.Info("child copy built on its node follows the parent", zap.Int("parent", int(r.Parent)), zap.Int("child", int(r.Child)),
		zap.String("node", r.Node), zap.Int64("local_checkpoint", r.LCP))
}

// buildChild builds a child copy of a split in progress on this node from
// the parent's copy here: a checkpoint of its store (hard links), the
// foreign documents and the history excised, opened as a copy that
// follows its range of the parent's stream.
func (n *Node) buildChild(a assigned, plc *localCopy, parent routing.ShardID, primary bool) *localCopy {
	ks, spans, err := Spans(a.index, a.key.shard)
	if err != nil || len(spans) != 1 {
		n.failCopy(a.key.shardKey(), a.copy.AllocationID, 0, false, fmt.Sprintf("the child's range: %v", err))
		return nil
	}
	if err := n.wipe(a.key); err != nil {
		n.log.Error("clear a child's directory", zap.Error(err))
		return nil
	}
	dir := n.copyDir(a.key)
	store, err := n.cfg.Stores.OpenChild(dir, plc.store, parent, a.key.shard, ks, spans[0])
	if err != nil {
		_ = n.wipe(a.key)
		n.failCopy(a.key.shardKey(), a.copy.AllocationID, 0, false, fmt.Sprintf("build the child: %v", err))
		return nil
	}
	if err := writeCopyMeta(n.cfg.FS, dir, copyMeta{IndexUUID: a.key.index, Shard: a.key.shard,
		AllocationID: a.copy.AllocationID, Primary: primary}); err != nil {
		_ = store.Close()
		_ = n.wipe(a.key)
		n.failCopy(a.key.shardKey(), a.copy.AllocationID, 0, false, fmt.Sprintf("record the child: %v", err))
		return nil
	}
	lc := &localCopy{key: a.key, aid: a.copy.AllocationID, dir: dir, store: store}
	lc.c = replication.NewCopy(replication.Config{Shard: a.key.shardKey(), AllocationID: lc.aid, Node: n.cfg.Name,
		Store: store, Env: copyEnv{n}, Follow: &replication.Follow{Keyspace: ks, Spans: spans}}, a.term)
	n.copies[a.key] = lc
	return lc
}

// retireHandedOff retires the local copies of parents whose hand-off st
// records: their held writes fail with a retry.
func (n *Node) retireHandedOff(st *cluster.State) {
	for _, k := range n.sortedCopies() {
		lc := n.copies[k]
		im := indexByUUID(st, k.index)
		if im == nil || lc.c == nil {
			continue
		}
		if _, handed := im.Handoffs[k.shard]; handed {
			lc.c.Retire()
			delete(n.handoffs, k)
		}
	}
}

// startChildSource starts, on the parent primary's node, the recovery of a
// child replica: files from the child primary here, the rest from the
// parent's stream. It reports whether the shard is a child of a split in
// progress (whether or not the recovery could start).
func (n *Node) startChildSource(k copyKey, r replication.RecoveryStart) bool {
	st := n.mgr.State()
	im := indexByUUID(st, k.index)
	if im == nil {
		return false
	}
	parent, ok := im.SplitOf(k.shard)
	if !ok {
		return false
	}
	if im.Splits[parent].ChildReplicasAfterHandoff() && !copyAssigned(st, r.Target) {
		// A child replica of a handoff-first split exists only from the
		// hand-off on: the target applied a newer state than this node's.
		// Started from the parent here, the recovery would be cancelled
		// once the parent retires and its files sent again; it starts
		// from the child primary once this node applies that state.
		if !slices.ContainsFunc(n.deferredStarts, func(d replication.RecoveryStart) bool { return d.ID == r.ID }) {
			n.deferredStarts = append(n.deferredStarts, r)
		}
		return true
	}
	lc, plc := n.copies[k], n.copies[copyKey{index: k.index, shard: parent}]
	if lc == nil || lc.store == nil || plc == nil || plc.c == nil || !plc.c.IsPrimary() {
		return true // the target asks again
	}
	dir := filepath.Join(n.cfg.DataDir, "indices", k.index, "recovery", filepath.Base(r.ID))
	_ = n.cfg.FS.RemoveAll(dir)
	s, err := replication.StartFollowerSource(plc.c, lc.store, k.shardKey(), n.cfg.FS, dir, r.ID, r.Target, r.TargetNode)
	if err != nil {
		n.log.Warn("start a child's recovery", zap.String("recovery", r.ID), zap.Error(err))
		return true
	}
	n.log.Info("child recovery started", zap.String("recovery", r.ID), zap.String("target", r.TargetNode))
	n.sources[r.ID] = s
	return true
}

// tickSplits drives the splits whose parent primary is on this node: it
// lets go of followers the state no longer has, reports caught-up child
// primaries started, and blocks, hands off or unblocks the parent.
func (n *Node) tickSplits() {
	st := n.applied
	if st == nil {
		return
	}
	built := false
	for _, k := range n.sortedCopies() {
		plc := n.copies[k]
		if plc.c == nil {
			continue
		}
		im := indexByUUID(st, k.index)
		if im == nil {
			continue
		}
		if !plc.c.IsPrimary() {
			built = n.tickLocalReplicaSplit(k, plc, im, built)
			continue
		}
		sp, splitting := im.Splits[k.shard]
		if !splitting {
			if plc.c.Blocked() {
				plc.c.Unblock()
			}
			for aid := range plc.c.Followers() {
				plc.c.StopFollowing(aid)
			}
			plc.c.RemoveLease(cutLease(k.shard))
			delete(n.handoffs, k)
			continue
		}
		if sp.Strategy == cluster.StrategyLocal && !n.agreeCut(k, plc, im, sp) {
			continue
		}
		for _, ch := range sp.Children {
			ck := copyKey{index: k.index, shard: ch}
			clc := n.copies[ck]
			if clc == nil {
				if built {
					continue
				}
				for _, c := range im.Copies[ch] {
					if c.Primary && c.Node == n.cfg.Name && c.State == cluster.Initializing {
						n.buildChildPrimary(assigned{key: ck, index: im, copy: c, term: im.PrimaryTerms[ch]}, k.shard)
						built = true
					}
				}
				continue
			}
			if clc.c == nil {
				continue
			}
			childStarted := false
			for _, c := range im.Copies[ch] {
				if c.AllocationID == clc.aid && c.Primary && c.State == cluster.Initializing && plc.c.FollowerCaughtUp(clc.aid) {
					n.reportStarted(assigned{key: ck, index: im, copy: c, term: im.PrimaryTerms[ch]}, clc)
				}
				childStarted = childStarted || c.Primary && c.State == cluster.Started
			}
			// A local split's child replicas, built on their own nodes:
			// started once caught up, after their primary.
			for _, c := range im.Copies[ch] {
				if childStarted && !c.Primary && c.State == cluster.Initializing && c.RecoverySource == cluster.InPlaceSplit &&
					plc.c.FollowerCaughtUp(c.AllocationID) {
					n.proposeStarted(im.Name, ch, c.AllocationID, im.PrimaryTerms[ch])
				}
			}
		}
		n.driveHandoff(k, plc, im, sp)
	}
}

// agreeCut, on a local split's parent primary, proposes the cut (its
// global checkpoint, which every in-sync copy holds) until the state has
// one, holding its history above it for the child copies; it reports
// whether the cut is committed.
func (n *Node) agreeCut(k copyKey, plc *localCopy, im *cluster.IndexMeta, sp cluster.ShardSplit) bool {
	h := n.handoffs[k]
	if h == nil {
		h = &handoff{}
		n.handoffs[k] = h
	}
	if sp.Cut != nil {
		plc.c.AddLease(cutLease(k.shard), min(*sp.Cut+1, h.leaseFrom(*sp.Cut+1)))
		return true
	}
	if h.cutAt != 0 && n.tick-h.cutAt < handoffTicks {
		return false
	}
	cut := plc.c.GlobalCheckpoint()
	// Held from the first proposal on: whichever proposal commits, its
	// history above the cut is still here.
	h.lease = min(cut+1, h.leaseFrom(cut+1))
	plc.c.AddLease(cutLease(k.shard), h.lease)
	h.cutAt = n.tick
	name, term := im.Name, plc.c.Term()
	n.log.Info("local split: cut proposed", zap.String("index", name), zap.Int("shard", int(k.shard)), zap.Int64("cut", cut))
	n.mgr.Propose(cluster.Task{SplitCut: &cluster.SplitCut{Index: name, Shard: k.shard, ParentTerm: term, Seq: cut}},
		func(r coordinationResult) {
			if r.Err != nil {
				n.log.Info("local split: cut refused", zap.String("index", name), zap.Int("shard", int(k.shard)), zap.Error(r.Err))
			}
		})
	return false
}

// tickLocalReplicaSplit builds, on a node with a replica of a local
// split's parent, the child replicas the state puts here once the cut is
// committed (one build per tick, as the primaries'), and asks the parent
// primary again to stream to those it may not have heard of.
func (n *Node) tickLocalReplicaSplit(k copyKey, plc *localCopy, im *cluster.IndexMeta, built bool) bool {
	sp, ok := im.Splits[k.shard]
	if !ok || sp.Strategy != cluster.StrategyLocal || sp.Cut == nil {
		return built
	}
	for _, ch := range sp.Children {
		ck := copyKey{index: k.index, shard: ch}
		for _, c := range im.Copies[ch] {
			if c.Primary || c.Node != n.cfg.Name || c.State != cluster.Initializing || c.RecoverySource != cluster.InPlaceSplit {
				continue
			}
			clc := n.copies[ck]
			switch {
			case clc == nil && !built:
				n.buildChildReplica(assigned{key: ck, index: im, copy: c, term: im.PrimaryTerms[ch]}, k.shard, *sp.Cut)
				built = true
			case clc != nil && clc.aid == c.AllocationID && n.tick-clc.asked >= askTicks:
				n.askFollow(clc, im, k.shard)
			}
		}
	}
	return built
}

// driveHandoff blocks a parent primary whose children are all in sync,
// proposes the hand-off once every follower holds all it has, and
// unblocks it if the hand-off does not commit in time.
func (n *Node) driveHandoff(k copyKey, plc *localCopy, im *cluster.IndexMeta, sp cluster.ShardSplit) {
	h := n.handoffs[k]
	if h == nil {
		h = &handoff{}
		n.handoffs[k] = h
	}
	c := plc.c
	if sp.Phase != cluster.SplitReady {
		if c.Blocked() {
			c.Unblock()
		}
		return
	}
	if !c.Blocked() {
		if n.tick < h.retryAt {
			return
		}
		c.BlockWrites()
		h.blockedAt, h.proposed = n.tick, false
		n.log.Info("split hand-off: writes blocked", zap.String("index", im.Name), zap.Int("shard", int(k.shard)))
		return
	}
	if n.tick-h.blockedAt >= handoffTicks {
		n.log.Warn("split hand-off not committed in time: writes unblocked", zap.String("index", im.Name),
			zap.Int("shard", int(k.shard)), zap.Uint64("ticks", n.tick-h.blockedAt))
		c.Unblock()
		h.retryAt = n.tick + handoffRetryTicks
		return
	}
	if h.proposed {
		return
	}
	term, maxSeq, ok := c.HandoffReady()
	if !ok {
		return
	}
	following := c.Followers()
	for _, ch := range sp.Children {
		for _, cp := range im.Copies[ch] {
			if sp.ChildReplicasAfterHandoff() && !cp.Primary {
				continue // built after the hand-off
			}
			if _, ok := following[cp.AllocationID]; !ok {
				return // a child copy the parent does not stream to cannot have all it has
			}
		}
	}
	h.proposed = true
	name := im.Name
	n.log.Info("split hand-off proposed", zap.String("index", name), zap.Int("shard", int(k.shard)),
		zap.Uint64("parent_term", term), zap.Int64("max_seq", maxSeq))
	n.mgr.Propose(cluster.Task{SplitHandoff: &cluster.SplitHandoff{Index: name, Shard: k.shard, ParentTerm: term, MaxSeq: maxSeq}},
		func(r coordinationResult) {
			if r.Err == nil {
				return
			}
			n.log.Info("split hand-off refused", zap.String("index", name), zap.Int("shard", int(k.shard)), zap.Error(r.Err))
			if n.handoffs[k] == h {
				h.proposed = false
				if lc := n.copies[k]; lc != nil && lc.c != nil && lc.c.Blocked() {
					lc.c.Unblock()
				}
				h.retryAt = n.tick + handoffRetryTicks
			}
		})
}

// endFollowedSplit ends the streams of the split whose child copy aid (a
// child primary, built beside its parent's primary) is removed here: a
// removed child copy means its split ended (cancelled, or handed off), so
// the parent primary stops following every child copy of it. tickSplits
// does so when the split is gone from the state, but a cancel and a new
// split of the same shard (the same child ids) applied before the node
// ticks look like one split there, and the cancelled split's copies, which
// never answer again, would keep the new one's hand-off from ever being
// ready. No copy of a new split follows the parent yet: its child
// primaries are built after this removal, and its replicas recover only
// from them.
func (n *Node) endFollowedSplit(aid string) {
	for _, k := range n.sortedCopies() {
		plc := n.copies[k]
		if plc.c == nil || !plc.c.IsPrimary() {
			continue
		}
		following := plc.c.Followers()
		if _, ok := following[aid]; !ok {
			continue
		}
		for _, f := range sortedKeys(following) {
			plc.c.StopFollowing(f)
		}
		n.log.Info("split ended: the parent stops following its child copies", zap.Int("parent", int(k.shard)),
			zap.Int("followers", len(following)))
	}
}
