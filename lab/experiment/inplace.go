package experiment

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

// Outcome is what one strategy measured.
type Outcome struct {
	Strategy    string
	Load        *loadgen.Result
	WindowStart time.Duration // the split's start: its request, or the end of its wait for the parent's own flush
	// AlignWait is how long the split waited for the parent's own flush
	// before it began (InPlaceConfig.AlignFlush), from Requested; Aligned,
	// whether the flush came before the wait's bound.
	Requested time.Duration
	AlignWait time.Duration
	Aligned   bool
	// WarmWait is how long the run waited, after the load began and
	// before the steady window, for the parent's first own flush
	// (InPlaceConfig.Warm); Warmed, whether the flush came within it.
	WarmWait  time.Duration
	Warmed    bool
	WindowEnd time.Duration // the end of the last phase writers wait on
	End       time.Duration // the load stopped
	Phases    []Phase       // in order
	NodeStall time.Duration // the longest the parent's apply lock was held (in-place)
	Copied    int64         // bytes copied (not linked) into children (in-place)
	// Children are the in-place splits' child creations (flush,
	// checkpoint, open, excise per child) and Retired the parents'
	// retirements after the handoff (close, remove), in order.
	Children     []storage.ChildStats
	Retired      []storage.RetireStats
	BytesWritten uint64
	DiskBefore   int64
	DiskPeak     int64
	DiskAfter    int64
	Verify       Verification
	Notes        []string

	// Reads is what the read load measured (nil without one).
	Reads *loadgen.ReadResult
	// Disk is the unique bytes on disk every 100 ms from the load's start,
	// the last sample taken after the load stopped (DiskAfter).
	Disk []DiskSample
	// The cleanup: the removal of what the split left behind, timed from
	// the load's start. inplace: the parent's retirement (the splitter's
	// cleanup phase; the children were excised at creation). rfc: the
	// parent's retirement and then the children's background deletes of
	// their foreign documents and the compaction of those ranges, to the
	// last child's end. newindex: the resize step (linking, then removing
	// the targets' foreign documents, under the write block).
	CleanupStart, CleanupEnd time.Duration
	CleanupWritten           uint64 // bytes the engine wrote in the cleanup (writers' flushes and compactions included)
	CleanupDeleted           int    // documents deleted one by one (rfc, newindex per-doc)
	CleanupMarked            int    // documents a mark cleanup's scan marked deleted (rfc, newindex mark)
	// The merge: the reclaim of the deleted or marked documents' space as
	// a phase of its own, timed from the load's start, and what the
	// stores wrote meanwhile. rfc: the children's compactions of their
	// foreign ranges, the first's start to the last's end. newindex with
	// the mark cleanup: the procedure's merge step after the alias swap
	// (per-doc compacts inside the resize, under the block; range has no
	// merge).
	MergeStart, MergeEnd time.Duration
	MergeWritten         uint64
	// LuceneMergeBytes is what the mark scans found the shards keep (keys
	// and values): what Lucene's merges would rewrite to reclaim the
	// marked documents (MergeWritten is what our compaction wrote).
	LuceneMergeBytes int64

	// The process's CPU time (user and system; RunInPlace, where the
	// platform reports it): over the steady window (SteadyCPUOver long,
	// from the steady sleep's start to the request) and over the split
	// window (WindowStart to the last handoff's end). SplitCPU derives
	// the split's own share. Zero where it was not measured.
	SteadyCPU, SteadyCPUOver, WindowCPU time.Duration
}

// SplitCPU is the CPU time the process spent in the split window above what
// it spends in as long a steady window (the load's own): the split's cost
// in CPU, and on a machine with few CPUs a cause of its stall (on 2 vCPUs,
// 1 ms of CPU spent by any process in a 23 ms window stalled the writers
// about 2x the steady windows, 10 ms 5.7-6.6x;
// design/2026-11-30-split-scale.md). Zero if either was not measured; it
// can be negative when the split cost less than the noise.
func (o *Outcome) SplitCPU() time.Duration {
	if o.SteadyCPUOver <= 0 || o.WindowCPU <= 0 {
		return 0
	}
	rate := float64(o.SteadyCPU) / float64(o.SteadyCPUOver)
	return o.WindowCPU - time.Duration(rate*float64(o.WindowEnd-o.WindowStart))
}

