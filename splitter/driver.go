package splitter

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/internal/invariants"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// Config bounds the driver.
type Config struct {
	// DrainTimeout bounds the wait for writes in flight on the parent at
	// handoff (default 50 ms). Past it the handoff is abandoned and retried.
	DrainTimeout time.Duration
	// RetireWait bounds the wait for readers of the parent before its data
	// is dropped (default 10 s).
	RetireWait time.Duration
	// Clock reads the time for measurements (default: the node's clock).
	Clock clock.Clock
	// Logger receives phase transitions (default: none).
	Logger *zap.Logger
	// Hook, if set, runs before each intent is taken, with the phase and the
	// intent that is next; a test uses it to deliver requests between steps
	// or to cancel (Split.Cancel), in which case the cancel's intent is
	// carried out instead.
	Hook func(phase Phase, next Intent)
	// Journal, if set, records every phase transition durably before its
	// effects (crash safety; see package recovery).
	Journal *Journal
	// ChildBuild is how a split's children are made (per-shard layout):
	// storage.ChildExcise (the default) excises the parent's other spans at
	// creation; storage.ChildKeepAll keeps every document of the parent and
	// deletes the foreign ones one by one after the handoff, in the
	// background, as the OpenSearch RFC's children do. The protocol is the
	// same either way.
	ChildBuild storage.ChildBuild
	// HoldUntilDurable keeps a split's parent fenced until the new table
	// is durable (its children synced and the table file renamed), as a
	// relocation-style handoff does (OpenSearch's primary relocation,
	// Elasticsearch's all-permits handoff): every write to the parent
	// waits for the whole handoff instead of only for the tail replay and
	// the publish. Off by default; it exists to measure the difference
	// (splitdemo findings, question 1). Merges ignore it.
	HoldUntilDurable bool
	// AlignFlush is the longest Run waits, before a split begins, for the
	// parent's store to flush its memtable on its own
	// (storage.Engine.AwaitOwnFlush), so that the split forces no flush
	// of its own inside its window. 0 (the default) does not wait. Nothing
	// is reserved or held while it waits; past it the split begins anyway
	// and flushes the parent as before. Merges and Start do not wait.
	AlignFlush time.Duration
	// SerialChildren makes a split's children one after another instead of
	// at the same time (storage.Engine.CreateChildren). Concurrent creation
	// is faster (issue 15); the simulation's swarm turns it off in half of
	// its seeds, since goroutines racing for the filesystem make a seed's
	// faults land on different operations in a rerun.
	SerialChildren bool
	// StallWait bounds, after a drain timeout at handoff while the parent
	// (a merge's source) is in Pebble's write stall, the wait for that
	// stall to end before the handoff is tried again (default 10 s). The
	// writes a stall holds cannot drain until a flush or a compaction ends
	// it, so attempts made inside it only use up Plan.MaxHandoffs. Nothing
	// is held while it waits: the parent serves, as after any timeout.
	StallWait time.Duration
	// RetryFor bounds how long Run and RunMerge go on retrying an undo or
	// a cleanup that keeps failing (default 1 minute): then they return
	// an error and leave the operation unfinished, its reservation in the
	// table, for Resume, a later Next or the next open's recovery. Next
	// itself retries for as long as it is called.
	RetryFor time.Duration
}

// Report is what a split measured.
type Report struct {
	Split      uint64 // the split (or merge) id
	Parent     routing.ShardID
	Children   []routing.ShardID // of a merge: the target
	Sources    []routing.ShardID // of a merge: the merged shards
	Phase      Phase             // the final phase: PhaseDone, PhaseAborted or PhaseFailed
	Err        error             // why it aborted or failed
	Durations  map[Phase]time.Duration
	Total      time.Duration
	Stall      time.Duration // the longest the parent's apply lock was held at handoff (writes to the parent wait for it)
	Commit     time.Duration // unfence to durable table at handoff (writes to the children wait for it; 0 with HoldUntilDurable, which unfences after it)
	Handoffs   int           // handoff attempts (drain timeouts + 1)
	CaughtUp   int           // parent operations replayed into the children
	SeqAtClone uint64        // S: the parent sequence number the children were made at
	Linked     int64         // bytes hard-linked into the children
	Copied     int64         // bytes copied into the children
	// ChildStats are the children's creations (flush, checkpoint, open,
	// excise), in creation order; Retire is the parent's retirement after
	// the handoff (close, remove), zero if it did not run.
	ChildStats  []storage.ChildStats
	Retire      storage.RetireStats
	Written     uint64 // bytes the engine wrote during the split
	DiskBefore  int64  // unique bytes on disk before
	DiskAfter   int64  // unique bytes on disk after
	FromVersion routing.Version
	ToVersion   routing.Version
	// AlignWait is how long Run waited for the parent's own flush before
	// the split began (Config.AlignFlush; not in Total); Aligned, whether
	// the flush came in time.
	AlignWait time.Duration
	Aligned   bool
	// StallWaits counts the waits, before a handoff's retry, for the write
	// stall of the parent (a merge's source) that made the drain time out,
	// and StallWaited is their total (Config.StallWait; wall-clock time,
	// unlike the durations above under a manual clock).
	StallWaits  int
	StallWaited time.Duration
}

