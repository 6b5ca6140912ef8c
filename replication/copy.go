package replication

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/internal/invariants"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// Message kinds between copies of a shard.
const (
	KindReplicate = "rep/replicate" // primary → copy: operations in order
	KindResponse  = "rep/response"  // copy → primary: its local checkpoint
)

// ShardKey names a shard of an index across the cluster.
type ShardKey struct {
	Index string `json:"index"` // the index uuid
	Shard int    `json:"shard"`
}

func (k ShardKey) String() string { return fmt.Sprintf("[%s][%d]", k.Index, k.Shard) }

// replicateRequest carries operations from the primary to one copy, in
// sequence order from From on. TrimAbove, set by a new primary's first
// request to each copy, asks the copy to undo whatever it holds above it
// (PrimaryReplicaSyncer's trimAboveSeqNo).
type replicateRequest struct {
	Shard     ShardKey `json:"shard"`
	Target    string   `json:"target"`
	Primary   string   `json:"primary"`
	Term      uint64   `json:"term"`
	GCP       int64    `json:"gcp"`
	TrimAbove *int64   `json:"trim_above,omitempty"`
	Ops       []Op     `json:"ops"`
}

type replicateResponse struct {
	Shard ShardKey `json:"shard"`
	From  string   `json:"from"` // the copy's allocation id
	Term  uint64   `json:"term"` // the copy's operation term
	LCP   int64    `json:"lcp"`
	// GCP is the global checkpoint the copy knows after the request.
	GCP int64 `json:"gcp"`
	// StaleTerm: the request's term is below the copy's; the primary
	// that sent it has been replaced.
	StaleTerm bool `json:"stale_term,omitempty"`
	// Gap: the request's operations began after LCP+1 (an earlier
	// request was lost); the primary resends from LCP+1.
	Gap bool `json:"gap,omitempty"`
}

// Env is what a copy needs from its node: sending to a node, and asking
// the cluster manager to fail a copy (ShardStateAction.shardFailed).
type Env interface {
	Send(node, kind string, body any)
	FailCopy(shard ShardKey, aid string, term uint64, markStale bool, reason string)
	Logger() *zap.Logger
}

// ErrStalePrimary fails a write on a primary that a newer primary replaced:
// the coordinator retries against a newer cluster state.
var ErrStalePrimary = errors.New("replication: a newer primary replaced this one")

// ErrNotPrimary fails a write sent to a copy that is not its shard's
// primary.
var ErrNotPrimary = errors.New("replication: this copy is not the primary")

// ErrHandedOff fails a write on a parent primary that handed its ranges
// off to the children of a split (upstream's PrimaryShardSplitException).
// It wraps ErrNotPrimary: the coordinator retries against a newer cluster
// state, which routes the write to a child.
var ErrHandedOff = fmt.Errorf("replication: the shard was split and its primary handed off to the children: %w", ErrNotPrimary)

// WriteResult is a write's outcome: the sequence numbers and primary term
// of its operations and what its Prepare returned, or why it failed. A
// write that fails after its operations were applied on the primary (the
// copy stopped being the primary, or broke, before every in-sync copy had
// them) keeps its Seqs and Term: its outcome is unknown, for a copy that
// becomes primary may hold them.
type WriteResult struct {
	Seqs  []int64
	Term  uint64
	Value any
	Err   error
}

// Prepare turns a write into the operations to apply, on the primary, in
// sequence-number order: get reads a document as every write before it
// left it (the copy's store, and the writes of the same batch). This is
// where a write's version and op_type are resolved, as OpenSearch does on
// the primary. An error fails the write with nothing applied.
type Prepare func(get func(d storage.Op) (storage.Doc, bool, error)) (ops []storage.Op, value any, err error)

type pendingWrite struct {
	last int64 // the highest sequence number among its operations
	keys []string
	res  WriteResult
	done func(WriteResult)
}

// progress is the primary's stream to one copy (raft's Progress): the
// next sequence number to send, and when the copy last answered.
type progress struct {
	next int64
	// from is where the stream started: a copy that never answered is
	// sent its stream again from there (its checkpoint is unknown, and
	// the primary's history may hold nothing below it).
	from      int64
	trimAbove *int64 // sent with the next request, until the copy answers
	sentGCP   int64  // the global checkpoint the last request carried
	knownGCP  int64  // the global checkpoint the copy last said it knows
	sentTick  uint64
	heardTick uint64
	failed    bool
}

// Config configures a Copy.
type Config struct {
	Shard        ShardKey
	AllocationID string
	Node         string
	Store        Store
	Env          Env
	// BatchOps bounds the operations of one replicate request.
	BatchOps int
	// WindowOps bounds the operations sent and not yet acknowledged.
	WindowOps int
	// ResendTicks: a copy silent this long is sent its stream again from
	// its last acknowledged operation.
	ResendTicks uint64
	// FailTicks: a copy that has not acknowledged an operation sent this
	// long ago is failed (ShardFailed, marked stale if in sync).
	FailTicks uint64
	// Follow, on a child of a split, is the range the child owns: of the
	// operations it is sent (its parent's while the split runs, its own
	// after), it applies those of its range and records the others as
	// no-ops, so its local checkpoint advances over them.
	Follow *Follow
}

