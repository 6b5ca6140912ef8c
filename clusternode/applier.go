package clusternode

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/replication"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// localCopy is a shard copy on this node: its store and replication state
// once open, or its recovery while it receives files.
type localCopy struct {
	key    copyKey
	aid    string
	dir    string
	store  CopyStore
	c      *replication.Copy
	target *replication.Target
	source string // the node the recovery reads from
	asked  uint64 // the tick the recovery was last asked for
	// reported: ShardStarted was proposed for aid.
	reported bool
	// finalized: the recovery's source finalized it (the copy is open and
	// was reported started); a cancel of that recovery arriving later is
	// stale and must not wipe a copy the cluster may have started.
	finalized bool
}

func (lc *localCopy) close() error {
	if lc.c != nil {
		lc.c.Demote()
	}
	if lc.store == nil {
		return nil
	}
	err := lc.store.Close()
	lc.store = nil
	return err
}

// copyMeta is the COPY file of a copy's directory: which copy its store
// is, so that after a restart the node can report it (OpenSearch's shard
// state metadata file).
type copyMeta struct {
	IndexUUID    string          `json:"index_uuid"`
	Shard        routing.ShardID `json:"shard"`
	AllocationID string          `json:"allocation_id"`
	Primary      bool            `json:"primary"`
}

const copyMetaFile = "COPY"

func (n *Node) copyDir(k copyKey) string {
	return filepath.Join(n.cfg.DataDir, "indices", k.index, strconv.Itoa(int(k.shard)))
}

// scanCopies lists the copies on disk whose COPY file names them.
func (n *Node) scanCopies() ([]cluster.LocalCopy, error) {
	fs := n.cfg.FS
	root := filepath.Join(n.cfg.DataDir, "indices")
	indices, err := fs.List(root)
	if err != nil {
		return nil, nil // no indices yet
	}
	slices.Sort(indices)
	var out []cluster.LocalCopy
	for _, ix := range indices {
		shards, err := fs.List(filepath.Join(root, ix))
		if err != nil {
			continue
		}
		slices.Sort(shards)
		for _, sh := range shards {
			m, ok := readCopyMeta(fs, filepath.Join(root, ix, sh))
			if ok {
				out = append(out, cluster.LocalCopy{IndexUUID: m.IndexUUID, Shard: m.Shard, AllocationID: m.AllocationID, Primary: m.Primary})
			}
		}
	}
	return out, nil
}

func readCopyMeta(fs storage.FS, dir string) (copyMeta, bool) {
	f, err := fs.Open(filepath.Join(dir, copyMetaFile))
	if err != nil {
		return copyMeta{}, false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return copyMeta{}, false
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		return copyMeta{}, false
	}
	var m copyMeta
	if json.Unmarshal(b, &m) != nil {
		return copyMeta{}, false
	}
	return m, true
}

// writeCopyMeta records, durably, which copy dir holds: a copy is written
// only once its store is complete (an empty primary, or a recovery's files
// opened), so a COPY file never names a partial store.
func writeCopyMeta(fs storage.FS, dir string, m copyMeta) error {
	data, _ := json.Marshal(m)
	return storage.WriteFileAtomicIn(fs, dir, copyMetaFile, data)
}

// sweepGoneShards deletes the copies on this node's disk whose shard is
// no longer in its index: a cancelled split's child, or a handed-off
// split's parent, left behind by a crash before this node applied the
// cancel or the hand-off (a running node deletes them then, removeCopy).
// st is a state with this incarnation's join, so newer than anything the
// node acted on before it restarted: a shard gone from it never comes
// back (a new split of the same shard builds its children afresh). The
// join dropped these copies already (cluster's diskCopies); copies of
// shards the index still has are kept, assigned here or not.
func (n *Node) sweepGoneShards(st *cluster.State) {
	disk, err := n.scanCopies()
	if err != nil {
		n.log.Warn("list the copies on disk", zap.Error(err))
		return
	}
	for _, c := range disk {
		im := indexByUUID(st, c.IndexUUID)
		k := copyKey{index: c.IndexUUID, shard: c.Shard}
		if im == nil || n.copies[k] != nil {
			continue
		}
		if _, ok := im.Copies[c.Shard]; ok {
			continue
		}
		n.log.Info("deleting a copy of a shard its index no longer has", zap.String("index", im.Name),
			zap.Int("shard", int(c.Shard)), zap.String("allocation_id", c.AllocationID))
		if err := n.wipe(k); err != nil {
			n.log.Warn("delete a copy of a gone shard", zap.Error(err))
		}
	}
}

