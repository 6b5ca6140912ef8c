package splitter

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

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
	// Clock reads the time for measurements (default time.Now).
	Clock func() time.Time
	// Logger receives phase transitions (default: none).
	Logger *zap.Logger
	// Hook, if set, runs before each intent is carried out; a test uses it
	// to deliver requests between steps or to inject a cancel.
	Hook func(m *Machine, in Intent)
	// Journal, if set, records every phase transition durably before its
	// effects (crash safety; see package recovery).
	Journal *Journal
}

// Report is what a split measured.
type Report struct {
	Parent      routing.ShardID
	Children    []routing.ShardID
	Phase       Phase // the final phase: PhaseDone or PhaseAborted
	Err         error // why it aborted
	Durations   map[Phase]time.Duration
	Total       time.Duration
	Stall       time.Duration // the longest the parent's apply lock was held at handoff (writes to the parent wait for it)
	Commit      time.Duration // publish to durable table at handoff (writes to the children wait for it)
	Handoffs    int           // handoff attempts (drain timeouts + 1)
	CaughtUp    int           // parent operations replayed into the children
	SeqAtClone  uint64        // S: the parent sequence number the children were made at
	Linked      int64         // bytes hard-linked into the children
	Copied      int64         // bytes copied into the children
	Written     uint64        // bytes the engine wrote during the split
	DiskBefore  int64         // unique bytes on disk before
	DiskAfter   int64         // unique bytes on disk after
	FromVersion routing.Version
	ToVersion   routing.Version
}

// Driver carries out a Machine's intents against a node.
type Driver struct {
	n   *node.Node
	cfg Config
}

// NewDriver returns a driver for splits on n.
func NewDriver(n *node.Node, cfg Config) *Driver {
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = 50 * time.Millisecond
	}
	if cfg.RetireWait == 0 {
		cfg.RetireWait = 10 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &Driver{n: n, cfg: cfg}
}

// Run carries out a split to its end and reports what it measured. The
// returned error is non-nil only when the split could not reach a clean end
// (Done or Aborted); an aborted split says why in Report.Err.
func (d *Driver) Run(plan Plan) (Report, error) {
	r := d.Start(plan)
	for steps := 0; !r.Done(); steps++ {
		if steps > 10_000 {
			return r.Report(), fmt.Errorf("splitter: split of %d did not end in 10000 steps (phase %s)", plan.Parent, r.m.Phase())
		}
		if _, _, err := r.Step(); err != nil {
			return r.Report(), err
		}
	}
	return r.Report(), nil
}

// Start begins a split that the caller advances with Step, one intent at a
// time (protocol traces and simulations do this).
func (d *Driver) Start(plan Plan) *Split {
	sp := &Split{d: d, m: New(plan), log: d.cfg.Logger.With(zap.Uint32("parent", uint32(plan.Parent)))}
	if d.cfg.Journal != nil {
		sp.id = d.cfg.Journal.NewSplitID()
		sp.log = sp.log.With(zap.Uint64("split", sp.id))
	}
	sp.report = Report{Parent: plan.Parent, Durations: map[Phase]time.Duration{}, FromVersion: d.n.Table().Version()}
	if u, err := d.n.Engine().DiskUsage(); err == nil {
		sp.report.DiskBefore = u.Unique
	}
	sp.written = d.n.Engine().BytesWritten()
	sp.start = d.cfg.Clock()
	sp.phaseStart = sp.start
	return sp
}

// Split is one split in progress.
type Split struct {
	id         uint64 // split id in the journal
	d          *Driver
	m          *Machine
	log        *zap.Logger
	parent     *storage.Shard
	children   []*storage.Shard
	report     Report
	holdsLog   bool
	pending    []Intent
	written    uint64
	start      time.Time
	phaseStart time.Time
}

// Machine returns the split's state machine.
func (sp *Split) Machine() *Machine { return sp.m }

// Done reports whether the split has ended.
func (sp *Split) Done() bool { return sp.m.Phase().Terminal() }

// Step carries out the next intent and feeds its outcome to the machine.
func (sp *Split) Step() (Intent, Event, error) {
	if len(sp.pending) == 0 {
		sp.pending = sp.m.Ready()
		sp.m.Advance()
	}
	if len(sp.pending) == 0 {
		return Intent{}, Event{}, fmt.Errorf("splitter: split of %d stuck in phase %s with nothing to do", sp.m.Plan().Parent, sp.m.Phase())
	}
	in := sp.pending[0]
	sp.pending = sp.pending[1:]
	if sp.d.cfg.Hook != nil {
		sp.d.cfg.Hook(sp.m, in)
	}
	from := sp.m.Phase()
	ev := sp.d.execute(sp, in)
	if ev.Kind == EventFailed && errors.Is(ev.Err, node.ErrFailed) {
		// The node's memory and disk disagree about the table: nothing more
		// can be done here; reopening (recovery) decides.
		return in, ev, fmt.Errorf("splitter: split of %d: %w", sp.m.Plan().Parent, ev.Err)
	}
	if err := sp.m.Step(ev); err != nil {
		return in, ev, err
	}
	if to := sp.m.Phase(); to != from {
		now := sp.d.cfg.Clock()
		sp.report.Durations[from] += now.Sub(sp.phaseStart)
		sp.phaseStart = now
		sp.log.Info("split phase advanced", zap.Stringer("from", from), zap.Stringer("to", to), zap.Stringer("event", ev.Kind))
	}
	return in, ev, nil
}

