package splitter

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/internal/invariants"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// RunMerge carries out a merge to its end and reports what it measured,
// as Run does for a split. Report.Sources are the merged shards and
// Report.Children the target.
func (d *Driver) RunMerge(plan MergePlan) (Report, error) {
	return d.drive(d.StartMerge(plan), fmt.Sprintf("merge of %v", plan.Sources))
}

func (mg *Merge) retrier() (*retryBackoff, *sync.Mutex) { return &mg.retry, &mg.mu }

// StartMerge begins a merge that the caller advances with Next, one intent
// at a time. Merges and splits share the journal's id sequence and run one
// at a time.
func (d *Driver) StartMerge(plan MergePlan) *Merge {
	id := d.nextID
	if d.cfg.Journal != nil {
		id = d.cfg.Journal.NewSplitID()
	} else {
		d.nextID++
	}
	m := NewMerge(id, plan)
	mg := &Merge{d: d, m: m, log: d.cfg.Logger.With(zap.Uint64("merge", id), zap.Any("sources", m.Plan().Sources))}
	mg.report = Report{Split: id, Sources: m.Plan().Sources, Durations: map[Phase]time.Duration{}, FromVersion: d.n.Table().Version()}
	if u, err := d.n.Engine().DiskUsage(); err == nil {
		mg.report.DiskBefore = u.Unique
	}
	mg.written = d.n.Engine().BytesWritten()
	mg.start = d.cfg.Clock.Now()
	mg.phaseStart = mg.start
	return mg
}

// Merge is one merge in progress; see Split for the concurrency contract.
type Merge struct {
	d     *Driver
	log   *zap.Logger
	stall stallGate // a drain timeout in a source's write stall (fence)

	mu         sync.Mutex
	retry      retryBackoff
	m          *MergeMachine
	sources    []*storage.Shard // plan order (ascending ids)
	target     *storage.Shard
	fences     []*node.Fence
	pending    *node.PendingTable
	holdsLog   []bool
	replayed   []uint64 // per source: where its last catch-up or tail round ended
	report     Report
	written    uint64
	start      time.Time
	phaseStart time.Time
	unfenced   time.Time
}

// Machine returns the merge's state machine (not synchronised; see Split.Machine).
func (mg *Merge) Machine() *MergeMachine { return mg.m }

// Phase returns the current phase.
func (mg *Merge) Phase() Phase {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	return mg.m.Phase()
}

// Done reports whether the merge has ended.
func (mg *Merge) Done() bool { return mg.Phase().Terminal() }

// Fenced reports whether the merge holds its sources' apply locks now, as
// Split.Fenced.
func (mg *Merge) Fenced() bool {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	return len(mg.fences) > 0
}

// Next writes the journal records the machine asks for, carries out its
// next intent and feeds the outcome back, as Split.Next.
func (mg *Merge) Next() (Intent, Event, error) {
	mg.waitOutStall()
	mg.retry.wait(mg.d, &mg.mu)
	if hook := mg.d.cfg.Hook; hook != nil {
		mg.mu.Lock()
		phase, next := mg.m.Phase(), mg.m.Ready().Intent
		mg.mu.Unlock()
		hook(phase, next)
	}
	mg.mu.Lock()
	defer mg.mu.Unlock()
	rd := mg.m.Ready()
	mg.m.Advance()
	if rd.Intent.Kind == 0 {
		if err := mg.d.writeJournal(rd.Journal); err != nil {
			mg.log.Warn("journal record not written", zap.Error(err))
		}
		if p := mg.m.Phase(); p == PhaseDone || p == PhaseAborted {
			// It ended cleanly, by a cancel the hook or another goroutine
			// delivered after the caller looked: nothing to carry out.
			return Intent{}, Event{}, nil
		}
		return Intent{}, Event{}, fmt.Errorf("splitter: merge %d of %v has nothing to do in phase %s", mg.m.ID(), mg.m.Plan().Sources, mg.m.Phase())
	}
	from := mg.m.Phase()
	var ev Event
	if err := mg.d.checkAlone(mg.m.ID(), rd.Intent); err != nil {
		ev = Event{Kind: EventFailed, Err: err}
	} else if err := mg.d.writeJournal(rd.Journal); err != nil && rd.Intent.Kind.NeedsJournal() {
		ev = Event{Kind: EventFailed, Err: fmt.Errorf("%s: %w", rd.Intent.Kind, err)}
	} else {
		if err != nil {
			mg.log.Warn("journal record not written; going on", zap.Stringer("intent", rd.Intent.Kind), zap.Error(err))
		}
		ev = mg.carryOut(rd.Intent)
	}
	if err := mg.m.Step(ev); err != nil {
		return rd.Intent, ev, err
	}
	mg.retry.stepped(from, mg.m.Phase(), ev, mg.d.cfg.Clock.Now())
	mg.afterStep(from, ev)
	if ev.Kind == EventFailed && errors.Is(ev.Err, node.ErrFailed) {
		mg.unfenceFailed() // the caller stops on this error (Split.unfenceFailed)
		return rd.Intent, ev, fmt.Errorf("splitter: merge of %v: %w", mg.m.Plan().Sources, ev.Err)
	}
	return rd.Intent, ev, nil
}