// SteadyEnd is where the steady window ends: the split's request. A split
// that waited for its parent's own flush began later; the wait, which
// holds that flush, belongs to neither window.
func (o *Outcome) SteadyEnd() time.Duration {
	if o.Requested > 0 && o.Requested < o.WindowStart {
		return o.Requested
	}
	return o.WindowStart
}

// Phase is a named, timed step of a strategy.
type Phase struct {
	Name       string
	Start, End time.Duration
}

// InPlaceConfig configures an in-place split run.
type InPlaceConfig struct {
	Dir        string // a clone of the dataset
	Dataset    *Dataset
	Durability storage.Durability
	Load       loadgen.Config
	Splits     []splitter.Plan // run one after the other
	// Before are splits run before the load starts (not measured): a merge
	// benchmark makes its siblings with them.
	Before []splitter.Plan
	// Merges run one after the other after Splits, under the load.
	Merges []splitter.Plan
	Steady time.Duration // load before the split (the steady-state window)
	After  time.Duration // load after the split
	Logger *zap.Logger
	// StaleEvery makes every writer forget the tables it learned and go
	// back to the dataset's first table every n writes (0 = never).
	StaleEvery int
	// ChildBuild is how the children are made: storage.ChildExcise (the
	// "inplace" strategy) or storage.ChildKeepAll ("rfc": whole-parent
	// children whose foreign documents are deleted after the handoff).
	ChildBuild storage.ChildBuild
	// ForeignCleanup is how the rfc children remove their foreign
	// documents (the model and its pacing). With storage.ForeignMark and
	// no Keep, the split's table routes each document.
	ForeignCleanup storage.ForeignCleanupOptions
	// CleanupWait bounds how long the load goes on past After for the
	// rfc children's cleanups to end (default 60 s); past it the run ends
	// with the cleanup unfinished (noted).
	CleanupWait time.Duration
	// Reads is the read load run beside the writes (zero: none).
	Reads loadgen.ReadConfig
	// HoldUntilDurable runs the splits with splitter.Config's
	// HoldUntilDurable: the parent stays fenced until the new table is
	// durable (a relocation-style handoff).
	HoldUntilDurable bool
	// AlignFlush: the first split waits up to this long for its parent's
	// own flush before it begins (storage.Engine.AwaitOwnFlush, as
	// splitter.Config.AlignFlush); later splits do not wait. The measured
	// window starts when the first split begins.
	AlignFlush time.Duration
	// Warm: before the steady window, wait up to this long for the first
	// split's parent to end a memtable flush of its own under the load
	// (Outcome.WarmWait). A parent opened a moment before its split has
	// never rotated its memtable; its first rotation, the split's, then
	// allocates the new 16 MiB memtable under Pebble's commit lock, where a
	// parent that has served writes for a while reuses the arena of the
	// memtable it flushed last (0.2–5.8 ms, and gaps of ~50 ms at the
	// rotation on settled 4 GiB parents; design/2026-11-30-split-scale.md).
	Warm time.Duration
	// SerialChildren makes each split's children one after another
	// (splitter.Config.SerialChildren); by default they are made together.
	SerialChildren bool
	// FlushChildren flushes each split's parent before its children's
	// checkpoints (storage.Options.FlushChildren), instead of making them
	// from its last flushed state and retained history. For comparison.
	FlushChildren bool
}

// WarmFlush is the usual bound of InPlaceConfig.Warm: a clone opened with an
// empty memtable fills its 16 MiB at 5,000 writes/s of 1 KiB in about 3 s.
const WarmFlush = 10 * time.Second