// Cancel asks the split to abort (refused once it has published).
func (sp *Split) Cancel() error {
	if err := sp.m.Step(Event{Kind: EventCancelRequested}); err != nil {
		return err
	}
	sp.pending = nil
	return nil
}

// Report returns what the split measured so far; complete once Done.
func (sp *Split) Report() Report {
	r := sp.report
	r.Phase, r.Err = sp.m.Phase(), sp.m.Err()
	r.Children = sp.m.Children()
	r.ToVersion = sp.d.n.Table().Version()
	if r.Phase.Terminal() {
		r.Total = sp.d.cfg.Clock().Sub(sp.start)
		r.Written = sp.d.n.Engine().BytesWritten() - sp.written
		if u, err := sp.d.n.Engine().DiskUsage(); err == nil {
			r.DiskAfter = u.Unique
		}
	}
	return r
}

// journal records a step durably; without a journal it does nothing.
func (d *Driver) journal(sp *Split, step Step) error {
	if d.cfg.Journal == nil {
		return nil
	}
	return d.cfg.Journal.Append(Record{Split: sp.id, Step: step, Parent: sp.m.Plan().Parent,
		Version: d.n.Table().Version(), Children: sp.m.Children()})
}

// stepBefore is the journal record an intent needs before its effects.
var stepBefore = map[IntentKind]Step{
	IntentReserve: StepBegin, IntentCreateChildren: StepReserved, IntentHandoff: StepHandoff, IntentCancel: StepAborting,
}

// stepAfter is the journal record an outcome needs before the next effects.
var stepAfter = map[EventKind]Step{EventPublished: StepPublished, EventCleanedUp: StepDone, EventCancelled: StepAborted}

// execute carries out one intent and reports its outcome as an event. The
// journal record of the transition is written (and synced) first; if that
// fails the intent is not carried out. Cancelling proceeds even when its
// record cannot be written: recovery would roll the split back anyway.
func (d *Driver) execute(sp *Split, in Intent) Event {
	if step, ok := stepBefore[in.Kind]; ok {
		if err := d.journal(sp, step); err != nil && in.Kind != IntentCancel {
			return Event{Kind: EventFailed, Err: fmt.Errorf("%s: %w", in.Kind, err)}
		}
	}
	ev := d.carryOut(sp, in)
	if step, ok := stepAfter[ev.Kind]; ok {
		if err := d.journal(sp, step); err != nil {
			// The effect happened; recovery decides from the table (the
			// commit point) and what is on disk, so it is safe to go on.
			sp.log.Warn("journal record not written", zap.Stringer("step", step), zap.Error(err))
		}
	}
	return ev
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
	case IntentHandoff:
		ev, err = d.handoff(sp, in.After)
	case IntentCleanup:
		ev, err = d.cleanup(sp)
	case IntentCancel:
		ev, err = d.cancel(sp)
	default:
		err = fmt.Errorf("splitter: unknown intent %s", in.Kind)
	}
	if err != nil {
		sp.log.Warn("split step failed", zap.Stringer("intent", in.Kind), zap.Error(err))
		return Event{Kind: EventFailed, Err: fmt.Errorf("%s: %w", in.Kind, err)}
	}
	return ev
}