// Follow is a child's range: its keyspace and spans.
type Follow struct {
	Keyspace routing.ShardID
	Spans    []routing.Span
}

// owns reports whether an operation touches the range: its document, or a
// document of its _id it removes.
func (f *Follow) owns(op Op) bool {
	if op.Doc.Kind == storage.OpNoop || op.Doc.Root != f.Keyspace {
		return false
	}
	in := func(k routing.Key) bool {
		for _, sp := range f.Spans {
			if sp.Contains(k) {
				return true
			}
		}
		return false
	}
	if in(op.Doc.Key) {
		return true
	}
	for _, k := range op.Removed {
		if in(k) {
			return true
		}
	}
	return false
}

// Copy is one copy of a shard on this node (OpenSearch's IndexShard with
// its ReplicationTracker): a primary or a replica.
type Copy struct {
	cfg   Config
	store Store
	env   Env
	log   *zap.Logger

	term    uint64 // the operation primary term this copy acts under
	primary bool
	stale   bool // a replica answered with a greater term
	// trimmedTerm is the last term whose new primary's trim this copy
	// carried out.
	trimmedTerm uint64
	// inbound are the primary's requests taken since the last Flush.
	inbound []inboundRequest
	// storedGCP is the global checkpoint last handed to the store, and
	// trimmedTo the point its history was last trimmed to.
	storedGCP, trimmedTo int64
	gcp                  int64 // the global checkpoint as this copy knows it

	tick uint64
	// broken is why the copy stopped: an fsync of its operations failed
	// after they were applied, so its local checkpoint may hold what is
	// not durable; it answers and acknowledges nothing more, and its
	// primary fails it (a broken primary fails its writes).
	broken error

	// Primary only.
	tracker  *Tracker
	streams  map[string]*progress
	queued   []queuedWrite
	pending  []*pendingWrite  // applied, waiting for the in-sync copies
	failing  map[string]bool  // ShardFailed sent, waiting for the cluster state
	busyKeys map[string]int   // document key → writes applied and not yet acknowledged
	leases   map[string]int64 // retention leases: recovery id → the first sequence number it needs
	// blocked: writes wait in held (a split's hand-off); followersAck:
	// from the first block until the split ends, a write is acknowledged
	// only once every follower has it too, so that a hand-off committed
	// whenever leaves no acknowledged write behind; retired: the shard
	// handed off, writes fail with ErrHandedOff.
	blocked, followersAck, retired bool
	held                           []queuedWrite
	// ownStream: a child of a split heard its own shard's primary (the
	// split handed off). From then on it takes nothing of its parent's
	// stream: a late operation of the retired parent, in the same term,
	// would take a sequence number its own primary assigns to another
	// write.
	ownStream bool
}

// AddLease retains the history from seq on under id until RemoveLease (a
// retention lease: a recovery's phase 2 will ask for it).
func (c *Copy) AddLease(id string, seq int64) { c.addLease(id, seq) }

// RemoveLease drops a retention lease.
func (c *Copy) RemoveLease(id string) { c.removeLease(id) }

// addLease retains the history from seq on for a recovery until it ends
// (a peer-recovery retention lease).
func (c *Copy) addLease(id string, seq int64) {
	if c.leases == nil {
		c.leases = map[string]int64{}
	}
	c.leases[id] = seq
}

func (c *Copy) removeLease(id string) { delete(c.leases, id) }

type queuedWrite struct {
	prepare Prepare
	done    func(WriteResult)
}

// NewCopy opens a copy as a replica at term. The node makes it the primary
// (Promote) when a cluster state says so.
func NewCopy(cfg Config, term uint64) *Copy {
	if cfg.BatchOps == 0 {
		cfg.BatchOps = 256
	}
	if cfg.WindowOps == 0 {
		cfg.WindowOps = 4096
	}
	if cfg.ResendTicks == 0 {
		cfg.ResendTicks = 3
	}
	if cfg.FailTicks == 0 {
		cfg.FailTicks = 20
	}
	// The global checkpoint the store recorded: a copy's knowledge of it
	// never goes back while its files are kept (ReplicationTracker only
	// advances it). It is at most the local checkpoint.
	gcp := max(min(cfg.Store.GlobalCheckpoint(), cfg.Store.LocalCheckpoint()), NoOpsPerformed)
	return &Copy{cfg: cfg, store: cfg.Store, env: cfg.Env, log: cfg.Env.Logger(), term: term, gcp: gcp,
		storedGCP: gcp, trimmedTo: NoOpsPerformed}
}

// AllocationID returns the copy's allocation id.
func (c *Copy) AllocationID() string { return c.cfg.AllocationID }