// Driver carries out a Machine's intents against a node. It runs one split
// at a time (the journal is not safe for concurrent splits).
type Driver struct {
	n      *node.Node
	cfg    Config
	nextID uint64 // split ids without a journal
	// unfinished is the operation Run or RunMerge last gave up on (drive),
	// for Resume; what names it.
	unfinished     driven
	unfinishedWhat string
}

// NewDriver returns a driver for splits on n.
func NewDriver(n *node.Node, cfg Config) *Driver {
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = 50 * time.Millisecond
	}
	if cfg.RetireWait == 0 {
		cfg.RetireWait = 10 * time.Second
	}
	if cfg.StallWait == 0 {
		cfg.StallWait = 10 * time.Second
	}
	if cfg.RetryFor == 0 {
		cfg.RetryFor = time.Minute
	}
	if cfg.Clock == nil {
		cfg.Clock = n.Clock()
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &Driver{n: n, cfg: cfg, nextID: 1}
}

// maxSteps bounds Run: no split needs more intents than this.
const maxSteps = 10_000

// Run carries out a split to its end and reports what it measured. The
// returned error is non-nil only when the split could not reach a clean end
// (Done or Aborted); an aborted split says why in Report.Err.
func (d *Driver) Run(plan Plan) (Report, error) {
	wait, aligned := d.alignFlush(plan.Parent)
	sp := d.Start(plan)
	sp.report.AlignWait, sp.report.Aligned = wait, aligned
	return d.drive(sp, fmt.Sprintf("split of %d", plan.Parent))
}

// driven is a split or a merge as Run, RunMerge and Resume step it.
type driven interface {
	Next() (Intent, Event, error)
	Done() bool
	Phase() Phase
	Report() Report
	retrier() (*retryBackoff, *sync.Mutex)
}

func (sp *Split) retrier() (*retryBackoff, *sync.Mutex) { return &sp.retry, &sp.mu }

// drive steps op to its end; what names it in errors ("split of 3"). An
// undo or a cleanup that fails for longer than Config.RetryFor ends the
// drive with an error and leaves op unfinished, for Resume.
func (d *Driver) drive(op driven, what string) (Report, error) {
	for steps := 0; !op.Done(); steps++ {
		if steps > maxSteps {
			return op.Report(), fmt.Errorf("splitter: %s did not end in %d steps (phase %s)", what, maxSteps, op.Phase())
		}
		if _, _, err := op.Next(); err != nil {
			return op.Report(), err
		}
		b, mu := op.retrier()
		if err := b.gaveUp(d, mu); err != nil {
			d.unfinished, d.unfinishedWhat = op, what
			return op.Report(), fmt.Errorf("splitter: %s (phase %s): %w", what, op.Phase(), err)
		}
	}
	return op.Report(), nil
}

// Resume carries on the split or merge that Run or RunMerge last gave up
// on (an undo or a cleanup failing for longer than Config.RetryFor, its
// reservation still in the table), as they would, with RetryFor counted
// afresh; resumed is false when there is none. A caller that runs
// operations with Run or RunMerge takes it up this way once the cause may
// have passed: nothing else steps it before the next open's recovery, and
// the table refuses other operations on its shards meanwhile.
func (d *Driver) Resume() (rep Report, resumed bool, err error) {
	op, what := d.unfinished, d.unfinishedWhat
	if op == nil {
		return Report{}, false, nil
	}
	d.unfinished, d.unfinishedWhat = nil, ""
	b, mu := op.retrier()
	mu.Lock()
	b.restart(d.cfg.Clock.Now())
	mu.Unlock()
	rep, err = d.drive(op, what)
	return rep, true, err
}

// alignFlush waits, at most Config.AlignFlush, for parent's own flush.
// A parent that is not here is left to the reservation to refuse; a store
// that cannot say is logged and not waited for.
func (d *Driver) alignFlush(parent routing.ShardID) (time.Duration, bool) {
	if d.cfg.AlignFlush <= 0 {
		return 0, false
	}
	sh, ok := d.n.ShardStore(parent)
	if !ok {
		return 0, false
	}
	wait, aligned, err := d.n.Engine().AwaitOwnFlush(sh, d.cfg.AlignFlush)
	if err != nil {
		d.cfg.Logger.Warn("the wait for the parent's own flush failed; the split begins anyway", zap.Uint32("parent", uint32(parent)),
			zap.Duration("waited", wait), zap.Error(err))
	} else {
		d.cfg.Logger.Info("split waited for the parent's own flush", zap.Uint32("parent", uint32(parent)),
			zap.Duration("waited", wait), zap.Bool("aligned", aligned))
	}
	return wait, aligned
}