// reserve applies BeginSplit and holds the parent's operation log, so that
// every write from now on can be replayed into the children.
func (d *Driver) reserve(sp *Split) (Event, error) {
	parent, ok := d.n.ShardStore(sp.m.Plan().Parent)
	if !ok {
		return Event{}, fmt.Errorf("no shard %d on this node", sp.m.Plan().Parent)
	}
	sp.parent = parent
	parent.HoldLog()
	sp.holdsLog = true
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

// createChildren makes every child from the live parent. S is the lowest
// sequence number any child reflects; replaying from there is harmless for
// the others (entries are applied in order).
func (d *Driver) createChildren(sp *Split) (Event, error) {
	rec, ok := d.n.Table().Split(sp.m.Plan().Parent)
	if !ok {
		return Event{}, fmt.Errorf("split of %d is not reserved in table v%d", sp.m.Plan().Parent, d.n.Table().Version())
	}
	seq := uint64(0)
	for i, c := range rec.Children {
		child, stats, err := d.n.Engine().CreateChild(sp.parent, c.Shard, c.Span)
		if err != nil {
			return Event{}, err
		}
		d.n.AddShard(child)
		sp.children = append(sp.children, child)
		sp.report.Linked += stats.Linked
		sp.report.Copied += stats.Copied
		if i == 0 || stats.Seq < seq {
			seq = stats.Seq
		}
	}
	sp.report.SeqAtClone = seq
	return Event{Kind: EventCloned, Seq: seq}, nil
}

func (d *Driver) catchUp(sp *Split, after uint64) (Event, error) {
	upTo, n, err := d.n.Engine().CatchUp(sp.parent, sp.children, after)
	if err != nil {
		return Event{}, err
	}
	sp.report.CaughtUp += n
	return Event{Kind: EventCaughtUp, Seq: upTo, Lag: sp.parent.Seq() - upTo}, nil
}

// handoff is the cutover. Holding the parent's apply lock (so no parent
// write is applied meanwhile and every earlier one is visible), it replays
// the tail, raises the children's sequence numbers above the parent's and
// publishes CommitSplit; writes that arrive meanwhile wait on the lock and
// then find they are stale. The lock is then released and the table made
// durable: the children are synced first (they hold the tail), then the
// table is persisted (the commit point). Writes the new table sends to the
// children are applied at once but acknowledged only after that (node's
// durability rule), so the stall is the lock, not the fsyncs.
func (d *Driver) handoff(sp *Split, after uint64) (Event, error) {
	sp.report.Handoffs++
	rec, _ := d.n.Table().Split(sp.m.Plan().Parent)
	var pending *node.PendingTable
	held, err := d.n.HoldApplyLock(sp.parent.ID(), d.cfg.DrainTimeout, func() error {
		upTo, n, err := d.n.Engine().CatchUp(sp.parent, sp.children, after)
		if err != nil {
			return err
		}
		sp.report.CaughtUp += n
		for _, c := range sp.children {
			c.RaiseSeq(upTo)
		}
		ids := make([]routing.ShardID, len(rec.Children))
		for i, c := range rec.Children {
			ids[i] = c.Shard
		}
		pending, err = d.n.Publish(routing.Edit{Kind: routing.CommitSplit, Shard: sp.parent.ID(), Children: ids})
		if err != nil {
			return err
		}
		sp.parent.SetOwned(nil)
		return nil
	})
	sp.report.Stall = max(sp.report.Stall, held)
	if errors.Is(err, storage.ErrLockTimeout) {
		return Event{Kind: EventDrainTimedOut}, nil
	}
	if err != nil {
		return Event{}, err
	}
	start := d.cfg.Clock()
	err = pending.Commit(func() error { return syncAll(sp.children) })
	sp.report.Commit = d.cfg.Clock().Sub(start)
	if err != nil {
		return Event{}, err
	}
	return Event{Kind: EventPublished}, nil
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

// cleanup drops the parent: no published table names it any more. The
// children may now pay the compaction debt they inherited.
func (d *Driver) cleanup(sp *Split) (Event, error) {
	for _, c := range sp.children {
		c.ReleaseCompactions()
	}
	if sp.holdsLog {
		if err := sp.parent.ReleaseLog(); err != nil && !errors.Is(err, storage.ErrShardClosed) {
			return Event{}, err
		}
		sp.holdsLog = false
	}
	if err := d.n.Retire(sp.parent.ID(), d.cfg.RetireWait); err != nil {
		return Event{}, err
	}
	return Event{Kind: EventCleanedUp}, nil
}

// cancel deletes the children and forgets the reservation: the table routes
// exactly as before the split and the parent never stopped serving.
func (d *Driver) cancel(sp *Split) (Event, error) {
	for _, c := range sp.children {
		if err := d.n.Retire(c.ID(), d.cfg.RetireWait); err != nil {
			return Event{}, err
		}
	}
	sp.children = nil
	if rec, ok := d.n.Table().Split(sp.m.Plan().Parent); ok && rec.InProgress {
		if _, err := d.n.Apply(routing.Edit{Kind: routing.CancelSplit, Shard: sp.m.Plan().Parent}); err != nil {
			return Event{}, err
		}
	}
	if sp.holdsLog {
		if err := sp.parent.ReleaseLog(); err != nil {
			return Event{}, err
		}
		sp.holdsLog = false
	}
	return Event{Kind: EventCancelled}, nil
}

// Children returns the report's children in ascending order (helper for
// printing).
func (r Report) SortedChildren() []routing.ShardID {
	c := slices.Clone(r.Children)
	slices.Sort(c)
	return c
}
