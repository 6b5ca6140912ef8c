package clusternode

import (
	"fmt"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/coordination"
	"github.com/shardsplit/shardsplit/replication"
	"github.com/shardsplit/shardsplit/transport"
)

type coordinationResult = coordination.Result

// TransportChannel is the transport channel of a message of kind: a peer
// recovery's file chunks travel on a channel of their own (OpenSearch's
// "recovery" connections), so that the megabytes a recovery has queued to
// a node do not delay the replication operations, acknowledgements and
// cluster-coordination messages to it, which the writes wait for.
func TransportChannel(kind string) string {
	if kind == replication.KindRecoveryChunk {
		return "recovery"
	}
	return ""
}

// askTicks: a recovery not under way is asked for again this often (the
// primary may not have been started yet, or the request was lost).
const askTicks = 10

// startRecovery begins a replica's peer recovery: an empty directory, and
// a request to the primary's node.
func (n *Node) startRecovery(a assigned) {
	if err := n.wipe(a.key); err != nil {
		n.log.Error("clear a recovering copy's directory", zap.Error(err))
		return
	}
	lc := &localCopy{key: a.key, aid: a.copy.AllocationID, dir: n.copyDir(a.key)}
	n.copies[a.key] = lc
	n.askRecovery(lc, a)
}

// askRecovery (re)asks the shard's primary for a recovery, with a new
// recovery id whenever the primary changed.
func (n *Node) askRecovery(lc *localCopy, a assigned) {
	if a.primary.State != cluster.Started || a.primary.Node == "" {
		return // ReplicaShardAllocator waits for an active primary; so does the recovery
	}
	if lc.target != nil && lc.source == a.primary.Node && n.tick-lc.asked < askTicks {
		return
	}
	if lc.target == nil || lc.source != a.primary.Node {
		if lc.target != nil {
			if err := n.wipe(lc.key); err != nil {
				n.log.Error("clear a recovering copy's directory", zap.Error(err))
				return
			}
		}
		id := fmt.Sprintf("%s/%d/%s", lc.aid, n.tick, n.uuid()[:6])
		lc.source = a.primary.Node
		lc.target = replication.NewTarget(lc.key.shardKey(), copyEnv{n}, n.cfg.FS, n.cfg.Stores.RecoveryDir(lc.dir, lc.key.shard),
			id, lc.source, lc.aid, n.cfg.Name)
	} else {
		lc.target.Ask(lc.aid, n.cfg.Name)
	}
	lc.asked = n.tick
}

// tickRecovery re-asks for a stalled recovery, and says again that a
// recovery's files are open until its source finalizes it.
func (lc *localCopy) tickRecovery(n *Node) {
	if lc.c != nil {
		if lc.target != nil && !lc.finalized && n.tick-lc.asked >= askTicks {
			lc.asked = n.tick
			lc.target.Opened()
		}
		return
	}
	if n.applied == nil {
		return
	}
	for _, im := range n.applied.Indices {
		if im.UUID != lc.key.index {
			continue
		}
		for _, c := range im.Copies[lc.key.shard] {
			if c.AllocationID == lc.aid {
				var primary cluster.ShardCopy
				for _, p := range im.Copies[lc.key.shard] {
					if p.Primary {
						primary = p
					}
				}
				if lc.target == nil || n.tick-lc.asked >= askTicks*3 && !lc.target.Complete() {
					lc.asked = 0
					n.askRecovery(lc, assigned{key: lc.key, index: im, copy: c, term: im.PrimaryTerms[lc.key.shard], primary: primary})
				}
			}
		}
	}
}

// reconcileSources ends the recoveries this node sends whose target is
// started, gone, or whose source is no longer the primary.
func (n *Node) reconcileSources(st *cluster.State) {
	for _, id := range sortedKeys(n.sources) {
		s := n.sources[id]
		switch {
		case copyStarted(st, s.Target()):
			s.Finished()
			delete(n.sources, id)
		case !copyAssigned(st, s.Target()):
			s.Cancel("the target is no longer assigned")
			delete(n.sources, id)
		}
	}
}

func (n *Node) onRecovery(m transport.Message) {
	switch m.Kind {
	case replication.KindRecoveryStart:
		var r replication.RecoveryStart
		if m.Decode(&r) == nil {
			n.onRecoveryStart(m.From, r)
		}
	case replication.KindRecoveryManifest, replication.KindRecoveryChunk, replication.KindRecoveryFinalize, replication.KindRecoveryCancel:
		n.onRecoveryAtTarget(m)
	case replication.KindRecoveryAck, replication.KindRecoveryOpened:
		n.onRecoveryAtSource(m)
	}
}