// Start begins a split that the caller advances with Next, one intent at a
// time (protocol traces and simulations do this).
func (d *Driver) Start(plan Plan) *Split {
	id := d.nextID
	if d.cfg.Journal != nil {
		id = d.cfg.Journal.NewSplitID()
	} else {
		d.nextID++
	}
	sp := &Split{d: d, m: New(id, plan), log: d.cfg.Logger.With(zap.Uint64("split", id), zap.Uint32("parent", uint32(plan.Parent)))}
	sp.report = Report{Split: id, Parent: plan.Parent, Durations: map[Phase]time.Duration{}, FromVersion: d.n.Table().Version()}
	if u, err := d.n.Engine().DiskUsage(); err == nil {
		sp.report.DiskBefore = u.Unique
	}
	sp.written = d.n.Engine().BytesWritten()
	sp.start = d.cfg.Clock.Now()
	sp.phaseStart = sp.start
	return sp
}

// Split is one split in progress. Next and Cancel may be called from
// different goroutines: a cancel waits for the intent being carried out,
// then the machine accepts or refuses it, so it never races a step. (The
// wait for the parent's write stall after a drain timeout runs at the start
// of the next step without the lock, and a cancel ends it.)
type Split struct {
	d     *Driver
	log   *zap.Logger
	stall stallGate // a drain timeout in the parent's write stall (fence)

	mu         sync.Mutex // serialises Next and Cancel; guards everything below
	retry      retryBackoff
	m          *Machine
	parent     *storage.Shard
	children   []*storage.Shard
	fence      *node.Fence
	pending    *node.PendingTable
	holdsLog   bool
	replayed   uint64 // where the last catch-up or tail round ended
	report     Report
	written    uint64
	start      time.Time
	phaseStart time.Time
	unfenced   time.Time
}

// Machine returns the split's state machine. It is not synchronised: use
// it only from the goroutine that calls Next (traces do).
func (sp *Split) Machine() *Machine { return sp.m }

// Phase returns the current phase.
func (sp *Split) Phase() Phase {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.m.Phase()
}

// Done reports whether the split has ended.
func (sp *Split) Done() bool { return sp.Phase().Terminal() }

// Fenced reports whether the split holds its parent's apply lock now (from
// a handoff's fence to its unfence; to its commit with HoldUntilDurable).
// Writes to the parent wait on that lock, so a caller that stops stepping
// the split (leaving it to recovery) must not stop while it is held.
func (sp *Split) Fenced() bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.fence != nil
}