// routerSink writes through one router per writer.
type routerSink struct {
	routers []*node.Router
	first   *routing.Table
	n       *node.Node
	stale   int
	counts  []int
}

func (s *routerSink) Write(w int, op loadgen.Op) (int, error) {
	if s.stale > 0 {
		if s.counts[w]++; s.counts[w]%s.stale == 0 {
			s.routers[w] = node.NewRouter(s.n, s.first, node.RouterConfig{MaxRetries: 16})
		}
	}
	var res node.Result
	var err error
	if op.Delete {
		res, err = s.routers[w].Delete(op.ID, op.Routing)
	} else {
		res, err = s.routers[w].Index(op.ID, op.Routing, op.Source)
	}
	return res.Retries, err
}

// RunInPlace runs the load on a clone of the dataset, splits in place after
// the steady window, and verifies the index afterwards.
func RunInPlace(ctx context.Context, cfg InPlaceConfig) (*Outcome, error) {
	out := &Outcome{Strategy: "inplace"}
	if cfg.ChildBuild == storage.ChildKeepAll {
		out.Strategy = "rfc"
	}
	foreign := cfg.ForeignCleanup
	var tables atomic.Pointer[node.Node]
	if foreign.Model == storage.ForeignMark && foreign.Keep == nil {
		// ShardSplittingQuery's test: the split's table routes the
		// document to this shard.
		foreign.Keep = func(shard routing.ShardID, d storage.Doc) bool {
			_, owner := tables.Load().Table().Route(d.ID, d.Routing)
			return owner == shard
		}
	}
	eng, err := storage.Open(storage.Options{Dir: cfg.Dir, Layout: cfg.Dataset.Config.Layout,
		Durability: cfg.Durability, Logger: cfg.Logger, ForeignCleanup: foreign, FlushChildren: cfg.FlushChildren})
	if err != nil {
		return nil, err
	}
	n, err := node.Open(node.Config{Engine: eng, Logger: cfg.Logger})
	if err != nil {
		_ = eng.Close()
		return nil, err
	}
	tables.Store(n)
	defer n.Close()
	if len(cfg.Before) > 0 {
		drv := splitter.NewDriver(n, splitter.Config{Logger: cfg.Logger})
		for _, plan := range cfg.Before {
			if r, err := drv.Run(plan); err != nil || r.Phase != splitter.PhaseDone {
				return nil, fmt.Errorf("split of %d before the load: %v (%v)", plan.Parent(), err, r.Err)
			}
		}
	}
	first := n.Table()
	cfg.Load.Defaults()
	sink := &routerSink{n: n, first: first, stale: cfg.StaleEvery, counts: make([]int, cfg.Load.Writers)}
	for range cfg.Load.Writers {
		sink.routers = append(sink.routers, node.NewRouter(n, first, node.RouterConfig{MaxRetries: 16}))
	}
	if len(cfg.Splits) > 0 && cfg.Load.Moving == nil {
		parent := cfg.Splits[0].Parent()
		cfg.Load.Moving = func(id, r string) bool { _, s := first.Route(id, r); return s == parent }
	}
	if len(cfg.Splits) == 0 && len(cfg.Merges) > 0 && cfg.Load.Moving == nil {
		sources := cfg.Merges[0].Sources
		cfg.Load.Moving = func(id, r string) bool { _, s := first.Route(id, r); return slices.Contains(sources, s) }
	}
	disk := func() int64 { u, _ := eng.DiskUsage(); return u.Unique }
	written := eng.BytesWritten()
	reads := readLoad{cfg: cfg.Reads, reader: newNodeReader(func() (*node.Node, error) { return n, nil })}
	load := startLoad(ctx, cfg.Load, sink, reads, disk, out)
	splitErr := runSplits(ctx, n, cfg, load.start, out)
	if splitErr == nil {
		sleepCtx(ctx, cfg.After)
		splitErr = awaitForeignCleanups(ctx, eng, cfg, load.start, out)
	}
	load.stopLoad(out)
	load.finishDisk(disk, out)
	if splitErr != nil {
		return out, splitErr
	}
	out.BytesWritten = eng.BytesWritten() - written
	out.Verify, err = Verify(n.Table(), searcher{n}, cfg.Dataset, out.Load)
	return out, err
}