// onRecoveryStart, on the primary's node, starts sending a recovery (or
// keeps the one under way of that id).
func (n *Node) onRecoveryStart(from string, r replication.RecoveryStart) {
	if _, ok := n.sources[r.ID]; ok {
		return
	}
	k := copyKey{index: r.Shard.Index, shard: shardID(r.Shard.Shard)}
	if n.startChildSource(k, r) {
		return
	}
	lc := n.copies[k]
	if lc == nil || lc.c == nil || !lc.c.IsPrimary() {
		return // the target asks again; by then it may know the new primary
	}
	if n.applied == nil || !copyAssigned(n.applied, r.Target) || copyStarted(n.applied, r.Target) {
		// A request late or sent twice, for a recovery that ended (its
		// target started, or is gone): one started again would cancel
		// itself once the target, long open, stops answering, and the
		// cancel would wipe a started copy. A target not yet initializing
		// in this node's state asks again.
		return
	}
	dir := filepath.Join(n.cfg.DataDir, "indices", k.index, "recovery", filepath.Base(r.ID))
	_ = n.cfg.FS.RemoveAll(dir)
	s, err := replication.StartSource(lc.c, lc.store, n.cfg.FS, dir, r.ID, r.Target, r.TargetNode)
	if err != nil {
		n.log.Warn("start a recovery", zap.String("recovery", r.ID), zap.Error(err))
		return
	}
	n.log.Info("recovery started", zap.String("recovery", r.ID), zap.String("target", r.TargetNode))
	n.sources[r.ID] = s
}

func (n *Node) onRecoveryAtSource(m transport.Message) {
	id, err := replication.RecoveryID(m)
	if err != nil {
		return
	}
	s := n.sources[id]
	if s == nil || s.Done() {
		if m.Kind == replication.KindRecoveryOpened {
			if err := replication.CancelUnknown(copyEnv{n}, m, "the source runs no such recovery"); err != nil {
				n.log.Warn("recovery message", zap.String("recovery", id), zap.Error(err))
			}
		}
		return
	}
	if err := s.Handle(m); err != nil {
		n.log.Warn("recovery message", zap.String("recovery", id), zap.Error(err))
	}
}

func (n *Node) onRecoveryAtTarget(m transport.Message) {
	id, err := replication.RecoveryID(m)
	if err != nil {
		return
	}
	var lc *localCopy
	for _, k := range n.sortedCopies() {
		if c := n.copies[k]; c.target != nil && c.target.ID() == id {
			lc = c
		}
	}
	if lc == nil {
		return
	}
	switch m.Kind {
	case replication.KindRecoveryCancel:
		if lc.finalized {
			n.log.Info("a cancel of a finalized recovery ignored", zap.String("recovery", id))
			return
		}
		n.log.Info("recovery cancelled by its source", zap.String("recovery", id))
		lc.target = nil
		if lc.c != nil {
			_ = lc.close()
			lc.c = nil
		}
		_ = n.wipe(lc.key)
		return
	case replication.KindRecoveryFinalize:
		if lc.c != nil && n.applied != nil {
			lc.finalized = true
			for _, im := range n.applied.Indices {
				if im.UUID == lc.key.index {
					n.reportStarted(assigned{key: lc.key, index: im, term: im.PrimaryTerms[lc.key.shard]}, lc)
				}
			}
		}
		return
	}
	if err := lc.target.Handle(m); err != nil {
		n.log.Warn("recovery message", zap.String("recovery", id), zap.Error(err))
		return
	}
	if lc.c == nil && lc.target.Complete() {
		n.openRecovered(lc)
	}
}

// openRecovered opens the files a recovery received and tells the source:
// from here on the copy takes the stream like any replica.
func (n *Node) openRecovered(lc *localCopy) {
	var im *cluster.IndexMeta
	for _, m := range n.mgr.State().Indices {
		if m.UUID == lc.key.index {
			im = m
		}
	}
	if im == nil {
		return
	}
	store, err := n.openStore(im, lc.key.shard, lc.dir)
	if err != nil {
		n.log.Error("open recovered files", zap.Error(err))
		lc.target = nil
		_ = n.wipe(lc.key)
		return
	}
	if err := writeCopyMeta(n.cfg.FS, lc.dir, copyMeta{IndexUUID: lc.key.index, Shard: lc.key.shard, AllocationID: lc.aid}); err != nil {
		_ = store.Close()
		n.log.Error("record a recovered copy", zap.Error(err))
		// Start over, as when the files do not open: waiting for the
		// source's cancel (it gives up on a target that stopped answering)
		// would wait for good if that message is lost.
		lc.target = nil
		_ = n.wipe(lc.key)
		return
	}
	var term uint64
	var follow *replication.Follow
	if n.applied != nil {
		for _, im := range n.applied.Indices {
			if im.UUID == lc.key.index {
				term = im.PrimaryTerms[lc.key.shard]
				follow = childFollow(im, lc.key.shard)
			}
		}
	}
	lc.store = store
	lc.c = replication.NewCopy(replication.Config{Shard: lc.key.shardKey(), AllocationID: lc.aid, Node: n.cfg.Name,
		Store: store, Env: copyEnv{n}, Follow: follow}, term)
	lc.target.Opened()
	lc.asked = n.tick
}

func (n *Node) onReplication(m transport.Message) {
	k, target, err := replication.Addressee(m)
	if err != nil {
		n.log.Warn("replication message", zap.Error(err))
		return
	}
	lc := n.copies[copyKey{index: k.Index, shard: shardID(k.Shard)}]
	if target != "" && (lc == nil || lc.aid != target) {
		// A parent's operations to a copy of one of its split's
		// children, which follows them.
		lc = nil
		for _, ck := range n.sortedCopies() {
			if c := n.copies[ck]; c.aid == target && ck.index == k.Index {
				lc = c
			}
		}
	}
	if lc == nil || lc.c == nil {
		return
	}
	if err := lc.c.Handle(m); err != nil {
		n.log.Warn("replication message", zap.Error(err))
	}
}
