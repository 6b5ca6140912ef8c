package splitter

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// Config bounds the driver.
type Config struct {
	// DrainTimeout bounds the wait for writes in flight on each source at
	// handoff (default 50 ms). Past it the handoff is abandoned and retried.
	DrainTimeout time.Duration
	// RetireWait bounds the wait for readers of a shard before its data is
	// dropped (default 10 s): a source after the commit, a target after an
	// abort.
	RetireWait time.Duration
	// Clock reads the time for measurements (default: the node's clock).
	Clock clock.Clock
	// Logger receives phase transitions (default: none).
	Logger *zap.Logger
	// Hook, if set, runs before each intent is taken, with the phase and the
	// intent that is next; a test uses it to deliver requests between steps
	// or to cancel (Operation.Cancel), in which case the cancel's intent is
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
	// HoldUntilDurable keeps the sources fenced until the new table is
	// durable (the targets synced and the table file renamed), as a
	// relocation-style handoff does (OpenSearch's primary relocation,
	// Elasticsearch's all-permits handoff): every write to a source waits
	// for the whole handoff instead of only for the tail replay and the
	// publish. Off by default; it exists to measure the difference
	// (splitdemo findings, question 1).
	HoldUntilDurable bool
	// AlignFlush is the longest Run waits, before a split begins, for the
	// parent's store to flush its memtable on its own
	// (storage.Engine.AwaitOwnFlush), so that the children find almost
	// every write in the parent's tables and take almost none from its
	// retained history (and, when the history cannot stand in for the
	// memtables, the split forces no flush inside its window). 0 (the
	// default) does not wait. Nothing is reserved or held while it waits;
	// past it the split begins anyway. Merges and Start do not wait.
	AlignFlush time.Duration
	// SerialChildren makes a split's children one after another instead of
	// at the same time (storage.Engine.CreateChildren). Concurrent creation
	// is faster; the simulation's swarm turns it off in half of its seeds,
	// since goroutines racing for the filesystem make a seed's faults land
	// on different operations in a rerun.
	SerialChildren bool
	// StallWait bounds, after a drain timeout at handoff while a source is
	// in Pebble's write stall, the wait for that stall to end before the
	// handoff is tried again (default 10 s). The writes a stall holds
	// cannot drain until a flush or a compaction ends it, so attempts made
	// inside it only use up Plan.MaxHandoffs. Nothing is held while it
	// waits: the sources serve, as after any timeout.
	StallWait time.Duration
	// RetryFor bounds how long Run goes on retrying an undo or a cleanup
	// that keeps failing (default 1 minute): then it returns an error and
	// leaves the operation unfinished, its reservation in the table, for
	// Resume, a later Next or the next open's recovery. Next itself
	// retries for as long as it is called.
	RetryFor time.Duration
}

// Report is what a split or a merge measured.
type Report struct {
	ID      uint64 // the operation id
	Kind    Kind
	Sources []routing.ShardID // a split's parent, a merge's sources
	Targets []routing.ShardID // a split's children, a merge's target (none before the reservation)
	Phase   Phase             // the final phase: PhaseDone, PhaseAborted or PhaseFailed
	Err     error             // why it aborted or failed
	// Durations is the time spent in each phase.
	Durations map[Phase]time.Duration
	Total     time.Duration
	Stall     time.Duration // the longest a source's apply lock was held at handoff (writes to it wait for it)
	Commit    time.Duration // unfence to durable table at handoff (writes to the targets wait for it; 0 with HoldUntilDurable, which unfences after it)
	Handoffs  int           // handoff attempts (drain timeouts + 1)
	CaughtUp  int           // source operations replayed into the targets
	// SeqAtClone is S, the lowest sequence number a source was read at when
	// the targets were made.
	SeqAtClone uint64
	Linked     int64 // bytes hard-linked into the targets
	Copied     int64 // bytes copied into the targets
	// ChildStats are a split's children's creations (flush, checkpoint,
	// open, excise), in creation order; Retire is the sources' retirement
	// after the handoff (close, remove; summed), zero if it did not run.
	ChildStats  []storage.ChildStats
	Retire      storage.RetireStats
	Written     uint64 // bytes the engine wrote during the operation
	DiskBefore  int64  // unique bytes on disk before
	DiskAfter   int64  // unique bytes on disk after
	FromVersion routing.Version
	ToVersion   routing.Version
	// AlignWait is how long Run waited for a split's parent's own flush
	// before the split began (Config.AlignFlush; not in Total); Aligned,
	// whether the flush came in time.
	AlignWait time.Duration
	Aligned   bool
	// StallWaits counts the waits, before a handoff's retry, for the write
	// stall of the source that made the drain time out, and StallWaited is
	// their total (Config.StallWait; wall-clock time, unlike the durations
	// above under a manual clock).
	StallWaits  int
	StallWaited time.Duration
}

// SortedTargets returns the report's targets in ascending order.
func (r Report) SortedTargets() []routing.ShardID {
	c := slices.Clone(r.Targets)
	slices.Sort(c)
	return c
}

// Driver carries out the intents of splits and merges against a node, one
// operation at a time: an operation that would begin while the journal has
// another unfinished is refused at its reservation (UnfinishedError).
// Start and Next may be called from different goroutines for different
// operations (a request the driver refuses runs beside the operation it
// waits for).
type Driver struct {
	n   *node.Node
	cfg Config

	mu     sync.Mutex
	nextID uint64 // operation ids without a journal
	// unfinished is the operation Run last gave up on (drive), for Resume.
	unfinished *Operation
}