// Next writes the journal records the machine asks for, carries out its
// next intent and feeds the outcome back. It returns the intent and its
// event; the error is non-nil when the driver cannot go on (the node
// failed, or the machine refused the event: a driver bug). On a split that
// ended cleanly (done or aborted, perhaps by a cancel the hook delivered)
// it carries out nothing and returns the zero Intent and no error.
func (sp *Split) Next() (Intent, Event, error) {
	sp.waitOutStall()
	sp.retry.wait(sp.d, &sp.mu)
	if hook := sp.d.cfg.Hook; hook != nil {
		sp.mu.Lock()
		phase, next := sp.m.Phase(), sp.m.Ready().Intent
		sp.mu.Unlock()
		hook(phase, next)
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	rd := sp.m.Ready()
	sp.m.Advance()
	if rd.Intent.Kind == 0 {
		if err := sp.d.writeJournal(rd.Journal); err != nil {
			sp.log.Warn("journal record not written", zap.Error(err))
		}
		if p := sp.m.Phase(); p == PhaseDone || p == PhaseAborted {
			// It ended cleanly, by a cancel the hook or another goroutine
			// delivered after the caller looked: nothing to carry out.
			return Intent{}, Event{}, nil
		}
		return Intent{}, Event{}, fmt.Errorf("splitter: split %d of %d has nothing to do in phase %s", sp.m.ID(), sp.m.Plan().Parent, sp.m.Phase())
	}
	from := sp.m.Phase()
	var ev Event
	if err := sp.d.checkAlone(sp.m.ID(), rd.Intent); err != nil {
		// Nothing of this split was written: it ends with an aborted record.
		ev = Event{Kind: EventFailed, Err: err}
	} else if err := sp.d.writeJournal(rd.Journal); err != nil && rd.Intent.Kind.NeedsJournal() {
		ev = Event{Kind: EventFailed, Err: fmt.Errorf("%s: %w", rd.Intent.Kind, err)}
	} else {
		if err != nil {
			sp.log.Warn("journal record not written; going on", zap.Stringer("intent", rd.Intent.Kind), zap.Error(err))
		}
		ev = sp.d.carryOut(sp, rd.Intent)
	}
	if err := sp.m.Step(ev); err != nil {
		return rd.Intent, ev, err
	}
	sp.retry.stepped(from, sp.m.Phase(), ev, sp.d.cfg.Clock.Now())
	sp.afterStep(from, ev)
	if ev.Kind == EventFailed && errors.Is(ev.Err, node.ErrFailed) {
		// The node's memory and disk disagree about the table: nothing more
		// can be done here; reopening (recovery) decides. The caller stops
		// on this error, so the fence goes first.
		sp.unfenceFailed()
		return rd.Intent, ev, fmt.Errorf("splitter: split of %d: %w", sp.m.Plan().Parent, ev.Err)
	}
	return rd.Intent, ev, nil
}

// unfenceFailed carries out the unfence a split still fenced asks for
// after its node failed (a failure before the publish aborts a fenced
// split through IntentUnfence). Next returns the node's failure as an
// error, on which its callers stop stepping (Run, the service's task): a
// fence left held then kept every writer already waiting on the parent's
// apply lock waiting for ever. The caller holds sp.mu.
func (sp *Split) unfenceFailed() {
	if sp.fence == nil {
		return
	}
	rd := sp.m.Ready()
	if rd.Intent.Kind != IntentUnfence {
		// No unfence to step through (the machine ended): release it all
		// the same.
		sp.d.release(sp)
		return
	}
	sp.m.Advance()
	if err := sp.d.writeJournal(rd.Journal); err != nil {
		sp.log.Warn("journal record not written; unfencing all the same", zap.Error(err))
	}
	from := sp.m.Phase()
	ev := sp.d.carryOut(sp, rd.Intent)
	if err := sp.m.Step(ev); err != nil {
		sp.d.release(sp)
		sp.log.Error("unfence after the node failed refused by the machine", zap.Error(err))
		return
	}
	sp.retry.stepped(from, sp.m.Phase(), ev, sp.d.cfg.Clock.Now())
	sp.afterStep(from, ev)
}

// checkAlone refuses to begin a split or merge while the journal has
// another one unfinished (one that failed its node, left for recovery):
// they run one at a time, which recovery relies on to tell a superseded
// record from an operation in flight.
func (d *Driver) checkAlone(id uint64, in Intent) error {
	j := d.cfg.Journal
	if in.Kind != IntentReserve || j == nil {
		return nil
	}
	if ids := j.Unfinished(id); len(ids) > 0 {
		return fmt.Errorf("splitter: operation %d not begun: split or merge %v is unfinished; reopen the index to recover it", id, ids)
	}
	return nil
}

// afterStep times phases, logs transitions and writes the final record of
// a split that just ended (it has no intent to carry it).
func (sp *Split) afterStep(from Phase, ev Event) {
	to := sp.m.Phase()
	if to == from {
		return
	}
	now := sp.d.cfg.Clock.Now()
	sp.report.Durations[from] += now.Sub(sp.phaseStart)
	sp.phaseStart = now
	sp.log.Info("split phase advanced", zap.Stringer("from", from), zap.Stringer("to", to), zap.Stringer("event", ev.Kind))
	if to.Terminal() {
		sp.finish()
	}
}

// finish writes the records of an ended split. A lost final record is not
// lost for good: the journal carries it into its next write.
func (sp *Split) finish() {
	rd := sp.m.Ready()
	sp.m.Advance()
	if err := sp.d.writeJournal(rd.Journal); err != nil {
		sp.log.Warn("final journal record not written; the next journal write carries it", zap.Error(err))
	}
}

// Cancel asks the split to abort. It is accepted before the handoff fences
// the parent (the split then aborts at its next step) and refused after,
// with an error saying why. An accepted cancel ends a wait for the parent's
// write stall (Interrupt): the step waiting goes on with the abort.
func (sp *Split) Cancel() error {
	sp.mu.Lock()
	from := sp.m.Phase()
	if err := sp.m.Step(Event{Kind: EventCancelRequested}); err != nil {
		sp.mu.Unlock()
		return err
	}
	sp.afterStep(from, Event{Kind: EventCancelRequested})
	sp.mu.Unlock()
	sp.Interrupt()
	return nil
}

// Interrupt ends a wait for the parent's write stall in progress (and skips
// later ones), so that a caller that steps the split from one goroutine and
// is about to cancel it, or to stop driving it, is not kept waiting by Next
// for up to Config.StallWait. It does not stop the split: the step goes on
// with the retry. An accepted Cancel interrupts.
func (sp *Split) Interrupt() { sp.stall.interrupted.raise() }

// waitOutStall carries out the wait a drain timeout in the parent's write
// stall asked for (fence); see stallGate.
func (sp *Split) waitOutStall() {
	sp.stall.wait(sp.d, sp.log, &sp.mu, func() bool { return sp.m.Ready().Intent.Kind == IntentCatchUp }, &sp.report)
}

// Report returns what the split measured so far; complete once Done.
func (sp *Split) Report() Report {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	r := sp.report
	r.Phase, r.Err = sp.m.Phase(), sp.m.Err()
	r.Children = sp.m.Children()
	r.ToVersion = sp.d.n.Table().Version()
	if r.Phase.Terminal() {
		r.Total = sp.d.cfg.Clock.Now().Sub(sp.start)
		r.Written = sp.d.n.Engine().BytesWritten() - sp.written
		if u, err := sp.d.n.Engine().DiskUsage(); err == nil {
			r.DiskAfter = u.Unique
		}
	}
	return r
}

// writeJournal writes records durably, stamped with the table version; a
// driver without a journal writes nothing.
func (d *Driver) writeJournal(records []Record) error {
	j := d.cfg.Journal
	if j == nil || (len(records) == 0 && !j.Dirty()) {
		return nil
	}
	v := d.n.Table().Version()
	for i := range records {
		records[i].Version = v
	}
	return j.Append(records...)
}

func (d *Driver) carryOut(sp *Split, in Intent) Event {
	var err error
	var ev Event
	switch in.Kind {
	case IntentReserve:
		ev, err = d.reserve(sp)
	case IntentCreateChildren:
		ev, err = d.createChildren(sp)
	case IntentCatchUp:
		ev, err = d.catchUp(sp, in.After)
	case IntentFence:
		ev, err = d.fence(sp)
	case IntentReplayTail:
		ev, err = d.replayTail(sp, in.After)
	case IntentPublish:
		ev, err = d.publish(sp)
	case IntentUnfence:
		ev, err = d.unfence(sp)
	case IntentSyncChildren:
		ev, err = d.syncChildren(sp)
	case IntentCommitTable:
		ev, err = d.commitTable(sp)
	case IntentCleanup:
		ev, err = d.cleanup(sp)
	case IntentCancel:
		ev, err = d.cancel(sp)
	default:
		err = invariants.AssertionFailedf("splitter: unknown intent %s", in.Kind)
	}
	if err != nil {
		sp.log.Warn("split step failed", zap.Stringer("intent", in.Kind), zap.Error(err))
		return Event{Kind: EventFailed, Err: fmt.Errorf("%s: %w", in.Kind, err)}
	}
	return ev
}

// reserve applies BeginSplit: the children's ids and spans are reserved,
// invisible to routing.
func (d *Driver) reserve(sp *Split) (Event, error) {
	parent, ok := d.n.ShardStore(sp.m.Plan().Parent)
	if !ok {
		return Event{}, fmt.Errorf("no shard %d on this node", sp.m.Plan().Parent)
	}
	sp.parent = parent
	t, err := d.n.Apply(sp.m.Plan().Edit())
	if err != nil {
		return Event{}, err
	}
	rec, _ := t.Split(sp.m.Plan().Parent)
	ids := make([]routing.ShardID, len(rec.Children))
	for i, c := range rec.Children {
		ids[i] = c.Shard
	}
	return Event{Kind: EventReserved, Children: ids}, nil
}

// createChildren holds the parent's operation log (INV-8: before the
// checkpoint, so every later write can be replayed), then makes every child
// from the live parent. S is the lowest sequence number any child reflects;
// replaying from there is harmless for the others (entries are applied in
// order).
func (d *Driver) createChildren(sp *Split) (Event, error) {
	rec, ok := d.n.Table().Split(sp.m.Plan().Parent)
	if !ok || !rec.InProgress {
		return Event{}, fmt.Errorf("split of %d is not reserved in table v%d", sp.m.Plan().Parent, d.n.Table().Version())
	}
	if !sp.holdsLog {
		sp.parent.HoldLog()
		sp.holdsLog = true
	}
	// The parent's compactions are wasted work from here (cancel gives them
	// back).
	d.n.Engine().HoldCompactions(sp.parent)
	specs := make([]storage.ChildSpec, len(rec.Children))
	for i, c := range rec.Children {
		if c.Shard != sp.m.children[i] {
			return Event{}, invariants.AssertionFailedf("splitter: split %d: table v%d reserves child %d, the machine %d",
				sp.m.ID(), d.n.Table().Version(), c.Shard, sp.m.children[i])
		}
		if err := d.removeLeftover(c.Shard); err != nil {
			return Event{}, err
		}
		specs[i] = storage.ChildSpec{Shard: c.Shard, Span: c.Span}
	}
	children, stats, err := d.n.Engine().CreateChildren(sp.parent, specs, d.cfg.ChildBuild, !d.cfg.SerialChildren)
	// Every child made is the split's, also when a sibling failed: the
	// cancel that follows a failure removes them with the rest.
	for _, child := range children {
		if child != nil {
			d.n.AddShard(child)
			sp.children = append(sp.children, child)
		}
	}
	if err != nil {
		return Event{}, err
	}
	seq := uint64(0)
	for i, st := range stats {
		sp.report.Linked += st.Linked
		sp.report.Copied += st.Copied
		sp.report.ChildStats = append(sp.report.ChildStats, st)
		if i == 0 || st.Seq < seq {
			seq = st.Seq
		}
	}
	sp.report.SeqAtClone = seq
	sp.replayed = seq
	return Event{Kind: EventCloned, Seq: seq}, nil
}

// replay copies the parent's writes after after into the children; a round
// must start where the previous one ended.
func (d *Driver) replay(sp *Split, after uint64) (uint64, error) {
	if after != sp.replayed {
		return 0, invariants.AssertionFailedf("splitter: split %d: replay after seq %d, but the last round ended at %d", sp.m.ID(), after, sp.replayed)
	}
	upTo, n, err := d.n.Engine().CatchUp(sp.parent, sp.children, after)
	if err != nil {
		return 0, err
	}
	if upTo < after {
		return 0, invariants.AssertionFailedf("splitter: split %d: catch-up went back from %d to %d", sp.m.ID(), after, upTo)
	}
	sp.replayed = upTo
	sp.report.CaughtUp += n
	return upTo, nil
}

func (d *Driver) catchUp(sp *Split, after uint64) (Event, error) {
	upTo, err := d.replay(sp, after)
	if err != nil {
		return Event{}, err
	}
	return Event{Kind: EventCaughtUp, Seq: upTo, Lag: sp.parent.Seq() - upTo}, nil
}

// fence takes the parent's apply lock: from here no parent write is
// applied until unfence, and every earlier one is visible. Writes in flight
// get DrainTimeout to drain; past it the handoff is retried later, after
// the parent's write stall if one held them (waitOutStall).
func (d *Driver) fence(sp *Split) (Event, error) {
	sp.report.Handoffs++
	f, err := d.n.Fence(sp.parent.ID(), d.cfg.DrainTimeout)
	if errors.Is(err, storage.ErrLockTimeout) {
		if sp.parent.WriteStalled() {
			sp.stall.on = sp.parent
		}
		return Event{Kind: EventDrainTimedOut}, nil
	}
	if err != nil {
		return Event{}, err
	}
	sp.fence = f
	return Event{Kind: EventFenced}, nil
}

// stallGate is the wait, before a handoff's retry, for the write stall
// that made its drain time out: the retry would find the same writes held
// in Pebble. The fence records the stalled shard (on, guarded by the
// operation's lock); the next step waits before it takes the lock, so that
// Phase, Report and Cancel answer meanwhile. A cancel taken during the wait
// (Interrupt) ends it, and the step carries out the abort.
type stallGate struct {
	interrupted cancelSignal   // Interrupt: ends a stall wait, skips later ones
	on          *storage.Shard // a drain timeout found it in a write stall; guarded by the operation's lock
}

// wait waits for the recorded shard's write stall to end, at most
// Config.StallWait, unless the operation's next intent (read under mu) is
// not the retry's catch-up: a cancel was taken, or the attempts ran out. A
// wait that happened is counted in r, under mu.
func (g *stallGate) wait(d *Driver, log *zap.Logger, mu *sync.Mutex, retrying func() bool, r *Report) {
	mu.Lock()
	s, retry := g.on, retrying()
	g.on = nil
	mu.Unlock()
	if s == nil || !retry {
		return
	}
	select {
	case <-g.interrupted.ch():
		return // a cancel, or the caller stops: no retry to wait for
	default:
	}
	if !s.WriteStalled() {
		return
	}
	log.Info("handoff: drain timed out with the shard's writes in a write stall; waiting for it to end before the retry",
		zap.Uint32("shard", uint32(s.ID())), zap.Duration("limit", d.cfg.StallWait))
	waited, ended := s.AwaitWriteStallEnd(d.cfg.StallWait, g.interrupted.ch())
	log.Info("handoff: write stall wait over", zap.Uint32("shard", uint32(s.ID())), zap.Duration("waited", waited), zap.Bool("ended", ended))
	mu.Lock()
	r.StallWaits++
	r.StallWaited += waited
	mu.Unlock()
}

// cancelSignal is closed once, by Interrupt (a cancel asks first): a stall
// wait in progress ends and no later one begins.
type cancelSignal struct {
	init, raised sync.Once
	c            chan struct{}
}

func (c *cancelSignal) get() chan struct{} {
	c.init.Do(func() { c.c = make(chan struct{}) })
	return c.c
}

func (c *cancelSignal) ch() <-chan struct{} { return c.get() }

func (c *cancelSignal) raise() {
	ch := c.get()
	c.raised.Do(func() { close(ch) })
}

// maxRetryDelay bounds the pause before a failed undo or cleanup is
// retried (retryBackoff).
const maxRetryDelay = time.Second

// retryBackoff spaces out the retries of an undo or a cleanup that failed
// (a cancel that cannot write the table, a retire that cannot remove a
// store): the machine retries them until they succeed, and retried at
// once, a disk full for a moment used up Run's step bound (maxSteps) in a
// fifth of a second, leaving the operation unfinished, its reservation in
// the table, until a restart. The first retry is immediate; then the
// pause doubles from a millisecond up to maxRetryDelay. It is taken at
// the start of the next step without the operation's lock, as the stall
// wait is.
type retryBackoff struct {
	// Guarded by the operation's lock:
	failed int       // consecutive failures of a retried intent
	since  time.Time // the first of them
	last   error     // the latest of them
}

// stepped counts a step that left the operation in phase to at now: a
// failure that keeps it in its phase (aborting, cleanup) is retried,
// anything else ends the run of failures.
func (b *retryBackoff) stepped(from, to Phase, ev Event, now time.Time) {
	if ev.Kind == EventFailed && from == to && !to.Terminal() {
		if b.failed == 0 {
			b.since = now
		}
		b.failed++
		b.last = ev.Err
	} else {
		b.failed, b.last = 0, nil
	}
}

// restart counts a run of failures as begun at now (Resume: RetryFor
// afresh).
func (b *retryBackoff) restart(now time.Time) {
	if b.failed > 0 {
		b.since = now
	}
}

// gaveUp returns an error once the intent has been failing for longer
// than Config.RetryFor (Run's bound).
func (b *retryBackoff) gaveUp(d *Driver, mu *sync.Mutex) error {
	mu.Lock()
	defer mu.Unlock()
	if b.failed == 0 {
		return nil
	}
	if took := d.cfg.Clock.Since(b.since); took > d.cfg.RetryFor {
		return fmt.Errorf("failing for %v (%d attempts; Config.RetryFor %v): %w", took.Round(time.Millisecond), b.failed, d.cfg.RetryFor, b.last)
	}
	return nil
}

// wait pauses before the retry of a failed intent, on the driver's clock.
func (b *retryBackoff) wait(d *Driver, mu *sync.Mutex) {
	mu.Lock()
	failed := b.failed
	mu.Unlock()
	if failed < 2 {
		return
	}
	d.cfg.Clock.Sleep(min(time.Millisecond<<min(failed-2, 10), maxRetryDelay))
}

// replayTail replays the parent's last writes under the fence (the parent's
// sequence number is final now) and raises the children's sequence numbers
// above it.
func (d *Driver) replayTail(sp *Split, after uint64) (Event, error) {
	upTo, err := d.replay(sp, after)
	if err != nil {
		return Event{}, err
	}
	if upTo != sp.parent.Seq() {
		return Event{}, invariants.AssertionFailedf("splitter: split %d: fenced tail ends at %d, the parent is at %d", sp.m.ID(), upTo, sp.parent.Seq())
	}
	for _, c := range sp.children {
		if err := c.RaiseSeq(upTo); err != nil {
			return Event{}, err
		}
	}
	return Event{Kind: EventTailReplayed, Seq: upTo}, nil
}

// publish makes CommitSplit the table requests see, in memory: writes that
// wait on the fence will find they are stale, and writes the new table
// sends to the children are acknowledged only once it is durable (node's
// durability rule, INV-9). The parent stops owning the moved keys.
func (d *Driver) publish(sp *Split) (Event, error) {
	rec, _ := d.n.Table().Split(sp.m.Plan().Parent)
	ids := make([]routing.ShardID, len(rec.Children))
	for i, c := range rec.Children {
		ids[i] = c.Shard
	}
	pending, err := d.n.Publish(routing.Edit{Kind: routing.CommitSplit, Shard: sp.parent.ID(), Children: ids})
	if err != nil {
		return Event{}, err
	}
	sp.pending = pending
	sp.parent.SetOwned(nil)
	return Event{Kind: EventPublished}, nil
}

// unfence releases the parent's apply lock; the time it was held is the
// write stall the handoff cost the parent's writers. With
// HoldUntilDurable on a published split the lock stays held until
// commitTable (or the node fails).
func (d *Driver) unfence(sp *Split) (Event, error) {
	if d.cfg.HoldUntilDurable && sp.m.published && sp.m.Phase() == PhaseHandoff {
		return Event{Kind: EventUnfenced}, nil
	}
	d.release(sp)
	return Event{Kind: EventUnfenced}, nil
}

// release releases the parent's apply lock if it is held and records how
// long it was.
func (d *Driver) release(sp *Split) {
	if sp.fence == nil {
		return
	}
	held := sp.fence.Release()
	sp.fence = nil
	sp.report.Stall = max(sp.report.Stall, held)
	sp.unfenced = d.cfg.Clock.Now()
}

// syncChildren makes the children's copies durable (they hold the tail),
// while the published table's new file is staged beside them; only
// commitTable's rename makes it the table. A failure fails the node: the
// published table cannot be taken back.
func (d *Driver) syncChildren(sp *Split) (Event, error) {
	var stageErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		stageErr = sp.pending.Stage()
	}()
	err := syncAll(sp.children)
	wg.Wait()
	if stageErr != nil {
		d.release(sp) // held with HoldUntilDurable: the node has failed
		return Event{}, stageErr
	}
	if err != nil {
		d.release(sp)
		return Event{}, sp.pending.Fail(err)
	}
	return Event{Kind: EventChildrenSynced}, nil
}