// Term returns the operation primary term the copy acts under.
func (c *Copy) Term() uint64 { return c.term }

// IsPrimary reports whether the copy acts as its shard's primary.
func (c *Copy) IsPrimary() bool { return c.primary && !c.stale }

// LocalCheckpoint returns the copy's local checkpoint.
func (c *Copy) LocalCheckpoint() int64 { return c.store.LocalCheckpoint() }

// GlobalCheckpoint returns the global checkpoint as the copy knows it.
func (c *Copy) GlobalCheckpoint() int64 { return c.gcp }

// Promote makes the copy its shard's primary under term, with the
// replication group of a cluster state (UpdateGroup follows): every other
// assigned copy is sent the history above the global checkpoint, with the
// instruction to undo what it holds above this copy's local checkpoint
// (primary-replica resync).
func (c *Copy) Promote(term uint64) {
	if c.primary && term == c.term {
		return
	}
	if term < c.term {
		_ = invariants.AssertionFailedf("replication: promotion of %s to term %d below its term %d", c.cfg.Shard, term, c.term)
		return
	}
	c.applyInbound() // what the old primary sent, before this copy's checkpoint decides the others' trim
	wasReplica := !c.primary
	c.term, c.primary, c.stale = term, true, false
	lcp := c.store.LocalCheckpoint()
	c.tracker = newTracker(c.cfg.AllocationID, lcp)
	c.tracker.gcp = max(c.gcp, NoOpsPerformed)
	c.streams = map[string]*progress{}
	c.failing = map[string]bool{}
	c.busyKeys = map[string]int{}
	if wasReplica {
		c.log.Info("promoted to primary", zap.Stringer("shard", c.cfg.Shard), zap.Uint64("term", term),
			zap.Int64("local_checkpoint", lcp), zap.Int64("global_checkpoint", c.gcp))
	}
}

// UpdateGroup reconciles a primary's replication group with a cluster
// state: inSync are the shard's in-sync allocation ids, started maps every
// started copy to its node, recovering every initializing one. A started
// copy the primary does not stream to yet is streamed to from the global
// checkpoint on, after undoing what it holds above the primary's local
// checkpoint; a recovering copy waits for its recovery (StartTracking).
func (c *Copy) UpdateGroup(inSync []string, started, recovering map[string]string) {
	if !c.primary {
		return
	}
	routed := map[string]string{}
	for aid, node := range started {
		routed[aid] = node
	}
	for aid, node := range recovering {
		routed[aid] = node
	}
	c.tracker.update(inSync, routed)
	for aid := range c.streams {
		if _, ok := routed[aid]; !ok && !c.isFollower(aid) {
			delete(c.streams, aid)
		}
	}
	for aid := range c.failing {
		if !slices.Contains(inSync, aid) {
			if _, ok := routed[aid]; !ok {
				delete(c.failing, aid)
			}
		}
	}
	for aid := range started {
		if aid == c.cfg.AllocationID {
			continue
		}
		if _, ok := c.streams[aid]; !ok {
			trim := c.store.LocalCheckpoint()
			c.tracker.startTracking(aid, NoOpsPerformed-1)
			c.streams[aid] = &progress{next: c.tracker.gcp + 1, from: c.tracker.gcp + 1, trimAbove: &trim, heardTick: c.tick, sentGCP: NoOpsPerformed,
				knownGCP: NoOpsPerformed}
		}
	}
	c.markStaleUntracked()
	c.send()
	c.complete()
}

// StartTracking makes a recovering copy that opened its files at lcp a
// member of the stream: it is sent every operation after lcp (recovery's
// phase 2 and live writes are one stream).
func (c *Copy) StartTracking(aid string, lcp int64) {
	if !c.primary {
		return
	}
	c.tracker.startTracking(aid, lcp)
	c.streams[aid] = &progress{next: lcp + 1, from: lcp + 1, heardTick: c.tick, sentGCP: NoOpsPerformed, knownGCP: NoOpsPerformed}
	c.send()
	c.complete()
}

// MarkInSync marks a tracked copy in sync once it caught up with the
// global checkpoint; it reports whether it did.
func (c *Copy) MarkInSync(aid string) bool {
	if !c.primary {
		return false
	}
	return c.tracker.markInSync(aid)
}

// TrackedCheckpoint returns what the primary knows of a copy's local
// checkpoint.
func (c *Copy) TrackedCheckpoint(aid string) (int64, bool) {
	if !c.primary {
		return 0, false
	}
	t, ok := c.tracker.copies[aid]
	if !ok {
		return 0, false
	}
	return t.lcp, true
}

// markStaleUntracked asks the cluster manager to mark stale every in-sync
// copy that has no assigned copy (its node left): until the in-sync set
// loses it, no write is acknowledged.
func (c *Copy) markStaleUntracked() {
	for _, aid := range c.tracker.untrackedInSync() {
		if !c.failing[aid] {
			c.failing[aid] = true
			c.env.FailCopy(c.cfg.Shard, aid, c.term, true, "the copy is unassigned")
		}
	}
}