// alignFirst waits, at most max, for parent's own flush
// (splitter.Config.AlignFlush does the same before every Run); a store
// that cannot say is logged and not waited for.
func alignFirst(n *node.Node, parent routing.ShardID, max time.Duration, logger *zap.Logger) (time.Duration, bool) {
	sh, ok := n.ShardStore(parent)
	if !ok {
		return 0, false
	}
	wait, aligned, err := n.Engine().AwaitOwnFlush(sh, max)
	if err != nil && logger != nil {
		logger.Warn("the first split begins without waiting for its parent's own flush", zap.Uint32("parent", uint32(parent)), zap.Error(err))
	}
	return wait, aligned
}

// awaitFirstFlush waits, at most max, until parent's store has ended a
// flush since the wait began, and returns how long it waited and whether
// one ended.
func awaitFirstFlush(ctx context.Context, n *node.Node, parent routing.ShardID, max time.Duration) (time.Duration, bool) {
	start := time.Now()
	sh, ok := n.ShardStore(parent)
	if !ok {
		return 0, false
	}
	from := sh.FlushesEnded()
	for time.Since(start) < max && ctx.Err() == nil {
		if sh.FlushesEnded() != from {
			return time.Since(start), true
		}
		sleepCtx(ctx, 10*time.Millisecond)
	}
	return time.Since(start), false
}