// unfenceFailed carries out the unfence a merge still fenced asks for
// after its node failed, as Split.unfenceFailed: the sources' writers must
// not wait for ever on the locks of a merge its caller stopped stepping.
// The caller holds mg.mu.
func (mg *Merge) unfenceFailed() {
	if len(mg.fences) == 0 {
		return
	}
	rd := mg.m.Ready()
	if rd.Intent.Kind != IntentUnfence {
		_, _ = mg.unfence()
		return
	}
	mg.m.Advance()
	if err := mg.d.writeJournal(rd.Journal); err != nil {
		mg.log.Warn("journal record not written; unfencing all the same", zap.Error(err))
	}
	from := mg.m.Phase()
	ev := mg.carryOut(rd.Intent)
	if err := mg.m.Step(ev); err != nil {
		_, _ = mg.unfence()
		mg.log.Error("unfence after the node failed refused by the machine", zap.Error(err))
		return
	}
	mg.retry.stepped(from, mg.m.Phase(), ev, mg.d.cfg.Clock.Now())
	mg.afterStep(from, ev)
}

func (mg *Merge) afterStep(from Phase, ev Event) {
	to := mg.m.Phase()
	if to == from {
		return
	}
	now := mg.d.cfg.Clock.Now()
	mg.report.Durations[from] += now.Sub(mg.phaseStart)
	mg.phaseStart = now
	mg.log.Info("merge phase advanced", zap.Stringer("from", from), zap.Stringer("to", to), zap.Stringer("event", ev.Kind))
	if to.Terminal() {
		rd := mg.m.Ready()
		mg.m.Advance()
		if err := mg.d.writeJournal(rd.Journal); err != nil {
			mg.log.Warn("final journal record not written; the next journal write carries it", zap.Error(err))
		}
	}
}

// Cancel asks the merge to abort: accepted before the handoff fences the
// sources, refused after.
func (mg *Merge) Cancel() error {
	mg.mu.Lock()
	from := mg.m.Phase()
	if err := mg.m.Step(Event{Kind: EventCancelRequested}); err != nil {
		mg.mu.Unlock()
		return err
	}
	mg.afterStep(from, Event{Kind: EventCancelRequested})
	mg.mu.Unlock()
	mg.Interrupt()
	return nil
}

// Interrupt ends a wait for a source's write stall in progress (and skips
// later ones), as Split.Interrupt.
func (mg *Merge) Interrupt() { mg.stall.interrupted.raise() }

// waitOutStall waits out the write stall a drain timeout found on a source
// (fence); see stallGate.
func (mg *Merge) waitOutStall() {
	mg.stall.wait(mg.d, mg.log, &mg.mu, func() bool { return mg.m.Ready().Intent.Kind == IntentCatchUp }, &mg.report)
}

// Report returns what the merge measured so far; complete once Done.
func (mg *Merge) Report() Report {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	r := mg.report
	r.Phase, r.Err = mg.m.Phase(), mg.m.Err()
	if t := mg.m.Target(); t != 0 {
		r.Children = []routing.ShardID{t}
	}
	r.ToVersion = mg.d.n.Table().Version()
	if r.Phase.Terminal() {
		r.Total = mg.d.cfg.Clock.Now().Sub(mg.start)
		r.Written = mg.d.n.Engine().BytesWritten() - mg.written
		if u, err := mg.d.n.Engine().DiskUsage(); err == nil {
			r.DiskAfter = u.Unique
		}
	}
	return r
}

func (mg *Merge) carryOut(in Intent) Event {
	var err error
	var ev Event
	switch in.Kind {
	case IntentReserve:
		ev, err = mg.reserve()
	case IntentBuildTarget:
		ev, err = mg.buildTarget()
	case IntentCatchUp:
		ev, err = mg.catchUp(in.Afters)
	case IntentFence:
		ev, err = mg.fence()
	case IntentReplayTail:
		ev, err = mg.replayTail(in.Afters)
	case IntentPublish:
		ev, err = mg.publish()
	case IntentUnfence:
		ev, err = mg.unfence()
	case IntentSyncTarget:
		ev, err = mg.syncTarget()
	case IntentCommitTable:
		ev, err = mg.commitTable()
	case IntentCleanup:
		ev, err = mg.cleanup()
	case IntentCancel:
		ev, err = mg.cancel()
	default:
		err = invariants.AssertionFailedf("splitter: merge: unknown intent %s", in.Kind)
	}
	if err != nil {
		mg.log.Warn("merge step failed", zap.Stringer("intent", in.Kind), zap.Error(err))
		return Event{Kind: EventFailed, Err: fmt.Errorf("%s: %w", in.Kind, err)}
	}
	return ev
}