// Write applies a write's operations on the primary and acknowledges it
// (done) once every in-sync copy has them. Writes queue until Flush, which
// prepares them in order and applies them in one batch (the group commit
// of a node's event loop).
func (c *Copy) Write(prepare Prepare, done func(WriteResult)) {
	if c.broken != nil {
		done(WriteResult{Err: c.broken})
		return
	}
	if !c.IsPrimary() {
		err := ErrNotPrimary
		switch {
		case c.retired:
			err = ErrHandedOff
		case c.stale:
			err = ErrStalePrimary
		}
		done(WriteResult{Err: err})
		return
	}
	if c.blocked {
		c.held = append(c.held, queuedWrite{prepare: prepare, done: done})
		return
	}
	c.queued = append(c.queued, queuedWrite{prepare: prepare, done: done})
}

// StartFollowing makes a copy of another shard (shard: a child of a split
// of this one, on node, allocation id aid) a follower of this primary from
// lcp on: it is sent every operation after lcp, and counts for neither the
// global checkpoint nor the in-sync set. Its history is retained for it.
func (c *Copy) StartFollowing(aid, node string, shard ShardKey, lcp int64) {
	if !c.primary {
		return
	}
	if t, ok := c.tracker.copies[aid]; ok && !t.follower {
		_ = invariants.AssertionFailedf("replication: %s follower %s is a copy of the shard", c.cfg.Shard, aid)
		return
	}
	c.tracker.copies[aid] = &tracked{aid: aid, node: node, tracking: true, follower: true, lcp: lcp, shard: shard}
	c.streams[aid] = &progress{next: lcp + 1, from: lcp + 1, heardTick: c.tick, sentGCP: NoOpsPerformed}
	c.send()
}

// StopFollowing forgets a follower.
func (c *Copy) StopFollowing(aid string) {
	if !c.primary {
		return
	}
	if t, ok := c.tracker.copies[aid]; ok && t.follower {
		delete(c.tracker.copies, aid)
		delete(c.streams, aid)
		delete(c.failing, aid)
	}
	if len(c.tracker.followers()) == 0 {
		c.followersAck = false
	}
	c.complete()
}

// Followers returns the allocation ids of the followers and their local
// checkpoints as they acknowledged.
func (c *Copy) Followers() map[string]int64 {
	out := map[string]int64{}
	if !c.primary {
		return out
	}
	for _, t := range c.tracker.followers() {
		out[t.aid] = t.lcp
	}
	return out
}

// FollowerCaughtUp reports whether a follower holds every operation up to
// the global checkpoint: a child copy may report itself started.
func (c *Copy) FollowerCaughtUp(aid string) bool {
	if !c.primary {
		return false
	}
	t, ok := c.tracker.copies[aid]
	return ok && t.follower && t.lcp >= c.tracker.gcp
}

// BlockWrites holds every new write (a split's hand-off: its parent's
// permits blocked); from now on, until the followers are gone, a write is
// acknowledged only once every follower has it.
func (c *Copy) BlockWrites() {
	c.blocked = true
	c.followersAck = true
}

// Blocked reports whether writes are held.
func (c *Copy) Blocked() bool { return c.blocked }

// Unblock lets the held writes through (the hand-off did not commit in
// time, or the split was cancelled).
func (c *Copy) Unblock() {
	if !c.blocked {
		return
	}
	c.blocked = false
	c.queued = append(c.queued, c.held...)
	c.held = nil
}

// HandoffReady reports whether the primary may hand off: writes are
// blocked, none is in flight, and every follower holds every operation
// the primary has (a parent primary's hand-off to its children). It
// returns the primary's term and local checkpoint: the hand-off record.
func (c *Copy) HandoffReady() (term uint64, maxSeq int64, ok bool) {
	if !c.IsPrimary() || !c.blocked || len(c.queued) > 0 || len(c.pending) > 0 {
		return 0, 0, false
	}
	lcp := c.store.LocalCheckpoint()
	fs := c.tracker.followers()
	if len(fs) == 0 {
		return 0, 0, false
	}
	for _, t := range fs {
		// Every follower holds every operation, and said it knows the
		// global checkpoint: a child primary resyncs its replicas from
		// there, and a child built from its parent's copy holds no
		// history below its own local checkpoint (a global checkpoint
		// only sent may be lost, leaving the child one below it).
		if p := c.streams[t.aid]; t.lcp != lcp || p == nil || p.knownGCP < c.tracker.gcp {
			return 0, 0, false
		}
	}
	return c.term, lcp, true
}

// Retire ends a primary whose shard handed off: every held, queued and
// pending write fails with ErrHandedOff, and so does every later one.
func (c *Copy) Retire() {
	held := c.held
	c.held, c.blocked, c.retired = nil, false, true
	for _, q := range held {
		q.done(WriteResult{Err: ErrHandedOff})
	}
	if c.primary {
		c.failAll(ErrHandedOff)
	}
	c.primary = false
	c.tracker, c.streams = nil, nil
}