// runSplits waits for the parent's first own flush (Warm), waits out the
// steady window, then runs each split.
func runSplits(ctx context.Context, n *node.Node, cfg InPlaceConfig, start time.Time, out *Outcome) error {
	if cfg.Warm > 0 && len(cfg.Splits) > 0 {
		out.WarmWait, out.Warmed = awaitFirstFlush(ctx, n, cfg.Splits[0].Parent(), cfg.Warm)
	}
	steadyFrom, cpuFrom := time.Since(start), cpuNow()
	sleepCtx(ctx, cfg.Steady)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	out.WindowStart = time.Since(start)
	out.Requested = out.WindowStart
	windowCPU := cpuNow()
	if cpuFrom >= 0 && windowCPU >= 0 {
		out.SteadyCPU, out.SteadyCPUOver = windowCPU-cpuFrom, out.Requested-steadyFrom
	}
	if len(cfg.Splits) > 0 && cfg.AlignFlush > 0 {
		// Only the first split waits for its parent's own flush, before
		// the window: the window runs from its start to the last handoff,
		// and a later split's wait (up to AlignFlush each, a driver's
		// AlignFlush would wait before every Run) would count as split
		// time.
		out.AlignWait, out.Aligned = alignFirst(n, cfg.Splits[0].Parent(), cfg.AlignFlush, cfg.Logger)
		out.WindowStart = time.Since(start)
		windowCPU = cpuNow()
	}
	var phaseStart time.Duration
	var lastPhase splitter.Phase
	var cleanupWritten uint64
	drv := splitter.NewDriver(n, splitter.Config{Logger: cfg.Logger, ChildBuild: cfg.ChildBuild, HoldUntilDurable: cfg.HoldUntilDurable, SerialChildren: cfg.SerialChildren, Hook: func(p splitter.Phase, _ splitter.Intent) {
		now := time.Since(start)
		if p != lastPhase {
			if lastPhase != 0 {
				out.Phases = append(out.Phases, Phase{Name: lastPhase.String(), Start: phaseStart, End: now})
			}
			lastPhase, phaseStart = p, now
			if p == splitter.PhaseCleanup {
				out.CleanupStart, cleanupWritten = now, n.Engine().BytesWritten()
				// The handoff has just ended: the window's CPU so far
				// (a later split's handoff moves it on, as WindowEnd).
				if c := cpuNow(); c >= 0 && windowCPU >= 0 {
					out.WindowCPU = c - windowCPU
				}
			}
		}
	}})
	for _, plan := range cfg.Splits {
		lastPhase = 0
		r, err := drv.Run(plan)
		now := time.Since(start)
		if lastPhase != 0 {
			out.Phases = append(out.Phases, Phase{Name: lastPhase.String(), Start: phaseStart, End: now})
		}
		if err != nil {
			return fmt.Errorf("split of %d: %w", plan.Parent(), err)
		}
		if r.Phase != splitter.PhaseDone {
			return fmt.Errorf("split of %d aborted: %w", plan.Parent(), r.Err)
		}
		out.NodeStall = max(out.NodeStall, r.Stall)
		out.Copied += r.Copied
		out.Children = append(out.Children, r.ChildStats...)
		out.Retired = append(out.Retired, r.Retire)
		for _, c := range r.ChildStats {
			out.Notes = append(out.Notes, fmt.Sprintf("child %d created in %.1f ms (flush %.1f of which rotation %.1f, checkpoint %.1f, open %.1f, excise %.1f), %.3f MiB copied",
				c.Shard, ms(c.Total()), ms(c.Flush), ms(c.Rotate), ms(c.Checkpoint), ms(c.Open), ms(c.Excise), float64(c.Copied)/(1<<20)))
		}
		out.Notes = append(out.Notes, fmt.Sprintf("parent %d retired: close %.1f ms, remove %.1f ms", plan.Parent(), ms(r.Retire.Close), ms(r.Retire.Remove)))
		out.Notes = append(out.Notes, fmt.Sprintf("split %d -> %v: S=%d, %d ops caught up, %d handoff(s) (parent locked %.1f ms, table durable %.1f ms later), %.1f MiB linked, %.3f MiB copied",
			plan.Parent(), r.SortedTargets(), r.SeqAtClone, r.CaughtUp, r.Handoffs, ms(r.Stall), ms(r.Commit), float64(r.Linked)/(1<<20), float64(r.Copied)/(1<<20)))
		if r.StallWaits > 0 {
			out.Notes = append(out.Notes, fmt.Sprintf("split %d: %d drain timeout(s) found the parent in a write stall; waited %.1f ms for it to end", plan.Parent(), r.StallWaits, ms(r.StallWaited)))
		}
		// The window ends with the handoff: no write waits on cleanup (it
		// runs in the background and competes only for the disk).
		for _, p := range out.Phases {
			if p.Name == splitter.PhaseHandoff.String() {
				out.WindowEnd = p.End
			}
		}
		out.CleanupEnd = now
		out.CleanupWritten += n.Engine().BytesWritten() - cleanupWritten
	}
	for _, plan := range cfg.Merges {
		lastPhase = 0
		r, err := drv.Run(plan)
		now := time.Since(start)
		if lastPhase != 0 {
			out.Phases = append(out.Phases, Phase{Name: lastPhase.String(), Start: phaseStart, End: now})
		}
		if err != nil {
			return fmt.Errorf("merge of %v: %w", plan.Sources, err)
		}
		if r.Phase != splitter.PhaseDone {
			return fmt.Errorf("merge of %v aborted: %w", plan.Sources, r.Err)
		}
		out.NodeStall = max(out.NodeStall, r.Stall)
		out.Copied += r.Copied
		out.Notes = append(out.Notes, fmt.Sprintf("merge %v -> %v: %d ops caught up, %d handoff(s) (sources locked %.1f ms, table durable %.1f ms later), %.1f MiB linked, %.3f MiB copied",
			plan.Sources, r.Targets, r.CaughtUp, r.Handoffs, ms(r.Stall), ms(r.Commit), float64(r.Linked)/(1<<20), float64(r.Copied)/(1<<20)))
		for _, p := range out.Phases {
			if p.Name == splitter.PhaseHandoff.String() {
				out.WindowEnd = p.End
			}
		}
	}
	return nil
}

