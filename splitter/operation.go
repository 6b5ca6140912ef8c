package splitter

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/internal/invariants"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// Operation is one split or merge in progress: what Driver.Run steps to
// its end and what a caller that steps it itself (the service's task, a
// trace, the simulation) holds. Next and Cancel may be called from
// different goroutines: a cancel waits for the intent being carried out,
// then the machine accepts or refuses it, so it never races a step. (The
// wait for a source's write stall after a drain timeout runs at the start
// of the next step without the lock, and a cancel ends it.)
type Operation struct {
	d     *Driver
	log   *zap.Logger
	parts kindParts // what the split or the merge does its own way
	stall stallGate // a drain timeout in a source's write stall (fence)

	mu               sync.Mutex // serialises Next and Cancel; guards everything below
	retry            retryBackoff
	m                *Machine
	sources          []*storage.Shard // plan order (ascending ids)
	targets          []*storage.Shard // as the table reserves them
	fences           []*node.Fence    // the sources' apply locks held, in plan order
	pending          *node.PendingTable
	holdsLog         []bool   // per source: this operation holds its operation log
	holdsCompactions bool     // the sources' compactions are held (a split's parent)
	replayed         []uint64 // per source: where its last catch-up or tail round ended
	report           Report
	written          uint64
	start            time.Time
	phaseStart       time.Time
	unfenced         time.Time
}

// Machine returns the operation's state machine. It is not synchronised:
// use it only from the goroutine that calls Next (traces do).
func (o *Operation) Machine() *Machine { return o.m }

// Plan returns the plan, sources ascending.
func (o *Operation) Plan() Plan { return o.m.Plan() }

// Phase returns the current phase.
func (o *Operation) Phase() Phase {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.m.Phase()
}

// Done reports whether the operation has ended.
func (o *Operation) Done() bool { return o.Phase().Terminal() }

// Fenced reports whether the operation holds a source's apply lock now
// (from a handoff's fence to its unfence; to its commit with
// HoldUntilDurable). Writes to the sources wait on those locks, so a
// caller that stops stepping the operation (leaving it to recovery) must
// not stop while one is held.
func (o *Operation) Fenced() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.fences) > 0
}