// Flush applies what the copy queued since the last Flush in one durable
// batch: on a primary, the queued writes (assigning sequence numbers, then
// sending them to the tracked copies); on a replica, its primary's
// requests.
func (c *Copy) Flush() { c.FlushStart()() }

// FlushStart is Flush in two steps: it applies the batch and sends what
// a primary sends, and returns end, which waits until the batch is durable
// and then acknowledges (a primary's writes that every in-sync copy has, a
// replica's answers to its primary). A node starts the flush of each of
// its copies, then ends each: their fsyncs (one per copy's store) overlap
// instead of following one another. end must be called, once, before the
// copy is used again.
func (c *Copy) FlushStart() (end func()) {
	endInbound := c.applyInboundStart()
	endWrites := c.flushWritesStart()
	return func() {
		endInbound()
		endWrites()
	}
}

// flushWritesStart applies a primary's queued writes and sends them; its
// end waits for them to be durable here and acknowledges what it can.
func (c *Copy) flushWritesStart() (end func()) {
	nothing := func() {}
	if len(c.queued) == 0 {
		return nothing
	}
	queued := c.queued
	c.queued = nil
	if !c.IsPrimary() {
		for _, q := range queued {
			q.done(WriteResult{Err: ErrStalePrimary})
		}
		return nothing
	}
	next := c.store.LocalCheckpoint() + 1
	var ops []Op
	writes := make([]*pendingWrite, 0, len(queued))
	batch := map[string]*storage.Doc{} // what this batch's writes left: nil = deleted
	get := func(d storage.Op) (storage.Doc, bool, error) {
		if doc, ok := batch[docKey(d)]; ok {
			if doc == nil {
				return storage.Doc{}, false, nil
			}
			return *doc, true, nil
		}
		return c.store.Get(d)
	}
	for _, q := range queued {
		docs, value, err := q.prepare(get)
		if err != nil {
			q.done(WriteResult{Err: err})
			continue
		}
		w := &pendingWrite{done: q.done, res: WriteResult{Term: c.term, Value: value}, last: next - 1}
		for _, d := range docs {
			ops = append(ops, Op{Seq: next, Term: c.term, Doc: d})
			w.res.Seqs = append(w.res.Seqs, next)
			w.last = next
			w.keys = append(w.keys, docKey(d))
			if d.Kind == storage.OpDelete {
				batch[docKey(d)] = nil
			} else {
				batch[docKey(d)] = &storage.Doc{Root: d.Root, Key: d.Key, ID: d.ID, Routing: d.Routing, Seq: uint64(next), Source: d.Source}
			}
			next++
		}
		writes = append(writes, w)
	}
	if len(ops) == 0 {
		c.pending = append(c.pending, writes...)
		c.complete()
		return nothing
	}
	wait, err := c.applyNoWait(ops, false)
	if err != nil {
		err = fmt.Errorf("replication: shard %s: apply %d operations: %w", c.cfg.Shard, len(ops), err)
		for _, w := range writes {
			w.done(WriteResult{Err: err})
		}
		return nothing
	}
	for _, w := range writes {
		for _, k := range w.keys {
			c.busyKeys[k]++
		}
	}
	c.pending = append(c.pending, writes...)
	// The copies are sent the operations before this copy's own fsync
	// ends (NoWaitApplier): theirs and its overlap. This copy counts
	// toward the global checkpoint only once they are durable here.
	c.send()
	lcp := c.store.LocalCheckpoint()
	return func() {
		if err := wait(); err != nil {
			c.breakOn(fmt.Errorf("replication: shard %s: sync %d operations: %w", c.cfg.Shard, len(ops), err))
			return
		}
		if c.primary && c.tracker != nil {
			c.tracker.acknowledged(c.cfg.AllocationID, lcp)
			c.complete()
		}
	}
}

// applyNoWait applies ops through the store's NoWaitApplier, or durably
// (its wait a no-op) through Apply.
func (c *Copy) applyNoWait(ops []Op, undo bool) (func() error, error) {
	if a, ok := c.store.(NoWaitApplier); ok {
		return a.ApplyNoWait(ops, undo)
	}
	return func() error { return nil }, c.store.Apply(ops, undo)
}

// breakOn stops the copy for good: operations it applied may not be
// durable, so it must not count them, answer for them or acknowledge them
// (its node's copy is failed and rebuilt).
func (c *Copy) breakOn(err error) {
	if c.broken != nil {
		return
	}
	c.broken = err
	c.log.Error("a copy's operations may not be durable; it stops", zap.Stringer("shard", c.cfg.Shard), zap.Error(err))
	if c.primary {
		c.failAll(err)
	}
}

// docKey names a document as a shard keeps it: one per _id in a keyspace,
// whatever routing value reached it.
func docKey(d storage.Op) string { return strconv.FormatUint(uint64(d.Root), 10) + "/" + d.ID }

