package findings

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/shardsplit/shardsplit/lab/experiment"
	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

// This file is the split-under-load measurement questions 1, 10 and 11
// share: BenchmarkSplitUnderLoad's method (lab/experiment), with the
// datasets built once per Run and the measured runs of a case reused by
// every question that asks for the same case.

// writers is the load's writer count: enough to offer 5,000 fsync'd
// writes/s on this kind of disk (see BenchmarkSplitUnderLoad).
const writers = 64

// shared is what the questions of one Run share.
type shared struct {
	dir      string
	mu       sync.Mutex
	datasets map[dataKey]*experiment.Dataset
	runs     map[splitCase][]splitRun
	// strategies are the three-strategy runs questions 2 to 4 share
	// (q02_strategies.go).
	strategies []strategyRound
}

type dataKey struct {
	layout storage.Layout
	docs   int
}

func newShared(dir string) *shared {
	return &shared{dir: dir, datasets: map[dataKey]*experiment.Dataset{}, runs: map[splitCase][]splitRun{}}
}

// size is a parent size the questions name.
type size struct {
	Name string
	Docs int // 1 KiB documents
}

// parentSizes are the sizes of questions 1 and 11: 100 MiB and 1 GiB
// (quick: 4 MiB and 16 MiB).
func (c Config) parentSizes() (small, large size) {
	if c.Quick {
		return size{"4 MiB", 4 << 10}, size{"16 MiB", 16 << 10}
	}
	return size{"100 MiB", 100 << 10}, size{"1 GiB", 1 << 20}
}

// splitCase is one measured configuration.
type splitCase struct {
	Layout storage.Layout
	Size   size
	Rate   float64 // fsync'd writes/s offered
	Ways   int
	// Hold: the parent stays fenced until the new table is durable
	// (splitter.Config.HoldUntilDurable).
	Hold bool
	// Merge: the root is split in two before the load and the two
	// siblings are merged back under it (Ways is ignored).
	Merge bool
	// Align: the split waits up to alignFlush for the parent's own flush
	// before it begins (splitter.Config.AlignFlush).
	Align bool
	// Flush: the split flushes its parent before the children's
	// checkpoints (storage.Options.FlushChildren) instead of making them
	// from its last flushed state and retained history.
	Flush bool
	// Warm: the run waits up to warmFlush, before its steady window, for
	// the parent's first own flush under the load
	// (experiment.InPlaceConfig.Warm).
	Warm bool
}

// alignFlush bounds an aligned split's wait: at 5,000 writes/s of 1 KiB a
// 16 MiB memtable fills in about 3 s.
const alignFlush = 5 * time.Second

// warmFlush bounds a warmed run's wait for the parent's first own flush.
const warmFlush = experiment.WarmFlush

func (k splitCase) String() string {
	op := fmt.Sprintf("%d-way split", k.Ways)
	if k.Merge {
		op = "merge of 2 siblings"
	}
	s := fmt.Sprintf("%s %s, %s, %.0f writes/s", k.Size.Name, k.Layout, op, k.Rate)
	if k.Align {
		s += ", aligned with the parent's own flush"
	}
	if k.Flush {
		s += ", the parent flushed first"
	}
	if k.Hold {
		s += ", held until durable"
	}
	return s
}