// reserve applies BeginMerge: the target's id and span are reserved,
// invisible to routing.
func (mg *Merge) reserve() (Event, error) {
	d := mg.d
	if _, err := routing.Apply(d.n.Table(), mg.m.Plan().Edit()); err != nil {
		return Event{}, err // the table's refusal names the shards
	}
	mg.sources = mg.sources[:0]
	for _, id := range mg.m.Plan().Sources {
		s, ok := d.n.ShardStore(id)
		if !ok {
			return Event{}, fmt.Errorf("no shard %d on this node", id)
		}
		mg.sources = append(mg.sources, s)
	}
	mg.holdsLog = make([]bool, len(mg.sources))
	t, err := d.n.Apply(mg.m.Plan().Edit())
	if err != nil {
		return Event{}, err
	}
	rec, ok := t.MergeOf(mg.m.Plan().Sources[0])
	if !ok {
		return Event{}, invariants.AssertionFailedf("splitter: merge %d: table v%d has no merge of %v after BeginMerge", mg.m.ID(), t.Version(), mg.m.Plan().Sources)
	}
	return Event{Kind: EventReserved, Children: []routing.ShardID{rec.Target}}, nil
}

// buildTarget holds every source's log (INV-8, before the snapshot each
// is read at), then makes the target from the live sources.
func (mg *Merge) buildTarget() (Event, error) {
	d := mg.d
	rec, ok := d.n.Table().Merge(mg.m.Target())
	if !ok || !rec.InProgress {
		return Event{}, fmt.Errorf("merge into %d is not reserved in table v%d", mg.m.Target(), d.n.Table().Version())
	}
	for i, s := range mg.sources {
		if !mg.holdsLog[i] {
			s.HoldLog()
			mg.holdsLog[i] = true
		}
	}
	if err := d.removeLeftover(rec.Target); err != nil {
		return Event{}, err
	}
	target, stats, err := d.n.Engine().CreateMergeTarget(mg.sources, rec.Target, rec.Span())
	if err != nil {
		return Event{}, err
	}
	d.n.AddShard(target)
	mg.target = target
	mg.report.Linked += stats.Linked
	mg.report.Copied += stats.Copied
	mg.report.SeqAtClone = slices.Min(stats.Seqs)
	mg.replayed = slices.Clone(stats.Seqs)
	return Event{Kind: EventCloned, Seqs: stats.Seqs}, nil
}

// replay copies each source's writes after afters[i] into the target; one
// bound per source, read once per round (storage.Engine.CatchUp), and each
// round starts where that source's previous one ended.
func (mg *Merge) replay(afters []uint64) ([]uint64, uint64, error) {
	if !slices.Equal(afters, mg.replayed) {
		return nil, 0, invariants.AssertionFailedf("splitter: merge %d: replay after %v, but the last rounds ended at %v", mg.m.ID(), afters, mg.replayed)
	}
	upTo := make([]uint64, len(mg.sources))
	lag := uint64(0)
	for i, s := range mg.sources {
		u, n, err := mg.d.n.Engine().CatchUp(s, []*storage.Shard{mg.target}, afters[i])
		if err != nil {
			return nil, 0, err
		}
		if u < afters[i] {
			return nil, 0, invariants.AssertionFailedf("splitter: merge %d: catch-up of source %d went back from %d to %d", mg.m.ID(), s.ID(), afters[i], u)
		}
		upTo[i] = u
		mg.replayed[i] = u
		mg.report.CaughtUp += n
		lag += s.Seq() - u
	}
	return upTo, lag, nil
}

func (mg *Merge) catchUp(afters []uint64) (Event, error) {
	upTo, lag, err := mg.replay(afters)
	if err != nil {
		return Event{}, err
	}
	return Event{Kind: EventCaughtUp, Seqs: upTo, Lag: lag}, nil
}

// fence takes every source's apply lock in ascending id order, each
// waiting at most the drain bound. If one times out, those taken are
// released and the handoff is retried later (after that source's write
// stall, if one held its writes): nothing changed.
func (mg *Merge) fence() (Event, error) {
	mg.report.Handoffs++
	for _, s := range mg.sources { // ascending ids: the plan's order
		f, err := mg.d.n.Fence(s.ID(), mg.d.cfg.DrainTimeout)
		if err != nil {
			for _, taken := range mg.fences {
				mg.report.Stall = max(mg.report.Stall, taken.Release())
			}
			mg.fences = nil
			if errors.Is(err, storage.ErrLockTimeout) {
				if s.WriteStalled() {
					mg.stall.on = s
				}
				return Event{Kind: EventDrainTimedOut}, nil
			}
			return Event{}, err
		}
		mg.fences = append(mg.fences, f)
	}
	return Event{Kind: EventFenced}, nil
}