// Busy reports whether a write to the document is applied on the primary
// and not yet acknowledged: a get waits for it, so that it never returns
// a document that a failover may take back.
func (c *Copy) Busy(d storage.Op) bool { return c.busyKeys[docKey(d)] > 0 }

// send sends every tracked copy the operations it has not been sent, within
// its window.
func (c *Copy) send() {
	if !c.IsPrimary() {
		return
	}
	lcp := c.store.LocalCheckpoint()
	fgcp := c.followersGCP(c.tracker.gcp)
	for _, t := range c.tracker.targets() {
		p := c.streams[t.aid]
		if p == nil || p.failed {
			continue
		}
		gcp := c.tracker.gcp
		if t.follower {
			gcp = fgcp
		}
		acked := max(t.lcp, p.next-1-int64(c.cfg.WindowOps))
		for p.next <= lcp && p.next-1-acked < int64(c.cfg.WindowOps) || p.trimAbove != nil {
			to := min(lcp, p.next+int64(c.cfg.BatchOps)-1)
			req := replicateRequest{Shard: c.cfg.Shard, Target: t.aid, Primary: c.cfg.AllocationID, Term: c.term,
				GCP: gcp, TrimAbove: p.trimAbove}
			if p.next <= to {
				err := c.store.History(p.next, to, func(op Op) error {
					req.Ops = append(req.Ops, op)
					return nil
				})
				// The history must hold p.next: an answer that starts
				// later, or holds nothing, lost what the copy needs (sent
				// empty, the request would be answered and sent again,
				// without end).
				if err != nil || len(req.Ops) == 0 || req.Ops[0].Seq != p.next {
					c.log.Error("replication history unavailable; failing the copy", zap.Stringer("shard", c.cfg.Shard),
						zap.String("copy", t.aid), zap.Int64("from", p.next), zap.Error(err))
					c.fail(t.aid, "the operation history it needs is gone")
					break
				}
			}
			c.env.Send(t.node, KindReplicate, req)
			p.sentTick, p.sentGCP = c.tick, req.GCP
			if len(req.Ops) == 0 {
				break
			}
			p.next = req.Ops[len(req.Ops)-1].Seq + 1
		}
	}
}

// fail asks the cluster manager to fail a copy; writes wait until a
// cluster state without it arrives.
func (c *Copy) fail(aid, reason string) {
	if p := c.streams[aid]; p != nil {
		p.failed = true
	}
	if c.failing[aid] {
		return
	}
	c.failing[aid] = true
	t := c.tracker.copies[aid]
	if t != nil && t.follower {
		// A copy of the child's shard, failed as by itself: the split
		// rolls back.
		c.env.FailCopy(t.shard, aid, 0, false, reason)
		return
	}
	markStale := t != nil && t.inSync
	c.env.FailCopy(c.cfg.Shard, aid, c.term, markStale, reason)
}

// followersGCP is the global checkpoint a follower is sent: the
// primary's, but no higher than every follower's local checkpoint. The
// followers are the copies of the children, which become their shards'
// groups at the hand-off: a child copy records the global checkpoint as
// its own (it drops the undo records below it, and a new primary's trim
// stops there), so it must be one every child copy holds. The primary's
// covers operations that only its own copies may hold, and a hand-off
// that commits after the primary unblocked its writes finds the child
// copies unequal above it.
func (c *Copy) followersGCP(gcp int64) int64 {
	for _, t := range c.tracker.followers() {
		gcp = min(gcp, t.lcp)
	}
	return gcp
}

func (c *Copy) isFollower(aid string) bool {
	t := c.tracker.copies[aid]
	return t != nil && t.follower
}

// OnResponse takes a copy's answer to a replicate request.
func (c *Copy) OnResponse(r replicateResponse) {
	if !c.primary {
		return
	}
	if r.StaleTerm && r.Term <= c.term {
		return // an answer to a request of an older term, late: this primary's term is not below the copy's
	}
	if r.StaleTerm || r.Term > c.term {
		if !c.stale {
			c.log.Warn("a copy answered with a greater term: this primary was replaced", zap.Stringer("shard", c.cfg.Shard),
				zap.String("copy", r.From), zap.Uint64("term", c.term), zap.Uint64("their_term", r.Term))
		}
		c.stale = true
		c.failAll(ErrStalePrimary)
		return
	}
	p := c.streams[r.From]
	if p == nil {
		return
	}
	p.heardTick = c.tick
	p.trimAbove = nil
	p.knownGCP = max(p.knownGCP, r.GCP)
	if t := c.tracker.copies[r.From]; t != nil && r.LCP < t.lcp {
		return // an older answer, overtaken (a copy applies before it answers, durably)
	}
	if r.Gap && r.LCP+1 < p.next {
		p.next = r.LCP + 1 // resend what was lost
	}
	c.tracker.acknowledged(r.From, r.LCP)
	c.send()
	c.complete()
}