// wipe removes whatever a copy's directory holds.
func (n *Node) wipe(k copyKey) error {
	return n.cfg.FS.RemoveAll(n.copyDir(k))
}

func (n *Node) sortedCopies() []copyKey {
	keys := make([]copyKey, 0, len(n.copies))
	for k := range n.copies {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b copyKey) int {
		if a.index != b.index {
			if a.index < b.index {
				return -1
			}
			return 1
		}
		return int(a.shard) - int(b.shard)
	})
	return keys
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// assigned is one copy the state assigns to this node.
type assigned struct {
	key     copyKey
	index   *cluster.IndexMeta
	copy    cluster.ShardCopy
	term    uint64
	primary cluster.ShardCopy // the shard's primary
}

// reconcile makes this node's copies what st says (level-triggered: from
// the state alone, so replaying a log after a restart converges too).
func (n *Node) reconcile(st *cluster.State) {
	n.applied = st
	// A committed hand-off retires the parent here whether or not the
	// state still counts this node a member: its ranges are the
	// children's, and a parent left primary would take writes again once
	// its block timed out.
	n.retireHandedOff(st)
	me, ok := st.Nodes[n.cfg.Name]
	if !ok || me.EphemeralID != n.ephemeral {
		return // not (yet) a member under this incarnation
	}
	if !n.swept {
		n.swept = true
		n.sweepGoneShards(st)
	}
	want := map[copyKey]assigned{}
	for _, name := range sortedKeys(st.Indices) {
		im := st.Indices[name]
		for _, shard := range im.ShardIDs() {
			var primary cluster.ShardCopy
			for _, c := range im.Copies[shard] {
				if c.Primary {
					primary = c
				}
			}
			for _, c := range im.Copies[shard] {
				if c.Node == n.cfg.Name && c.Assigned() {
					k := copyKey{index: im.UUID, shard: shard}
					want[k] = assigned{key: k, index: im, copy: c, term: im.PrimaryTerms[shard], primary: primary}
				}
			}
		}
	}
	for _, k := range n.sortedCopies() {
		lc := n.copies[k]
		if a, ok := want[k]; !ok || a.copy.AllocationID != lc.aid {
			n.removeCopy(k, "no longer assigned here", lc.c != nil && inSyncIn(st, k, lc.aid))
		}
	}
	keys := make([]copyKey, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b copyKey) int {
		if a.index != b.index {
			if a.index < b.index {
				return -1
			}
			return 1
		}
		return int(a.shard) - int(b.shard)
	})
	for _, k := range keys {
		n.applyCopy(st, want[k])
	}
	n.reconcileSources(st)
	deferred := n.deferredStarts
	n.deferredStarts = nil
	for _, r := range deferred {
		n.onRecoveryStart(r.TargetNode, r)
	}
	for aid := range n.started {
		if copyStarted(st, aid) || !copyAssigned(st, aid) {
			delete(n.started, aid)
		}
	}
}

func copyStarted(st *cluster.State, aid string) bool {
	for _, im := range st.Indices {
		for _, cs := range im.Copies {
			for _, c := range cs {
				if c.AllocationID == aid {
					return c.State == cluster.Started
				}
			}
		}
	}
	return false
}

func copyAssigned(st *cluster.State, aid string) bool {
	for _, im := range st.Indices {
		for _, cs := range im.Copies {
			for _, c := range cs {
				if c.AllocationID == aid {
					return c.Assigned()
				}
			}
		}
	}
	return false
}

// inSyncIn reports whether aid is in the in-sync set of shard k in st.
func inSyncIn(st *cluster.State, k copyKey, aid string) bool {
	for _, im := range st.Indices {
		if im.UUID == k.index {
			return slices.Contains(im.InSync[k.shard], aid)
		}
	}
	return false
}