// Next writes the journal records the machine asks for, carries out its
// next intent and feeds the outcome back. It returns the intent and its
// event; the error is non-nil when the driver cannot go on (the node
// failed, or the machine refused the event: a driver bug). On an operation
// that ended cleanly (done or aborted, perhaps by a cancel the hook
// delivered) it carries out nothing and returns the zero Intent and no
// error.
func (o *Operation) Next() (Intent, Event, error) {
	o.waitOutStall()
	o.retry.wait(o.d, &o.mu)
	if hook := o.d.cfg.Hook; hook != nil {
		o.mu.Lock()
		phase, next := o.m.Phase(), o.m.Ready().Intent
		o.mu.Unlock()
		hook(phase, next)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	rd := o.m.Ready()
	o.m.Advance()
	if rd.Intent.Kind == 0 {
		if err := o.d.writeJournal(rd.Journal); err != nil {
			o.log.Warn("journal record not written", zap.Error(err))
		}
		if p := o.m.Phase(); p == PhaseDone || p == PhaseAborted {
			// It ended cleanly, by a cancel the hook or another goroutine
			// delivered after the caller looked: nothing to carry out.
			return Intent{}, Event{}, nil
		}
		return Intent{}, Event{}, fmt.Errorf("splitter: %s has nothing to do in phase %s", o.m.what(), o.m.Phase())
	}
	from := o.m.Phase()
	var ev Event
	if err := o.d.checkBegin(o, rd.Intent); err != nil {
		// Nothing of this operation was written: it ends with an aborted
		// record.
		ev = Event{Kind: EventFailed, Err: err}
	} else if err := o.d.writeJournal(rd.Journal); err != nil && rd.Intent.Kind.NeedsJournal() {
		ev = Event{Kind: EventFailed, Err: fmt.Errorf("%s: %w", rd.Intent.Kind, err)}
	} else {
		if err != nil {
			o.log.Warn("journal record not written; going on", zap.Stringer("intent", rd.Intent.Kind), zap.Error(err))
		}
		ev = o.carryOut(rd.Intent)
	}
	if err := o.m.Step(ev); err != nil {
		return rd.Intent, ev, err
	}
	o.retry.stepped(from, o.m.Phase(), ev, o.d.cfg.Clock.Now())
	o.afterStep(from, ev)
	if ev.Kind == EventFailed && errors.Is(ev.Err, node.ErrFailed) {
		// The node's memory and disk disagree about the table: nothing more
		// can be done here; reopening (recovery) decides. The caller stops
		// on this error, so the fences go first.
		o.unfenceFailed()
		return rd.Intent, ev, fmt.Errorf("splitter: %s: %w", o.m.Plan(), ev.Err)
	}
	return rd.Intent, ev, nil
}

// unfenceFailed carries out the unfence an operation still fenced asks
// for after its node failed (a failure before the publish aborts a fenced
// operation through IntentUnfence). Next returns the node's failure as an
// error, on which its callers stop stepping (Run, the service's task): a
// fence left held then kept every writer already waiting on a source's
// apply lock waiting for ever. The caller holds o.mu.
func (o *Operation) unfenceFailed() {
	if len(o.fences) == 0 {
		return
	}
	rd := o.m.Ready()
	if rd.Intent.Kind != IntentUnfence {
		// No unfence to step through (the machine ended): release it all
		// the same.
		o.release()
		return
	}
	o.m.Advance()
	if err := o.d.writeJournal(rd.Journal); err != nil {
		o.log.Warn("journal record not written; unfencing all the same", zap.Error(err))
	}
	from := o.m.Phase()
	ev := o.carryOut(rd.Intent)
	if err := o.m.Step(ev); err != nil {
		o.release()
		o.log.Error("unfence after the node failed refused by the machine", zap.Error(err))
		return
	}
	o.retry.stepped(from, o.m.Phase(), ev, o.d.cfg.Clock.Now())
	o.afterStep(from, ev)
}

// afterStep times phases, logs transitions and writes the final record of
// an operation that just ended (it has no intent to carry it).
func (o *Operation) afterStep(from Phase, ev Event) {
	to := o.m.Phase()
	if to == from {
		return
	}
	now := o.d.cfg.Clock.Now()
	o.report.Durations[from] += now.Sub(o.phaseStart)
	o.phaseStart = now
	o.log.Info("phase advanced", zap.Stringer("from", from), zap.Stringer("to", to), zap.Stringer("event", ev.Kind))
	if to.Terminal() {
		o.finish()
	}
}

// finish writes the records of an ended operation. A lost final record is
// not lost for good: the journal carries it into its next write.
func (o *Operation) finish() {
	rd := o.m.Ready()
	o.m.Advance()
	if err := o.d.writeJournal(rd.Journal); err != nil {
		o.log.Warn("final journal record not written; the next journal write carries it", zap.Error(err))
	}
}

// Cancel asks the operation to abort. It is accepted before the handoff
// fences the sources (the operation then aborts at its next step) and
// refused after, with an error saying why. An accepted cancel ends a wait
// for a source's write stall (Interrupt): the step waiting goes on with
// the abort.
func (o *Operation) Cancel() error {
	o.mu.Lock()
	from := o.m.Phase()
	if err := o.m.Step(Event{Kind: EventCancelRequested}); err != nil {
		o.mu.Unlock()
		return err
	}
	o.afterStep(from, Event{Kind: EventCancelRequested})
	o.mu.Unlock()
	o.Interrupt()
	return nil
}

// Interrupt ends a wait for a source's write stall in progress (and skips
// later ones), so that a caller that steps the operation from one
// goroutine and is about to cancel it, or to stop driving it, is not kept
// waiting by Next for up to Config.StallWait. It does not stop the
// operation: the step goes on with the retry. An accepted Cancel
// interrupts.
func (o *Operation) Interrupt() { o.stall.interrupted.raise() }

// waitOutStall carries out the wait a drain timeout in a source's write
// stall asked for (fence); see stallGate.
func (o *Operation) waitOutStall() {
	o.stall.wait(o.d, o.log, &o.mu, func() bool { return o.m.Ready().Intent.Kind == IntentCatchUp }, &o.report)
}

// Report returns what the operation measured so far; complete once Done.
func (o *Operation) Report() Report {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.report
	r.Durations = maps.Clone(o.report.Durations)
	r.ChildStats = slices.Clone(o.report.ChildStats)
	r.Phase, r.Err = o.m.Phase(), o.m.Err()
	r.Targets = o.m.Targets()
	r.ToVersion = o.d.n.Table().Version()
	if r.Phase.Terminal() {
		r.Total = o.d.cfg.Clock.Now().Sub(o.start)
		r.Written = o.d.n.Engine().BytesWritten() - o.written
		if u, err := o.d.n.Engine().DiskUsage(); err == nil {
			r.DiskAfter = u.Unique
		}
	}
	return r
}

func (o *Operation) carryOut(in Intent) Event {
	var err error
	var ev Event
	switch in.Kind {
	case IntentReserve:
		ev, err = o.reserve()
	case IntentBuildTargets:
		ev, err = o.buildTargets()
	case IntentCatchUp:
		ev, err = o.catchUp(in.After)
	case IntentFence:
		ev, err = o.fence()
	case IntentReplayTail:
		ev, err = o.replayTail(in.After)
	case IntentPublish:
		ev, err = o.publish()
	case IntentUnfence:
		ev, err = o.unfence()
	case IntentSyncTargets:
		ev, err = o.syncTargets()
	case IntentCommitTable:
		ev, err = o.commitTable()
	case IntentCleanup:
		ev, err = o.cleanup()
	case IntentCancel:
		ev, err = o.cancel()
	default:
		err = invariants.AssertionFailedf("splitter: unknown intent %s", in.Kind)
	}
	if err != nil {
		o.log.Warn("step failed", zap.Stringer("intent", in.Kind), zap.Error(err))
		return Event{Kind: EventFailed, Err: fmt.Errorf("%s: %w", in.Kind, err)}
	}
	return ev
}

// reserve applies the plan's begin edit (checkBegin has checked its
// shape): the targets' ids and spans are reserved, invisible to routing.
// Every source must be a shard of this node; one that is not is refused in
// the table's words when the table refuses the plan too (they name the
// shards).
func (o *Operation) reserve() (Event, error) {
	d, plan := o.d, o.m.Plan()
	sources := make([]*storage.Shard, len(plan.Sources))
	for i, id := range plan.Sources {
		s, ok := d.n.ShardStore(id)
		if !ok {
			if _, err := routing.Apply(d.n.Table(), plan.Edit()); err != nil {
				return Event{}, err
			}
			return Event{}, fmt.Errorf("no shard %d on this node", id)
		}
		sources[i] = s
	}
	o.sources, o.holdsLog = sources, make([]bool, len(sources))
	t, err := d.n.Apply(plan.Edit())
	if err != nil {
		return Event{}, err
	}
	leaves, _, ok := o.parts.reservation(t, plan)
	if !ok {
		return Event{}, invariants.AssertionFailedf("splitter: %s: table v%d has no reservation after %s", o.m.what(), t.Version(), plan.Edit())
	}
	return Event{Kind: EventReserved, Targets: leafIDs(leaves)}, nil
}

// leafIDs returns the shard ids of leaves, in order.
func leafIDs(leaves []routing.Leaf) []routing.ShardID {
	ids := make([]routing.ShardID, len(leaves))
	for i, l := range leaves {
		ids[i] = l.Shard
	}
	return ids
}

// buildTargets holds every source's operation log (INV-8: before the
// snapshot each source is read at, so every later write can be replayed),
// then makes the targets from the live sources, the kind's own way.
func (o *Operation) buildTargets() (Event, error) {
	d, plan := o.d, o.m.Plan()
	t := d.n.Table()
	leaves, inProgress, ok := o.parts.reservation(t, plan)
	if !ok || !inProgress {
		return Event{}, fmt.Errorf("%s is not reserved in table v%d", plan, t.Version())
	}
	if ids := leafIDs(leaves); !slices.Equal(ids, o.m.targets) {
		return Event{}, invariants.AssertionFailedf("splitter: %s: table v%d reserves targets %v, the machine %v", o.m.what(), t.Version(), ids, o.m.targets)
	}
	for i, s := range o.sources {
		if !o.holdsLog[i] {
			s.HoldLog()
			o.holdsLog[i] = true
		}
	}
	for _, l := range leaves {
		if err := d.removeLeftover(l.Shard); err != nil {
			return Event{}, err
		}
	}
	seqs, err := o.parts.build(o, leaves)
	if err != nil {
		return Event{}, err
	}
	o.report.SeqAtClone = slices.Min(seqs)
	o.replayed = slices.Clone(seqs)
	return Event{Kind: EventCloned, Seqs: seqs}, nil
}

// addTarget makes a built target a shard of the node and of the operation:
// a cancel removes it with the rest.
func (o *Operation) addTarget(s *storage.Shard) {
	o.d.n.AddShard(s)
	o.targets = append(o.targets, s)
}

// replay copies each source's writes after after[i] into the targets; one
// bound per source, read once per round (storage.Engine.CatchUp), and each
// round of a source starts where its previous one ended. It returns the
// bounds reached and the writes left, summed over the sources.
func (o *Operation) replay(after []uint64) ([]uint64, uint64, error) {
	if !slices.Equal(after, o.replayed) {
		return nil, 0, invariants.AssertionFailedf("splitter: %s: replay after %v, but the last rounds ended at %v", o.m.what(), after, o.replayed)
	}
	upTo := make([]uint64, len(o.sources))
	lag := uint64(0)
	for i, s := range o.sources {
		u, n, err := o.d.n.Engine().CatchUp(s, o.targets, after[i])
		if err != nil {
			return nil, 0, err
		}
		if u < after[i] {
			return nil, 0, invariants.AssertionFailedf("splitter: %s: catch-up of source %d went back from %d to %d", o.m.what(), s.ID(), after[i], u)
		}
		upTo[i] = u
		o.replayed[i] = u
		o.report.CaughtUp += n
		lag += s.Seq() - u
	}
	return upTo, lag, nil
}

func (o *Operation) catchUp(after []uint64) (Event, error) {
	upTo, lag, err := o.replay(after)
	if err != nil {
		return Event{}, err
	}
	return Event{Kind: EventCaughtUp, Seqs: upTo, Lag: lag}, nil
}

// fence takes every source's apply lock in ascending id order, each
// waiting at most the drain bound: from here no source write is applied
// until unfence, and every earlier one is visible. If one times out, those
// taken are released and the handoff is retried later (after that
// source's write stall, if one held its writes: waitOutStall); nothing
// changed.
func (o *Operation) fence() (Event, error) {
	o.report.Handoffs++
	for _, s := range o.sources { // ascending ids: the plan's order
		f, err := o.d.n.Fence(s.ID(), o.d.cfg.DrainTimeout)
		if err != nil {
			o.release()
			if errors.Is(err, storage.ErrLockTimeout) {
				if s.WriteStalled() {
					o.stall.on = s
				}
				return Event{Kind: EventDrainTimedOut}, nil
			}
			return Event{}, err
		}
		o.fences = append(o.fences, f)
	}
	return Event{Kind: EventFenced}, nil
}

// replayTail replays each source's last writes under the fence (their
// sequence numbers are final now) and raises the targets' sequence
// numbers above every source's.
func (o *Operation) replayTail(after []uint64) (Event, error) {
	upTo, _, err := o.replay(after)
	if err != nil {
		return Event{}, err
	}
	for i, s := range o.sources {
		if upTo[i] != s.Seq() {
			return Event{}, invariants.AssertionFailedf("splitter: %s: fenced tail of source %d ends at %d, the source is at %d", o.m.what(), s.ID(), upTo[i], s.Seq())
		}
	}
	for _, t := range o.targets {
		if err := t.RaiseSeq(slices.Max(upTo)); err != nil {
			return Event{}, err
		}
	}
	return Event{Kind: EventTailReplayed, Seqs: upTo}, nil
}

// publish makes the commit edit the table requests see, in memory: writes
// that wait on the fences will find they are stale, and writes the new
// table sends to the targets are acknowledged only once it is durable
// (node's durability rule, INV-9). The sources stop owning their keys.
func (o *Operation) publish() (Event, error) {
	pending, err := o.d.n.Publish(o.m.Plan().commitEdit(o.m.targets))
	if err != nil {
		return Event{}, err
	}
	o.pending = pending
	for _, s := range o.sources {
		s.SetOwned(nil)
	}
	return Event{Kind: EventPublished}, nil
}

// unfence releases the sources' apply locks; the longest time one was
// held is the write stall the handoff cost their writers. With
// HoldUntilDurable on a published operation the locks stay held until
// commitTable (or the node fails).
func (o *Operation) unfence() (Event, error) {
	if o.d.cfg.HoldUntilDurable && o.m.published && o.m.Phase() == PhaseHandoff {
		return Event{Kind: EventUnfenced}, nil
	}
	o.release()
	return Event{Kind: EventUnfenced}, nil
}

// release releases the sources' apply locks it holds and records how long
// they were held.
func (o *Operation) release() {
	if len(o.fences) == 0 {
		return
	}
	for _, f := range o.fences {
		o.report.Stall = max(o.report.Stall, f.Release())
	}
	o.fences = nil
	o.unfenced = o.d.cfg.Clock.Now()
}

// syncTargets makes the targets' copies durable (they hold the tail),
// while the published table's new file is staged beside them; only
// commitTable's rename makes it the table. A failure fails the node: the
// published table cannot be taken back.
func (o *Operation) syncTargets() (Event, error) {
	var stageErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		stageErr = o.pending.Stage()
	}()
	err := syncAll(o.targets)
	wg.Wait()
	if stageErr != nil {
		o.release() // held with HoldUntilDurable: the node has failed
		return Event{}, stageErr
	}
	if err != nil {
		o.release()
		return Event{}, o.pending.Fail(err)
	}
	return Event{Kind: EventTargetsSynced}, nil
}