// complete acknowledges, in order, every pending write that every in-sync
// copy has.
func (c *Copy) complete() {
	c.gcp = max(c.gcp, c.tracker.gcp)
	n := 0
	for _, w := range c.pending {
		if !c.tracker.covers(w.last, c.followersAck) {
			break
		}
		n++
	}
	done := c.pending[:n]
	c.pending = slices.Clone(c.pending[n:])
	for _, w := range done {
		for _, k := range w.keys {
			if c.busyKeys[k]--; c.busyKeys[k] <= 0 {
				delete(c.busyKeys, k)
			}
		}
		w.done(w.res)
	}
}

// failAll fails every queued and pending write with err: their
// acknowledgement can no longer be given (the copy is no longer primary).
func (c *Copy) failAll(err error) {
	held := c.held
	c.held, c.blocked = nil, false
	for _, q := range held {
		q.done(WriteResult{Err: err})
	}
	for _, q := range c.queued {
		q.done(WriteResult{Err: err})
	}
	for _, w := range c.pending {
		w.done(WriteResult{Err: err, Seqs: w.res.Seqs, Term: w.res.Term})
	}
	c.queued, c.pending = nil, nil
	clear(c.busyKeys)
}

// Demote stops a primary acting as one (its node applied a state in which
// it is not the primary, or is gone): its writes in flight fail.
func (c *Copy) Demote() {
	if c.primary {
		c.failAll(ErrNotPrimary)
	}
	c.primary = false
	c.tracker, c.streams = nil, nil
}

// Tick resends to silent copies and fails copies that stopped answering;
// on a replica it hands the store the global checkpoint, whose undo
// records can go (once a tick, not per batch: each is a range deletion).
func (c *Copy) Tick() {
	c.tick++
	if !c.IsPrimary() {
		if c.gcp > c.storedGCP {
			// A replica keeps its history above the global checkpoint
			// only: once promoted, it resyncs the others from there.
			if err := c.store.SetGlobalCheckpoint(c.gcp); err != nil {
				c.log.Warn("record global checkpoint", zap.Error(err))
			} else if err := c.store.TrimHistory(c.gcp); err != nil {
				c.log.Warn("trim history", zap.Error(err))
			} else {
				c.storedGCP = c.gcp
			}
		}
		return
	}
	if c.gcp > c.storedGCP {
		// The primary's own, kept with its files too: opened again
		// (its node back, or its shard's only valid copy), it does not
		// start over from NoOpsPerformed below the history it trimmed.
		if err := c.store.SetGlobalCheckpoint(c.gcp); err != nil {
			c.log.Warn("record global checkpoint", zap.Error(err))
		} else {
			c.storedGCP = c.gcp
		}
	}
	lcp := c.store.LocalCheckpoint()
	fgcp := c.followersGCP(c.gcp)
	for _, t := range c.tracker.targets() {
		p := c.streams[t.aid]
		if p == nil || p.failed {
			continue
		}
		behind := t.lcp < p.next-1 || p.trimAbove != nil
		if !behind && t.lcp >= lcp {
			p.heardTick = c.tick
			gcp := c.gcp
			if t.follower {
				gcp = fgcp
			}
			if p.knownGCP < gcp && (p.sentGCP < gcp || c.tick-p.sentTick >= c.cfg.ResendTicks) {
				// Idle: carry the global checkpoint alone
				// (GlobalCheckpointSyncAction), again until the copy
				// says it knows it (the request may be lost).
				c.env.Send(t.node, KindReplicate, replicateRequest{Shard: c.cfg.Shard, Target: t.aid, Primary: c.cfg.AllocationID,
					Term: c.term, GCP: gcp})
				p.sentGCP, p.sentTick = gcp, c.tick
			}
			continue
		}
		if c.tick-p.heardTick >= c.cfg.FailTicks {
			c.fail(t.aid, fmt.Sprintf("no answer for %d ticks", c.tick-p.heardTick))
			continue
		}
		if c.tick-p.sentTick >= c.cfg.ResendTicks {
			p.next = max(t.lcp+1, 0)
			if t.lcp == unknownCheckpoint {
				p.next = p.from
			}
			if p.next > lcp && p.trimAbove == nil {
				continue
			}
			c.send()
		}
	}
	c.trimHistory()
}

// trimHistory drops the history every tracked copy acknowledged: it will
// not be sent again. A copy recovering from a checkpoint holds it from the
// checkpoint on (its retention lease) through StartTracking.
func (c *Copy) trimHistory() {
	low := c.store.LocalCheckpoint()
	for _, t := range c.tracker.copies {
		if t.aid != c.cfg.AllocationID && (t.tracking || t.inSync) {
			low = min(low, t.lcp)
		}
	}
	low = min(low, c.gcp)
	for _, from := range c.leases {
		low = min(low, from-1)
	}
	if low > c.trimmedTo {
		if err := c.store.TrimHistory(low); err != nil {
			c.log.Warn("trim history", zap.Error(err))
			return
		}
		c.trimmedTo = low
	}
}