// removeCopy closes a copy and deletes its files, unless keep: an open
// copy still in the in-sync set (it failed, or its node was removed, and
// no copy replaced it yet) may hold the only data an acknowledged write
// is in, and the allocator may open it again as its shard's primary
// (OpenSearch deletes a shard's files only once it is active elsewhere).
func (n *Node) removeCopy(k copyKey, why string, keep bool) {
	lc := n.copies[k]
	n.log.Info("removing a shard copy", zap.String("index", k.index), zap.Int("shard", int(k.shard)),
		zap.String("allocation_id", lc.aid), zap.String("why", why), zap.Bool("keep_files", keep))
	n.endFollowedSplit(lc.aid)
	if err := lc.close(); err != nil {
		n.log.Warn("close a removed copy", zap.Error(err))
	}
	delete(n.copies, k)
	if keep {
		return
	}
	if err := n.wipe(k); err != nil {
		n.log.Warn("delete a removed copy", zap.Error(err))
	}
}

// applyCopy brings one assigned copy to what the state says.
func (n *Node) applyCopy(st *cluster.State, a assigned) {
	lc := n.copies[a.key]
	if _, child := a.index.SplitOf(a.key.shard); child && (a.copy.Primary || a.copy.RecoverySource == cluster.InPlaceSplit) {
		return // built by tickSplits beside its parent's copy, then follows the parent primary until the hand-off
	}
	switch {
	case a.copy.Primary && lc == nil:
		n.openPrimary(a)
	case a.copy.Primary && lc.c != nil:
		if !lc.c.IsPrimary() || lc.c.Term() < a.term {
			lc.c.Promote(a.term)
		}
		n.updateGroup(lc, a)
		if a.copy.State == cluster.Initializing {
			n.reportStarted(a, lc)
		}
	case a.copy.Primary:
		// A copy still recovering cannot become the primary: the
		// allocator promotes only started, in-sync copies.
		n.log.Error("a recovering copy was made primary", zap.String("allocation_id", a.copy.AllocationID))
	case lc == nil && a.copy.State == cluster.Initializing:
		n.startRecovery(a)
	case lc == nil:
		// A started replica this node does not have: it restarted under
		// this incarnation's join, which fails its old copies, so this
		// is a state of before; the next one will not have it.
	case lc.c == nil:
		n.askRecovery(lc, a)
	default:
		if lc.c.IsPrimary() {
			lc.c.Demote()
		}
	}
}

// openPrimary opens a primary copy: a new empty store, or the store on
// this node's disk that the allocator chose (its id in the in-sync set).
func (n *Node) openPrimary(a assigned) {
	dir := n.copyDir(a.key)
	if a.copy.RecoverySource == cluster.EmptyStore {
		if err := n.wipe(a.key); err != nil {
			n.log.Error("clear a new primary's directory", zap.Error(err))
			return
		}
	} else if m, ok := readCopyMeta(n.cfg.FS, dir); !ok || m.AllocationID != a.copy.AllocationID {
		// The cluster chose a copy this node reported (a join sent
		// before the directory went to another copy): it forgets it.
		n.proposeFailed(cluster.ShardFailed{Shard: routing.ShardID(a.key.shard), AllocationID: a.copy.AllocationID,
			PrimaryTerm: a.term, Reason: "the copy on disk is not the one allocated", NotOnDisk: true}, a.key.shardKey())
		return
	}
	if err := n.cfg.FS.MkdirAll(dir, 0o755); err != nil {
		n.log.Error("make a copy's directory", zap.Error(err))
		return
	}
	store, err := n.openStore(a.index, a.key.shard, dir)
	if err != nil {
		n.failCopy(a.key.shardKey(), a.copy.AllocationID, a.term, false, fmt.Sprintf("open the store: %v", err))
		return
	}
	if err := writeCopyMeta(n.cfg.FS, dir, copyMeta{IndexUUID: a.key.index, Shard: a.key.shard,
		AllocationID: a.copy.AllocationID, Primary: true}); err != nil {
		_ = store.Close()
		n.failCopy(a.key.shardKey(), a.copy.AllocationID, a.term, false, fmt.Sprintf("record the copy: %v", err))
		return
	}
	lc := &localCopy{key: a.key, aid: a.copy.AllocationID, dir: dir, store: store}
	lc.c = replication.NewCopy(replication.Config{Shard: a.key.shardKey(), AllocationID: lc.aid, Node: n.cfg.Name,
		Store: store, Env: copyEnv{n}}, a.term)
	lc.c.Promote(a.term)
	n.copies[a.key] = lc
	n.updateGroup(lc, a)
	n.reportStarted(a, lc)
}