// NewDriver returns a driver for splits and merges on n.
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

// maxSteps bounds Run: no operation needs more intents than this.
const maxSteps = 10_000

// Run carries out a split or a merge to its end and reports what it
// measured. The returned error is non-nil only when the operation could
// not reach a clean end (Done or Aborted); an aborted one says why in
// Report.Err. A split first waits, at most Config.AlignFlush, for its
// parent's own flush.
func (d *Driver) Run(plan Plan) (Report, error) {
	var wait time.Duration
	var aligned bool
	if plan.Kind == KindSplit {
		wait, aligned = d.alignFlush(plan.Parent())
	}
	o := d.Start(plan)
	o.report.AlignWait, o.report.Aligned = wait, aligned
	return d.drive(o)
}

// drive steps o to its end. An undo or a cleanup that fails for longer
// than Config.RetryFor ends the drive with an error and leaves o
// unfinished, for Resume.
func (d *Driver) drive(o *Operation) (Report, error) {
	what := o.m.Plan().String()
	for steps := 0; !o.Done(); steps++ {
		if steps > maxSteps {
			return o.Report(), fmt.Errorf("splitter: %s did not end in %d steps (phase %s)", what, maxSteps, o.Phase())
		}
		if _, _, err := o.Next(); err != nil {
			return o.Report(), err
		}
		if err := o.retry.gaveUp(d, &o.mu); err != nil {
			d.mu.Lock()
			d.unfinished = o
			d.mu.Unlock()
			return o.Report(), fmt.Errorf("splitter: %s (phase %s): %w", what, o.Phase(), err)
		}
	}
	return o.Report(), nil
}

// Resume carries on the operation that Run last gave up on (an undo or a
// cleanup failing for longer than Config.RetryFor, its reservation still
// in the table), as Run would, with RetryFor counted afresh; resumed is
// false when there is none. A caller that runs operations with Run takes
// it up this way once the cause may have passed: nothing else steps it
// before the next open's recovery, and the table refuses other operations
// on its shards meanwhile.
func (d *Driver) Resume() (rep Report, resumed bool, err error) {
	d.mu.Lock()
	o := d.unfinished
	d.unfinished = nil
	d.mu.Unlock()
	if o == nil {
		return Report{}, false, nil
	}
	o.mu.Lock()
	o.retry.restart(d.cfg.Clock.Now())
	o.mu.Unlock()
	rep, err = d.drive(o)
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

// Start begins a split or a merge that the caller advances with Next, one
// intent at a time (protocol traces, simulations and the service's tasks
// do this). Splits and merges share the journal's id sequence.
func (d *Driver) Start(plan Plan) *Operation {
	id := d.newID()
	m := New(id, plan)
	o := &Operation{d: d, m: m, parts: partsOf(plan.Kind),
		log: d.cfg.Logger.With(zap.Stringer("kind", plan.Kind), zap.Uint64("op", id), zap.Any("sources", m.Plan().Sources))}
	o.report = Report{ID: id, Kind: plan.Kind, Sources: m.Plan().Sources, Durations: map[Phase]time.Duration{}, FromVersion: d.n.Table().Version()}
	if u, err := d.n.Engine().DiskUsage(); err == nil {
		o.report.DiskBefore = u.Unique
	}
	o.written = d.n.Engine().BytesWritten()
	o.start = d.cfg.Clock.Now()
	o.phaseStart = o.start
	return o
}

// newID hands out the next operation id: the journal's, or the driver's
// own without one.
func (d *Driver) newID() uint64 {
	if j := d.cfg.Journal; j != nil {
		return j.NewID()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	id := d.nextID
	d.nextID++
	return id
}

// UnfinishedError refuses to begin an operation while the journal has
// another one unfinished.
type UnfinishedError struct {
	ID         uint64   // the operation refused
	Unfinished []uint64 // the operations the journal has unfinished
}

func (e *UnfinishedError) Error() string {
	return fmt.Sprintf("splitter: operation %d not begun: split or merge %v is unfinished; reopen the index to recover it", e.ID, e.Unfinished)
}

// checkBegin refuses, before its begin record is written, an operation
// that cannot begin: one whose plan is not of its kind's shape (the
// journal could not record it), or one that would run beside another the
// journal has unfinished (one running, or one that failed its node, left
// for recovery): operations run one at a time, which recovery relies on to
// tell a superseded record from an operation in flight. A plan the table
// refuses anyway is refused in the table's words, which name the shards.
func (d *Driver) checkBegin(o *Operation, in Intent) error {
	if in.Kind != IntentReserve {
		return nil
	}
	plan := o.m.Plan()
	err := o.parts.check(plan)
	if j := d.cfg.Journal; err == nil && j != nil {
		if ids := j.Unfinished(o.m.ID()); len(ids) > 0 {
			err = &UnfinishedError{ID: o.m.ID(), Unfinished: ids}
		}
	}
	if err == nil {
		return nil
	}
	if _, terr := routing.Apply(d.n.Table(), plan.Edit()); terr != nil {
		return terr
	}
	return err
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