// OnReplicate takes a primary's request on a replica: refuses an older
// term, adopts a newer one (undoing what the new primary does not have),
// and queues the operations that follow its local checkpoint; Flush
// applies every request queued since, in one durable batch (a replica's
// group commit), and answers each primary with the local checkpoint.
func (c *Copy) OnReplicate(from string, r replicateRequest) {
	if c.cfg.Follow != nil {
		if r.Shard != c.cfg.Shard {
			if c.ownStream {
				return // the retired parent's, sent before the hand-off
			}
		} else {
			c.ownStream = true
		}
	}
	if r.Term < c.term {
		c.env.Send(from, KindResponse, replicateResponse{Shard: r.Shard, From: c.cfg.AllocationID, Term: c.term,
			StaleTerm: true, LCP: c.store.LocalCheckpoint()})
		return
	}
	if c.primary {
		if r.Term == c.term {
			c.log.Error("two primaries with one term", zap.Stringer("shard", c.cfg.Shard), zap.String("other", r.Primary))
			return
		}
		c.Demote()
	}
	// A new primary's first requests carry the point to undo above; the
	// first of them to arrive does it, once per term, so a late duplicate
	// cannot undo operations of the new term this copy has acknowledged.
	trim := r.TrimAbove != nil && r.Term > c.trimmedTerm && c.localCheckpointAfterInbound() > *r.TrimAbove
	if r.Term > c.term || trim {
		c.applyInbound() // what came under the old term first
	}
	if r.Term > c.term {
		c.term = r.Term
	}
	if trim {
		to := max(*r.TrimAbove, c.gcp)
		if err := c.store.Trim(to); err != nil {
			c.log.Error("undo operations above the new primary's checkpoint", zap.Stringer("shard", c.cfg.Shard),
				zap.Int64("above", to), zap.Error(err))
			return
		}
	}
	if r.TrimAbove != nil {
		c.trimmedTerm = max(c.trimmedTerm, r.Term)
	}
	c.inbound = append(c.inbound, inboundRequest{from: from, r: r})
}

// inboundRequest is a primary's request queued for the next Flush.
type inboundRequest struct {
	from string
	r    replicateRequest
}

// localCheckpointAfterInbound is the local checkpoint the queued requests
// would leave (an upper bound: what they carry after the checkpoint).
func (c *Copy) localCheckpointAfterInbound() int64 {
	lcp := c.store.LocalCheckpoint()
	for _, in := range c.inbound {
		for _, op := range in.r.Ops {
			if op.Seq == lcp+1 {
				lcp = op.Seq
			}
		}
	}
	return lcp
}

// applyInbound applies the operations of the queued requests that follow
// the local checkpoint, in one durable batch, and answers each primary
// that sent one with the local checkpoint (and a gap, where its
// operations began past it: an earlier request was lost).
func (c *Copy) applyInbound() { c.applyInboundStart()() }

// applyInboundStart is applyInbound in two steps (FlushStart): it applies
// the batch; its end waits until the batch is durable, then answers.
func (c *Copy) applyInboundStart() (end func()) {
	if len(c.inbound) == 0 || c.broken != nil {
		c.inbound = nil
		return func() {}
	}
	inbound := c.inbound
	c.inbound = nil
	lcp := c.store.LocalCheckpoint()
	var apply []Op
	gap := map[string]bool{}
	for _, in := range inbound {
		for _, op := range in.r.Ops {
			next := lcp + 1 + int64(len(apply))
			if op.Seq < next {
				continue
			}
			if op.Seq != next {
				gap[in.from] = true
				break
			}
			if f := c.cfg.Follow; f != nil && !f.owns(op) {
				op = Op{Seq: op.Seq, Term: op.Term, Doc: storage.Op{Kind: storage.OpNoop}}
			}
			apply = append(apply, op)
		}
	}
	wait := func() error { return nil }
	if len(apply) > 0 {
		var err error
		if wait, err = c.applyNoWait(apply, true); err != nil {
			c.log.Error("apply replicated operations", zap.Stringer("shard", c.cfg.Shard), zap.Error(err))
			return func() {}
		}
	}
	return func() {
		if err := wait(); err != nil {
			c.breakOn(fmt.Errorf("replication: shard %s: sync %d replicated operations: %w", c.cfg.Shard, len(apply), err))
			return
		}
		// A replica answers only with what it made durable.
		lcp := c.store.LocalCheckpoint()
		gcp := c.gcp
		for _, in := range inbound {
			gcp = max(gcp, min(in.r.GCP, lcp))
		}
		c.gcp = max(c.gcp, gcp)
		answered := map[string]bool{}
		for _, in := range inbound {
			if answered[in.from] {
				continue
			}
			answered[in.from] = true
			// A follower answers for the shard whose stream it follows.
			c.env.Send(in.from, KindResponse, replicateResponse{Shard: in.r.Shard, From: c.cfg.AllocationID, Term: c.term,
				LCP: lcp, GCP: c.gcp, Gap: gap[in.from]})
		}
	}
}