// commitTable installs the table: the commit point. A failure fails the
// node.
func (d *Driver) commitTable(sp *Split) (Event, error) {
	err := sp.pending.Install()
	if sp.fence != nil { // HoldUntilDurable: the parent waited for all of it
		d.release(sp)
	} else {
		sp.report.Commit = d.cfg.Clock.Now().Sub(sp.unfenced)
	}
	if err != nil {
		return Event{}, err
	}
	sp.pending = nil
	return Event{Kind: EventCommitted}, nil
}

// syncAll makes every shard's writes durable, concurrently.
func syncAll(shards []*storage.Shard) error {
	errs := make([]error, len(shards))
	var wg sync.WaitGroup
	for i, s := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Sync()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// cleanup retires the parent: no durable table names it any more. The
// children may now pay the compaction debt they inherited, and keep-all
// children start deleting their foreign documents in the background (the
// split does not wait for it; a crash before it ends redoes it on open).
func (d *Driver) cleanup(sp *Split) (Event, error) {
	for _, c := range sp.children {
		c.ReleaseCompactions()
		if _, err := d.n.Engine().StartForeignCleanup(c); err != nil && !errors.Is(err, storage.ErrShardClosed) {
			return Event{}, fmt.Errorf("start foreign cleanup of child %d: %w", c.ID(), err)
		}
	}
	if err := d.releaseLog(sp); err != nil && !errors.Is(err, storage.ErrShardClosed) {
		return Event{}, err
	}
	if err := d.n.Retire(sp.parent.ID(), d.cfg.RetireWait); err != nil {
		return Event{}, err
	}
	if rs, ok := d.n.Engine().TakeRetireStats(sp.parent.ID()); ok {
		sp.report.Retire = rs
	}
	return Event{Kind: EventCleanedUp}, nil
}

// cancel undoes the split: the parent's log is released, the children are
// deleted and the reservation forgotten. The table routes exactly as before
// and the parent never stopped serving. Every part is idempotent: a failed
// cancel is retried.
func (d *Driver) cancel(sp *Split) (Event, error) {
	if err := d.releaseLog(sp); err != nil {
		return Event{}, err
	}
	if sp.parent != nil {
		sp.parent.ReleaseCompactions()
	}
	for len(sp.children) > 0 {
		if err := d.n.Retire(sp.children[0].ID(), d.cfg.RetireWait); err != nil {
			return Event{}, err
		}
		sp.children = sp.children[1:]
	}
	if rec, ok := d.n.Table().Split(sp.m.Plan().Parent); ok && rec.InProgress {
		if _, err := d.n.Apply(routing.Edit{Kind: routing.CancelSplit, Shard: sp.m.Plan().Parent}); err != nil {
			return Event{}, err
		}
	}
	return Event{Kind: EventCancelled}, nil
}

// removeLeftover removes the store directory of a shard id the table has
// just reserved, if one exists and the node has no shard by that id: it
// can only be what a creation that failed half-way and could not clean up
// (the disk failing again under the cleanup) left behind. Without this the
// id stays poisoned, and every split or merge that reserves it fails with
// "already exists", until a restart's recovery removes orphan stores.
func (d *Driver) removeLeftover(id routing.ShardID) error {
	if _, ok := d.n.ShardStore(id); ok {
		return nil
	}
	dirs, err := d.n.Engine().ShardDirs()
	if err != nil {
		return fmt.Errorf("list shard stores: %w", err)
	}
	if !slices.Contains(dirs, id) {
		return nil
	}
	d.cfg.Logger.Warn("removing the store a failed creation left behind", zap.Uint32("shard", uint32(id)))
	if err := d.n.Engine().DestroyShard(id); err != nil {
		return fmt.Errorf("remove the store left behind by shard %d: %w", id, err)
	}
	return nil
}

// releaseLog releases the parent's log hold if this split has it.
func (d *Driver) releaseLog(sp *Split) error {
	if !sp.holdsLog {
		return nil
	}
	if err := sp.parent.ReleaseLog(); err != nil {
		return err
	}
	sp.holdsLog = false
	return nil
}

// SortedChildren returns the report's children in ascending order (helper
// for printing).
func (r Report) SortedChildren() []routing.ShardID {
	c := slices.Clone(r.Children)
	slices.Sort(c)
	return c
}