func (n *Node) openStore(im *cluster.IndexMeta, shard routing.ShardID, dir string) (CopyStore, error) {
	keyspace, spans, err := Spans(im, shard)
	if err != nil {
		return nil, err
	}
	return n.cfg.Stores.Open(dir, shard, keyspace, spans)
}

// updateGroup hands a primary its replication group from the state.
func (n *Node) updateGroup(lc *localCopy, a assigned) {
	started, recovering := map[string]string{}, map[string]string{}
	for _, c := range a.index.Copies[a.key.shard] {
		switch c.State {
		case cluster.Started:
			started[c.AllocationID] = c.Node
		case cluster.Initializing:
			recovering[c.AllocationID] = c.Node
		}
	}
	lc.c.UpdateGroup(slices.Clone(a.index.InSync[a.key.shard]), started, recovering)
}

func (n *Node) reportStarted(a assigned, lc *localCopy) {
	n.proposeStarted(a.index.Name, a.key.shard, lc.aid, a.term)
}

// proposeStarted proposes ShardStarted for copy aid of a shard.
func (n *Node) proposeStarted(index string, shard routing.ShardID, aid string, term uint64) {
	// Once per copy and term: a copy made primary again under a greater
	// term (its node removed and back meanwhile) reports again, since the
	// report of the earlier term is refused.
	if t, ok := n.started[aid]; ok && t == term {
		return
	}
	n.started[aid] = term
	n.mgr.Propose(cluster.Task{ShardStarted: &cluster.ShardStarted{Index: index, Shard: shard,
		AllocationID: aid, PrimaryTerm: term}}, func(r coordinationResult) {
		if r.Err != nil {
			n.log.Debug("shard started refused", zap.String("allocation_id", aid), zap.Error(r.Err))
		}
	})
}

// failCopy asks the cluster manager to fail a copy (ShardStateAction),
// once per copy and term: the manager retries the proposal itself.
func (n *Node) failCopy(shard replication.ShardKey, aid string, term uint64, markStale bool, reason string) {
	n.proposeFailed(cluster.ShardFailed{Shard: routing.ShardID(shard.Shard), AllocationID: aid, PrimaryTerm: term,
		MarkStale: markStale, Reason: reason}, shard)
}

// proposeFailed proposes f for the copy of shard (its index named from
// the shard's uuid), once per copy, term and kind of failure.
func (n *Node) proposeFailed(f cluster.ShardFailed, shard replication.ShardKey) {
	key := fmt.Sprintf("%s/%d/%v/%v", f.AllocationID, f.PrimaryTerm, f.MarkStale, f.NotOnDisk)
	if n.failing[key] {
		return
	}
	n.failing[key] = true
	st := n.mgr.State()
	for name, im := range st.Indices {
		if im.UUID == shard.Index {
			f.Index = name
		}
	}
	if f.Index == "" {
		return
	}
	n.log.Info("failing a shard copy", zap.String("index", f.Index), zap.Int("shard", shard.Shard),
		zap.String("allocation_id", f.AllocationID), zap.Bool("mark_stale", f.MarkStale), zap.Bool("not_on_disk", f.NotOnDisk),
		zap.String("reason", f.Reason))
	n.mgr.Propose(cluster.Task{ShardFailed: &f}, func(coordinationResult) {
		delete(n.failing, key)
	})
}

// copyEnv is what a copy needs from its node.
type copyEnv struct{ n *Node }

func (e copyEnv) Send(node, kind string, body any) { e.n.send(node, kind, body) }
func (e copyEnv) FailCopy(shard replication.ShardKey, aid string, term uint64, markStale bool, reason string) {
	e.n.failCopy(shard, aid, term, markStale, reason)
}
func (e copyEnv) Logger() *zap.Logger { return e.n.log }