// replayTail replays each source's last writes under the fence (their
// sequence numbers are final now) and raises the target's sequence number
// above every source's.
func (mg *Merge) replayTail(afters []uint64) (Event, error) {
	upTo, _, err := mg.replay(afters)
	if err != nil {
		return Event{}, err
	}
	for i, s := range mg.sources {
		if upTo[i] != s.Seq() {
			return Event{}, invariants.AssertionFailedf("splitter: merge %d: fenced tail of source %d ends at %d, the source is at %d", mg.m.ID(), s.ID(), upTo[i], s.Seq())
		}
	}
	if err := mg.target.RaiseSeq(slices.Max(upTo)); err != nil {
		return Event{}, err
	}
	return Event{Kind: EventTailReplayed, Seqs: upTo}, nil
}

// publish makes CommitMerge the table requests see, in memory: writes
// waiting on the sources' fences will find they are stale; writes to the
// target are acknowledged once the table is durable (INV-9).
func (mg *Merge) publish() (Event, error) {
	pending, err := mg.d.n.Publish(routing.Edit{Kind: routing.CommitMerge, Shard: mg.m.Target(), Sources: mg.m.Plan().Sources})
	if err != nil {
		return Event{}, err
	}
	mg.pending = pending
	for _, s := range mg.sources {
		s.SetOwned(nil)
	}
	return Event{Kind: EventPublished}, nil
}

// unfence releases the sources' apply locks; the longest time one was held
// is the stall the handoff cost their writers.
func (mg *Merge) unfence() (Event, error) {
	for _, f := range mg.fences {
		mg.report.Stall = max(mg.report.Stall, f.Release())
	}
	mg.fences = nil
	mg.unfenced = mg.d.cfg.Clock.Now()
	return Event{Kind: EventUnfenced}, nil
}

// syncTarget makes the target durable while the table's new file is
// staged; a failure fails the node.
func (mg *Merge) syncTarget() (Event, error) {
	var stageErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		stageErr = mg.pending.Stage()
	}()
	err := mg.target.Sync()
	wg.Wait()
	if stageErr != nil {
		return Event{}, stageErr
	}
	if err != nil {
		return Event{}, mg.pending.Fail(err)
	}
	return Event{Kind: EventTargetSynced}, nil
}

// commitTable installs the table: the commit point.
func (mg *Merge) commitTable() (Event, error) {
	err := mg.pending.Install()
	mg.report.Commit = mg.d.cfg.Clock.Now().Sub(mg.unfenced)
	if err != nil {
		return Event{}, err
	}
	mg.pending = nil
	return Event{Kind: EventCommitted}, nil
}

// cleanup retires the sources once their readers are gone.
func (mg *Merge) cleanup() (Event, error) {
	mg.target.ReleaseCompactions()
	if err := mg.releaseLogs(); err != nil && !errors.Is(err, storage.ErrShardClosed) {
		return Event{}, err
	}
	for _, s := range mg.sources {
		if err := mg.d.n.Retire(s.ID(), mg.d.cfg.RetireWait); err != nil {
			return Event{}, err
		}
	}
	return Event{Kind: EventCleanedUp}, nil
}

// cancel undoes the merge: the sources' logs are released, the target is
// deleted and the reservation forgotten. Idempotent: a failed cancel is
// retried.
func (mg *Merge) cancel() (Event, error) {
	if err := mg.releaseLogs(); err != nil {
		return Event{}, err
	}
	if mg.target != nil {
		if err := mg.d.n.Retire(mg.target.ID(), mg.d.cfg.RetireWait); err != nil {
			return Event{}, err
		}
		mg.target = nil
	}
	if t := mg.m.Target(); t != 0 {
		if rec, ok := mg.d.n.Table().Merge(t); ok && rec.InProgress {
			if _, err := mg.d.n.Apply(routing.Edit{Kind: routing.CancelMerge, Shard: t}); err != nil {
				return Event{}, err
			}
		}
	}
	return Event{Kind: EventCancelled}, nil
}

// releaseLogs releases every source log hold this merge has.
func (mg *Merge) releaseLogs() error {
	for i, s := range mg.sources {
		if !mg.holdsLog[i] {
			continue
		}
		if err := s.ReleaseLog(); err != nil {
			return err
		}
		mg.holdsLog[i] = false
	}
	return nil
}