// awaitForeignCleanups keeps the load going until the rfc children's
// background cleanups end (at most cfg.CleanupWait) and records when they
// ended, what they deleted and what the engine wrote meanwhile.
func awaitForeignCleanups(ctx context.Context, eng *storage.Engine, cfg InPlaceConfig, start time.Time, out *Outcome) error {
	if cfg.ChildBuild != storage.ChildKeepAll {
		return nil
	}
	wait := cfg.CleanupWait
	if wait == 0 {
		wait = time.Minute
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	err := eng.WaitForeignCleanups(wctx)
	ended, running := eng.ForeignCleanups()
	for _, r := range ended {
		// The retirement's bytes were counted when it ended; each child's
		// store counted its own while its cleanup ran.
		out.CleanupWritten += r.Written
		out.CleanupDeleted += r.Deleted
		out.CleanupMarked += r.Marked
		out.LuceneMergeBytes += r.KeptBytes
		out.CleanupEnd = max(out.CleanupEnd, r.Ended.Sub(start))
		if r.Err != nil {
			return fmt.Errorf("experiment: foreign cleanup of shard %d: %w", r.Shard, r.Err)
		}
		mergeFrom := r.Started.Add(r.Deletes).Sub(start)
		if out.MergeEnd == 0 || mergeFrom < out.MergeStart {
			out.MergeStart = mergeFrom
		}
		out.MergeEnd = max(out.MergeEnd, mergeFrom+r.Compact)
		out.MergeWritten += r.CompactWritten
		var what string
		switch r.Model {
		case storage.ForeignMark:
			what = fmt.Sprintf("routed every document and marked %d foreign ones deleted (%.0f ms; %d kept, %.1f MiB a Lucene merge would rewrite)",
				r.Marked, ms(r.Deletes), r.Kept, float64(r.KeptBytes)/(1<<20))
		case storage.ForeignRange:
			what = fmt.Sprintf("marked its foreign ranges deleted without reading them (%.0f ms)", ms(r.Deletes))
		default:
			what = fmt.Sprintf("deleted %d foreign documents one by one in %d batches (%.0f ms)", r.Deleted, r.Batches, ms(r.Deletes))
		}
		out.Notes = append(out.Notes, fmt.Sprintf("child %d %s, then compacted them away (%.0f ms, %.1f MiB written); its store wrote %.1f MiB in all meanwhile",
			r.Shard, what, ms(r.Compact), float64(r.CompactWritten)/(1<<20), float64(r.Written)/(1<<20)))
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		out.CleanupEnd = time.Since(start)
		out.Notes = append(out.Notes, fmt.Sprintf("the foreign cleanup of %v had not ended %v after the split's end; the run stopped it", running, wait))
	}
	return nil
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// searcher adapts a node to Verify.
type searcher struct{ n *node.Node }

func (s searcher) Search(fn func(routing.ShardID, storage.Doc) error) error {
	_, err := s.n.Search(fn)
	return err
}

// ErrVerify marks a verification that found lost, duplicated or misplaced
// documents.
var ErrVerify = errors.New("experiment: verification failed")

// ErrWritesFailed is an in-place run whose writes got errors: verification
// allows whatever a failed write left, but its client saw the failure, and
// no write may fail because of an in-place split or merge.
var ErrWritesFailed = errors.New("experiment: writes failed during an in-place run")

// FailedWrites is how many of the run's writes were answered with an error.
func (o *Outcome) FailedWrites() int {
	if o.Load == nil {
		return 0
	}
	return loadgen.Summarize(o.Load.Records, 0, o.End+time.Hour).Errors
}