// splitRun is one run's measurements (milliseconds, MiB, writes/s).
type splitRun struct {
	ParentMiB     float64
	StallMs       float64 // longest write stall of the moved keys in the split (merge) window
	StallAtMs     float64 // when it began, since the window's start
	StallPhase    string  // the phase it began in ("" before the first phase began)
	SteadyStallMs float64 // the same measure over steady windows as long (the disk's noise)
	NodeStallMs   float64 // the longest the parent's (a source's) apply lock was held
	WindowMs      float64 // split request (or, aligned, its start after the wait) to the end of the handoff
	AlignWaitMs   float64 // an aligned split's wait for the parent's own flush before it began
	WarmWaitMs    float64 // a warmed run's wait for the parent's first own flush, before the steady window
	Warmed        float64 // 1 if that flush came within warmFlush
	Aligned       float64 // 1 if that wait ended after the flush, 0 if it hit its bound
	SteadyOps     float64
	DuringOps     float64 // in the window (at least its first 100 ms)
	CopiedMiB     float64
	WrittenMiB    float64
	PhaseMs       map[string]float64 // clone, catch-up, handoff
	// The split's per-step timings: the slowest child's creation (the
	// parent's flush, if any, is the first child's), the parent's flush,
	// and the parent's retirement after the handoff (its store's close and
	// its directory's removal).
	ChildMaxMs, FlushMs, RetireCloseMs, RetireRemoveMs float64
	// RotateMs is the part of FlushMs until the memtable was rotated,
	// Pebble's commit pipeline held (storage.ChildStats.Rotate).
	RotateMs float64
	// SkippedFlushes counts the children that copied the parent's WAL
	// because its L0 was at Pebble's stop-writes depth (no flush forced).
	SkippedFlushes float64
	// ChildMs is each child's creation in the order they were made (the
	// first pays the parent's flush).
	ChildMs []float64
	// SplitCPUMs is the process's CPU time in the window above the steady
	// window's rate (experiment.Outcome.SplitCPU): the split's CPU cost.
	SplitCPUMs float64
	// Question 5, with splitdemo compare's windows (experiment.Summarize):
	// the median over the steady window's whole seconds of each second's
	// longest stall, the longest stall in the second after the handoff,
	// the writes/s acknowledged in that second (over the part of it the
	// load ran: the load may stop before it ends) and the steady window's
	// writes/s.
	Steady1sStallMs, AfterHandoffStallMs, AfterHandoffOps, SteadySecondOps float64
	// P99FirstSecondMs and P99SteadySecondMs are summary.json's
	// write_p99_first_second_ms and write_p99_steady_second_ms.
	P99FirstSecondMs, P99SteadySecondMs float64
	// HistoryOps counts the writes the children took from the parent's
	// retained history (storage.ChildStats.History).
	HistoryOps float64
}

// timing is how long the load runs around the split.
func (c Config) timing() (steady, after, measure time.Duration) {
	if c.Quick {
		return 1200 * time.Millisecond, 300 * time.Millisecond, time.Second
	}
	return 3 * time.Second, time.Second, 2 * time.Second
}

// dataset builds (once per Run) the dataset of a layout and size: one root
// shard of 1 KiB documents whose ids the load updates.
func (c Config) dataset(layout storage.Layout, sz size) (*experiment.Dataset, error) {
	sh := c.shared
	sh.mu.Lock()
	defer sh.mu.Unlock()
	key := dataKey{layout, sz.Docs}
	if d, ok := sh.datasets[key]; ok {
		return d, nil
	}
	c.Progressf("building the %s %s dataset (%d documents)", sz.Name, layout, sz.Docs)
	dcfg := experiment.DatasetConfig{
		Mode:     routing.ModePartition,
		Settings: routing.Settings{Shards: 1, RoutingShards: 1024, PartitionSize: 1},
		Layout:   layout,
		Docs:     sz.Docs,
		Load:     loadgen.Config{Writers: writers, IDsPerWriter: max(1, sz.Docs/writers), DocSize: 1024, Seed: uint64(c.Seed)},
	}
	dir := filepath.Join(sh.dir, fmt.Sprintf("%s-%d", layout, sz.Docs))
	d, err := experiment.BuildDataset(dir, dcfg, c.Logger, nil)
	if err != nil {
		return nil, fmt.Errorf("build the %s %s dataset: %w", sz.Name, layout, err)
	}
	c.Progressf("built in %.1f s: %.0f MiB on disk; %.1f s of it waiting for the load's compactions (L0 %d sublevels deep, %.0f MiB of debt when the load ended)",
		d.Built.Seconds(), float64(d.Bytes)/(1<<20), d.Settle.Seconds(), d.Owed.L0Sublevels, float64(d.Owed.Debt)/(1<<20))
	sh.datasets[key] = d
	return d, nil
}

