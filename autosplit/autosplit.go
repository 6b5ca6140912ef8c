// Package autosplit runs the load policy against a node: on every Tick it
// reads each active shard's statistics (storage's always-on counters, key
// sample and size estimate), feeds them to a policy.Recorder, asks
// policy.Decide for at most one action and carries it out through an
// Executor — splits and merges with the splitter's driver (Driver.Run). A
// failed action's shards are held back for Thresholds.RetryAfter and,
// however slowly the loop ticks, at the next Tick's decision.
//
// Ticks are synchronous: an action runs to its end inside Tick, so there is
// never more than one action at a time per index; and the policy proposes
// nothing while the table has a split or a merge in progress (one started
// by someone else, e.g. by hand).
package autosplit

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/policy"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

// Executor carries out the policy's actions on an index.
type Executor interface {
	// Split runs a split to its end.
	Split(plan splitter.Plan) (splitter.Report, error)
	// Merge runs a merge of adjacent leaves of one root (in key order)
	// into one shard to its end.
	Merge(shards []routing.ShardID) (splitter.Report, error)
}

// Resumer is an Executor that can take up again an action it left
// unfinished: one whose undo or cleanup kept failing, so that it returned
// with the operation unfinished. While it is reserved in the table the
// policy proposes nothing, and past its commit (its cleanup failing) the
// driver begins no other operation while the journal has it unfinished,
// so the loop resumes it at each Tick until it has ended.
type Resumer interface {
	// Resume carries the unfinished action on; resumed is false when
	// there is none.
	Resume() (r splitter.Report, resumed bool, err error)
}

// SplitterExecutor splits and merges with the splitter's driver.
type SplitterExecutor struct {
	Driver *splitter.Driver
}

// Split runs the plan; a split that aborted is an error naming why.
func (e SplitterExecutor) Split(plan splitter.Plan) (splitter.Report, error) {
	r, err := e.Driver.Run(plan)
	if err != nil {
		return r, err
	}
	if r.Phase != splitter.PhaseDone {
		return r, fmt.Errorf("autosplit: split of shard %d ended %s: %w", plan.Parent(), r.Phase, r.Err)
	}
	return r, nil
}

// Merge runs the merge with the driver's default bounds; a merge that
// aborted is an error naming why.
func (e SplitterExecutor) Merge(shards []routing.ShardID) (splitter.Report, error) {
	r, err := e.Driver.Run(splitter.MergePlan(shards...))
	if err != nil {
		return r, err
	}
	if r.Phase != splitter.PhaseDone {
		return r, fmt.Errorf("autosplit: merge of shards %v ended %s: %w", shards, r.Phase, r.Err)
	}
	return r, nil
}

// Resume carries on the split or merge the driver last gave up on
// (splitter.Driver.Resume).
func (e SplitterExecutor) Resume() (splitter.Report, bool, error) {
	return e.Driver.Resume()
}

// Config configures a Loop.
type Config struct {
	Node       *node.Node
	Executor   Executor
	Thresholds policy.Thresholds
	Logger     *zap.Logger
}

// Loop is the statistics, the policy and the executor together. It is not
// safe for concurrent use: one goroutine ticks it.
type Loop struct {
	cfg        Config
	rec        *policy.Recorder
	loadSplits []policy.LoadSplit
	failures   []failure // actions that failed, for Thresholds.RetryAfter
	buf        []storage.KeySample
}

// failure is a failed action the loop holds back: for Thresholds.RetryAfter
// and, whatever the tick, at the first decision after it.
type failure struct {
	policy.Failure
	held bool // a decision has held it back
}

// Event is what one Tick saw and did.
type Event struct {
	At       time.Time
	Stats    map[routing.ShardID]policy.ShardStats // the statistics Decide read (valid until the next Tick)
	Decision policy.Decision
	// Split is the report of the split carried out (Decision.Action.Kind ==
	// policy.Split and the executor ran it).
	Split *splitter.Report
	// Merge is the report of the merge carried out (Decision.Action.Kind ==
	// policy.Merge and the executor ran it); Merge.Children is the target.
	Merge *splitter.Report
	// Resumed is the report of an action an earlier Tick left unfinished
	// (Resumer) that this Tick took up again before reading the
	// statistics.
	Resumed *splitter.Report
	// Err is why the action (or the resumed one) failed.
	Err     error
	Version routing.Version // the table version after the action
}

// New returns a loop. The node and the executor are required: without
// them the loop would fail only at its first Tick or its first action.
func New(cfg Config) (*Loop, error) {
	switch {
	case cfg.Node == nil:
		return nil, errors.New("autosplit: no node to read statistics from (Config.Node is nil)")
	case cfg.Executor == nil:
		return nil, errors.New("autosplit: no executor to carry out actions (Config.Executor is nil)")
	}
	if err := cfg.Thresholds.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &Loop{cfg: cfg, rec: policy.NewRecorder(cfg.Thresholds)}, nil
}