// commitTable installs the table: the commit point. A failure fails the
// node.
func (o *Operation) commitTable() (Event, error) {
	err := o.pending.Install()
	if len(o.fences) > 0 { // HoldUntilDurable: the sources waited for all of it
		o.release()
	} else {
		o.report.Commit = o.d.cfg.Clock.Now().Sub(o.unfenced)
	}
	if err != nil {
		return Event{}, err
	}
	o.pending = nil
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

// cleanup retires the sources once their readers are gone: no durable
// table names them any more. The targets may now pay the compaction debt
// they inherited, and start what the kind leaves for after the commit.
func (o *Operation) cleanup() (Event, error) {
	for _, t := range o.targets {
		t.ReleaseCompactions()
	}
	if err := o.parts.committed(o); err != nil {
		return Event{}, err
	}
	if err := o.releaseLogs(); err != nil && !errors.Is(err, storage.ErrShardClosed) {
		return Event{}, err
	}
	for _, s := range o.sources {
		if err := o.d.n.Retire(s.ID(), o.d.cfg.RetireWait); err != nil {
			return Event{}, err
		}
		if rs, ok := o.d.n.Engine().TakeRetireStats(s.ID()); ok {
			o.report.Retire.Close += rs.Close
			o.report.Retire.Remove += rs.Remove
		}
	}
	return Event{Kind: EventCleanedUp}, nil
}

// cancel undoes the operation: the sources' logs are released, the targets
// are deleted and the reservation forgotten. The table routes exactly as
// before and the sources never stopped serving. Every part is idempotent:
// a failed cancel is retried.
func (o *Operation) cancel() (Event, error) {
	if err := o.releaseLogs(); err != nil {
		return Event{}, err
	}
	if o.holdsCompactions {
		for _, s := range o.sources {
			s.ReleaseCompactions()
		}
		o.holdsCompactions = false
	}
	for len(o.targets) > 0 {
		if err := o.d.n.Retire(o.targets[0].ID(), o.d.cfg.RetireWait); err != nil {
			return Event{}, err
		}
		o.targets = o.targets[1:]
	}
	plan := o.m.Plan()
	if leaves, inProgress, ok := o.parts.reservation(o.d.n.Table(), plan); ok && inProgress && slices.Equal(leafIDs(leaves), o.m.targets) {
		if _, err := o.d.n.Apply(plan.cancelEdit(o.m.targets)); err != nil {
			return Event{}, err
		}
	}
	return Event{Kind: EventCancelled}, nil
}

// releaseLogs releases every source log hold this operation has.
func (o *Operation) releaseLogs() error {
	for i, s := range o.sources {
		if !o.holdsLog[i] {
			continue
		}
		if err := s.ReleaseLog(); err != nil {
			return err
		}
		o.holdsLog[i] = false
	}
	return nil
}