// measure runs case k n times (or returns the runs another question
// already made of it, if at least n).
func (c Config) measure(ctx context.Context, label string, k splitCase, n int) ([]splitRun, error) {
	c.shared.mu.Lock()
	runs, ok := c.shared.runs[k]
	c.shared.mu.Unlock()
	if ok && len(runs) >= n {
		c.Progressf("%s: %s: reusing %d runs measured earlier", label, k, len(runs))
		return runs, nil
	}
	runs = nil
	for i := range n {
		r, err := c.measureRun(ctx, label, k, i, n)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	c.shared.mu.Lock()
	c.shared.runs[k] = runs
	c.shared.mu.Unlock()
	return runs, nil
}

// measureRun makes run i of n of case k.
func (c Config) measureRun(ctx context.Context, label string, k splitCase, i, n int) (splitRun, error) {
	d, err := c.dataset(k.Layout, k.Size)
	if err != nil {
		return splitRun{}, err
	}
	steady, after, window := c.timing()
	{
		if err := ctx.Err(); err != nil {
			return splitRun{}, err
		}
		began := time.Now()
		dir := filepath.Join(c.shared.dir, "run")
		_ = os.RemoveAll(dir)
		if err := d.Clone(dir); err != nil {
			return splitRun{}, err
		}
		load := d.Config.Load
		load.Rate = k.Rate
		ic := experiment.InPlaceConfig{
			Dir: dir, Dataset: d, Durability: storage.DurabilityRequest, Load: load,
			Steady: steady, After: after, Logger: c.Logger, HoldUntilDurable: k.Hold,
			AlignFlush:    map[bool]time.Duration{true: alignFlush}[k.Align],
			Warm:          map[bool]time.Duration{true: warmFlush}[k.Warm],
			FlushChildren: k.Flush,
		}
		if k.Merge {
			// Root 0 split in two before the load: children 1 and 2.
			ic.Before = []splitter.Plan{splitter.SplitPlan(0, 2)}
			ic.Merges = []splitter.Plan{splitter.MergePlan(1, 2)}
		} else {
			ic.Splits = []splitter.Plan{splitter.SplitPlan(0, k.Ways)}
		}
		out, err := experiment.RunInPlace(ctx, ic)
		_ = os.RemoveAll(dir)
		if err != nil {
			return splitRun{}, fmt.Errorf("%s, run %d: %w", k, i+1, err)
		}
		if !out.Verify.OK() {
			return splitRun{}, fmt.Errorf("%s, run %d: %w: %+v", k, i+1, experiment.ErrVerify, out.Verify)
		}
		if n := out.FailedWrites(); n > 0 {
			return splitRun{}, fmt.Errorf("%s, run %d: %w: %d of %d", k, i+1, experiment.ErrWritesFailed, n, len(out.Load.Records))
		}
		r := summarize(out, window)
		r.ParentMiB = float64(d.Bytes) / (1 << 20)
		c.Progressf("%s: %s: run %d/%d: stall %.1f ms at +%.0f ms%s (steady %.1f ms), apply lock %.1f ms, window %.0f ms, throughput %.2f of steady (run took %.0f s, %.0f s of it load)",
			label, k, i+1, n, r.StallMs, r.StallAtMs, phaseNote(r.StallPhase), r.SteadyStallMs, r.NodeStallMs, r.WindowMs, r.DuringOps/max(1, r.SteadyOps),
			time.Since(began).Seconds(), out.End.Seconds())
		return r, nil
	}
}

// summarize measures one outcome as BenchmarkSplitUnderLoad does: the
// steady window is the measure before the split request.
func summarize(out *experiment.Outcome, measure time.Duration) splitRun {
	recs := out.Load.Records
	ws, we, req := out.WindowStart, out.WindowEnd, out.SteadyEnd()
	steady := loadgen.Summarize(recs, req-measure, req)
	// A window under 100 ms holds too few writes for a rate.
	during := loadgen.Summarize(recs, ws, max(we, ws+100*time.Millisecond))
	stall, at := loadgen.LongestStall(recs, ws, we)
	r := splitRun{
		StallMs:       msOf(stall),
		StallAtMs:     msOf(at - ws),
		SteadyStallMs: msOf(steadyStall(recs, req-measure, req, we-ws)),
		AlignWaitMs:   msOf(out.AlignWait),
		WarmWaitMs:    msOf(out.WarmWait),
		Warmed:        map[bool]float64{true: 1}[out.Warmed],
		Aligned:       map[bool]float64{true: 1}[out.Aligned],
		NodeStallMs:   msOf(out.NodeStall),
		WindowMs:      msOf(we - ws),
		SteadyOps:     steady.OpsPerS,
		DuringOps:     during.OpsPerS,
		CopiedMiB:     float64(out.Copied) / (1 << 20),
		WrittenMiB:    float64(out.BytesWritten) / (1 << 20),
		PhaseMs:       map[string]float64{},
		SplitCPUMs:    msOf(out.SplitCPU()),
	}
	for _, p := range out.Phases {
		r.PhaseMs[p.Name] += msOf(p.End - p.Start)
		if stall > 0 && at >= p.Start && at < p.End {
			r.StallPhase = p.Name
		}
	}
	for _, c := range out.Children {
		r.ChildMaxMs = max(r.ChildMaxMs, msOf(c.Total()))
		r.ChildMs = append(r.ChildMs, msOf(c.Total()))
		r.FlushMs += msOf(c.Flush)
		r.HistoryOps += float64(c.History)
		r.RotateMs += msOf(c.Rotate)
		if c.SkippedFlush {
			r.SkippedFlushes++
		}
	}
	for _, x := range out.Retired {
		r.RetireCloseMs += msOf(x.Close)
		r.RetireRemoveMs += msOf(x.Remove)
	}
	sum := experiment.Summarize(out)
	r.Steady1sStallMs, r.AfterHandoffStallMs = sum.Steady1sStallMs, sum.AfterHandoffStallMs
	r.SteadySecondOps = sum.ThroughputSteadyOps
	r.AfterHandoffOps = sum.ThroughputAfterHandoffOps
	r.P99FirstSecondMs, r.P99SteadySecondMs = sum.WriteP99FirstSecondMs, sum.WriteP99SteadySecondMs
	return r
}

// steadyStall is the median of MaxStall over windows of length w (stepped
// by w/2) in [from, to): what the stall measure reads with no split
// running (lab/experiment's benchmark measures the same way). A
// window longer than [from, to) is cut to it: one window, the whole span
// (the benchmark reads 0 there).
func steadyStall(recs []loadgen.Record, from, to, w time.Duration) time.Duration {
	w = min(w, to-from)
	var stalls []float64
	for at := from; w > 0 && at+w <= to; at += w / 2 {
		stalls = append(stalls, float64(loadgen.MaxStall(recs, at, at+w)))
	}
	if len(stalls) == 0 {
		return 0
	}
	return time.Duration(Measured("", "", stalls...).Median)
}

// phaseNote names the phase a stall began in, for a progress line.
func phaseNote(phase string) string {
	if phase == "" {
		return ""
	}
	return " in " + phase
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// field collects one field of every run.
func field(runs []splitRun, f func(splitRun) float64) []float64 {
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	return v
}

// caseNumbers are the standard numbers of a case, named after it.
func caseNumbers(k splitCase, runs []splitRun) []Number {
	p := k.String() + ": "
	return []Number{
		Measured(p+"longest write stall in the window", "ms", field(runs, func(r splitRun) float64 { return r.StallMs })...),
		Measured(p+"longest write stall in steady windows as long", "ms", field(runs, func(r splitRun) float64 { return r.SteadyStallMs })...),
		Measured(p+"apply lock held (Outcome.NodeStall)", "ms", field(runs, func(r splitRun) float64 { return r.NodeStallMs })...),
		Measured(p+"window (request to end of handoff)", "ms", field(runs, func(r splitRun) float64 { return r.WindowMs })...),
		Measured(p+"throughput in the window / steady", "ratio", field(runs, func(r splitRun) float64 { return r.DuringOps / max(1, r.SteadyOps) })...),
		Measured(p+"steady throughput", "writes/s", field(runs, func(r splitRun) float64 { return r.SteadyOps })...),
		Measured(p+"bytes copied", "MiB", field(runs, func(r splitRun) float64 { return r.CopiedMiB })...),
	}
}

// median of one field.
func median(runs []splitRun, f func(splitRun) float64) float64 {
	return Measured("", "", field(runs, f)...).Median
}

// ratioGoal evaluates "measured ≤ limit" (atMost) or "measured ≥ limit".
func ratioGoal(goal string, measured, limit float64, atMost bool, detail string) Goal {
	g := Goal{Goal: goal, Measured: fmt.Sprintf("%.2f (%s)", measured, detail)}
	if atMost {
		g.Met = measured <= limit
		if !g.Met {
			g.Why = fmt.Sprintf("%.2f is above %.2f", measured, limit)
		}
	} else {
		g.Met = measured >= limit
		if !g.Met {
			g.Why = fmt.Sprintf("%.2f is below %.2f", measured, limit)
		}
	}
	return g
}

// reproduce is the command that reruns question id as this run did.
func (c Config) reproduce(id int) string {
	s := fmt.Sprintf("splitdemo findings --only %d --seed %d", id, c.Seed)
	if c.Quick {
		s += " --quick"
	}
	if c.Big && !c.Quick {
		s += " --big"
	}
	if c.Runs > 0 {
		s += fmt.Sprintf(" --runs %d", c.Runs)
	}
	return s
}