// Tick reads the statistics at now, decides, and carries out the action.
func (l *Loop) Tick(now time.Time) (Event, error) {
	n := l.cfg.Node
	var resumed *splitter.Report
	var resumeErr error
	if r, ok := l.cfg.Executor.(Resumer); ok {
		// An action left unfinished holds back every other: reserved, the
		// policy proposes nothing while the table has it in progress; past
		// its commit, its cleanup failing, the driver refuses to begin
		// another while the journal has it unfinished (checkBegin).
		if rep, ok, err := r.Resume(); ok {
			resumed, resumeErr = &rep, err
			l.cfg.Logger.Info("autosplit resumed an unfinished action", zap.Stringer("phase", rep.Phase), zap.Error(err))
		}
	}
	t := n.Table()
	readings := map[routing.ShardID]policy.Reading{}
	for _, id := range t.ActiveShards() {
		s, ok := n.ShardStore(id)
		if !ok {
			continue
		}
		ls := s.LoadSample(l.buf[:0])
		l.buf = ls.Keys
		size, err := s.EstimateSize()
		if err != nil && !errors.Is(err, storage.ErrShardClosed) {
			return Event{}, fmt.Errorf("autosplit: statistics of shard %d: %w", id, err)
		}
		keys := make([]policy.KeySample, len(ls.Keys))
		for i, k := range ls.Keys {
			keys[i] = policy.KeySample{Key: k.Key, Value: k.Value}
		}
		readings[id] = policy.Reading{Writes: ls.Writes, Reads: ls.Reads, Size: size, Keys: keys}
	}
	l.rec.Observe(now, readings)
	ev := Event{At: now, Stats: l.rec.Stats(), Resumed: resumed, Err: resumeErr}
	ev.Decision = policy.Decide(policy.Input{Now: now, Table: t, Shards: ev.Stats, LoadSplits: l.loadSplits, Failures: l.holdFailures(now)}, l.cfg.Thresholds)
	for _, h := range ev.Decision.Unsplittable {
		l.cfg.Logger.Info("hot key cannot be split", zap.Uint32("shard", uint32(h.Shard)), zap.String("routing", h.Value),
			zap.Float64("share", h.Share), zap.Float64("writes_per_s", h.WritesPerSec), zap.String("remedy", h.Remedy))
	}
	a := ev.Decision.Action
	switch a.Kind {
	case policy.Split:
		r, err := l.cfg.Executor.Split(splitter.Plan{Sources: []routing.ShardID{a.Shard}, Ways: a.Ways, Points: a.Points})
		ev.Split, ev.Err = &r, err
		// A split past its commit point is in the table even if the
		// executor then erred (its cleanup gave up, say): its children
		// are as sticky as any load split's.
		if (err == nil || r.Phase.Published()) && a.Reason == policy.ReasonLoad && len(r.Targets) > 0 {
			l.loadSplits = append(l.loadSplits, policy.LoadSplit{Parent: a.Shard, Children: r.SortedTargets(), At: now})
		}
		l.cfg.Logger.Info("autosplit split", zap.Stringer("action", a), zap.Error(err))
	case policy.Merge:
		r, err := l.cfg.Executor.Merge(a.Shards)
		ev.Merge, ev.Err = &r, err
		l.cfg.Logger.Info("autosplit merge", zap.Stringer("action", a), zap.Error(ev.Err))
	}
	if ev.Err != nil && a.Kind != policy.None {
		// Held back for RetryAfter, so that an action that keeps failing
		// is neither retried at every tick nor starves the next one.
		shards := a.Shards
		if a.Kind == policy.Split {
			shards = []routing.ShardID{a.Shard}
		}
		l.failures = append(l.failures, failure{Failure: policy.Failure{Shards: shards, At: now}})
	}
	l.trimLoadSplits(now)
	ev.Version = n.Table().Version()
	return ev, nil
}

// holdFailures returns the failures for the decision at now. A failure
// the next decision would find older than RetryAfter (the loop ticks less
// often than that) is dated now, so that this decision holds it back all
// the same: otherwise an action that keeps failing would be proposed again
// at every tick of a slow loop, and the next hottest leaf starve. With
// RetryAfter 0 it is not held back (age 0 is not under 0).
func (l *Loop) holdFailures(now time.Time) []policy.Failure {
	out := make([]policy.Failure, len(l.failures))
	for i := range l.failures {
		f := &l.failures[i]
		if !f.held && now.Sub(f.At) >= l.cfg.Thresholds.RetryAfter {
			f.At = now
		}
		f.held = true
		out[i] = f.Failure
	}
	return out
}

// trimLoadSplits forgets load splits older than the merge delay and
// failures older than the retry delay: they no longer hold anything back.
func (l *Loop) trimLoadSplits(now time.Time) {
	keep := l.loadSplits[:0]
	for _, s := range l.loadSplits {
		if now.Sub(s.At) < l.cfg.Thresholds.MergeDelay {
			keep = append(keep, s)
		}
	}
	l.loadSplits = keep
	fresh := l.failures[:0]
	for _, f := range l.failures {
		if now.Sub(f.At) < l.cfg.Thresholds.RetryAfter {
			fresh = append(fresh, f)
		}
	}
	l.failures = fresh
}
