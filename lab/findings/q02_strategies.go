package findings

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/shardsplit/shardsplit/baseline"
	"github.com/shardsplit/shardsplit/lab/experiment"
	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

// This file is the measurement questions 2, 3 and 4 share (question 5
// quotes it too): the three strategies of splitdemo compare — inplace
// (children excised at creation), rfc (whole-parent children whose
// foreign documents are deleted one by one after the handoff) and
// newindex (write block, _split x2, alias swap) — run one after the other
// on clones of one dataset under the same write and read load, repeated
// cfg.runs() times. One run of the three is measured once per findings
// Run, whichever of the questions asks first.

// strategies are the three, in the order every table prints them.
var strategies = []string{"inplace", "rfc", "newindex"}

// strategySetup is the dataset, load and timing of the shared runs.
type strategySetup struct {
	Size          size
	Rate          float64 // fsync'd writes/s offered
	Steady, After time.Duration
	CleanupWait   time.Duration // how long rfc's load waits for its children's cleanup
	Reads         loadgen.ReadConfig
}

// strategySetup: a one-shard index of 256 MiB (quick: 8 MiB) split in
// two under 5,000 fsync'd writes/s (quick: 2,000) and a read load of 200
// routed gets/s and 50 searches/s, one in 250 of them an exact count (one
// every 5 s: a count is a full scan here, and one a second doubled the
// in-place split's stall in compare's side-by-side runs). One shard, so
// the in-place split and the new index's _split x2 split the same bytes,
// and the disk floor of #22889 (one extra copy of the shard) is one
// extra copy of the index. Steady 4 s, 10 s after (question 3's window
// after the split); quick: 1.5 s and 1 s.
func (c Config) strategySetup() strategySetup {
	s := strategySetup{Size: size{"256 MiB", 256 << 10}, Rate: 5000, Steady: 4 * time.Second, After: experiment.AfterWindow,
		CleanupWait: 30 * time.Second, Reads: loadgen.ReadConfig{GetRate: 200, SearchRate: 50, CountEvery: 250, Seed: uint64(c.Seed)}}
	if c.Quick {
		s.Size, s.Rate, s.Steady, s.After, s.CleanupWait = size{"8 MiB", 8 << 10}, 2000, 1500*time.Millisecond, time.Second, 10*time.Second
	}
	return s
}

func (s strategySetup) String() string {
	return fmt.Sprintf("a one-shard %s index (1 KiB documents, per-shard layout) split in two under %.0f fsync'd writes/s, %.0f routed gets/s and %.0f searches/s (one in %d an exact count)",
		s.Size.Name, s.Rate, s.Reads.GetRate, s.Reads.SearchRate, s.Reads.CountEvery)
}

// readStat is the latency of one kind of read in one window of one run.
type readStat struct {
	N        int
	P50, P99 float64 // ms
}

// readWindows are the windows question 3 reads in: experiment.Summarize's
// steady window, the split window (reads in flight in it) and the 10 s
// after it.
var readWindows = []string{"steady", "during", "after"}

// readKinds are the reads question 3 reports.
var readKinds = []loadgen.ReadKind{loadgen.ReadGet, loadgen.ReadSearch, loadgen.ReadCount}

// diskPoint is a disk sample: seconds since the split request, MiB.
type diskPoint struct{ T, MiB float64 }

// strategyRun is what one strategy's run measured: compare's summary and
// what questions 2 to 4 read beyond it.
type strategyRun struct {
	Strategy string
	Summary  experiment.Summary
	// Reads[kind][window]: kind is "get", "search" or "count", window one
	// of readWindows.
	Reads map[string]map[string]readStat
	// SteadyWriteP99Ms is the p99 of the writes acknowledged in the steady
	// window; CleanupOps the writes acknowledged per second while the
	// cleanup ran (0 if it took no time).
	SteadyWriteP99Ms, CleanupOps float64
	// AfterHandoffOps is the writes/s acknowledged in the second after
	// the split window (over the part of it the load ran).
	AfterHandoffOps float64
	// CleanupStartS, CleanupEndS and WindowEndS are seconds since the
	// split request.
	CleanupStartS, CleanupEndS, WindowEndS float64
	Disk                                   []diskPoint
	ParentMiB                              float64 // the dataset on disk
}

// strategyRound is one run of the three strategies.
type strategyRound map[string]strategyRun

// strategyRuns returns n rounds of the shared runs, measuring those not
// measured yet in this findings Run.
func (c Config) strategyRuns(ctx context.Context, label string, n int) ([]strategyRound, error) {
	sh := c.shared
	sh.mu.Lock()
	have := len(sh.strategies)
	sh.mu.Unlock()
	if have >= n {
		c.Progressf("%s: reusing %d runs of the three strategies measured earlier", label, have)
		sh.mu.Lock()
		defer sh.mu.Unlock()
		return sh.strategies, nil
	}
	s := c.strategySetup()
	d, err := c.dataset(storage.LayoutPerShard, s.Size)
	if err != nil {
		return nil, err
	}
	for i := have; i < n; i++ {
		round := strategyRound{}
		for _, name := range strategies {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			began := time.Now()
			o, err := c.runStrategy(ctx, name, d, s)
			if err != nil {
				return nil, fmt.Errorf("%s, run %d: %w", name, i+1, err)
			}
			r := strategyRunOf(o)
			r.ParentMiB = mibOf(d.Bytes)
			round[name] = r
			c.Progressf("%s: %s run %d/%d: window %.0f ms, stall %.1f ms, cleanup %.0f ms, search p99 steady %.2f / during %.2f ms, disk peak %.0f MiB (run took %.0f s)",
				label, name, i+1, n, r.Summary.SplitDurationMs, r.Summary.MaxWriteStallMs, r.Summary.CleanupDurationMs,
				r.Summary.SearchP99SteadyMs, r.Summary.SearchP99DuringMs, mibOf(r.Summary.DiskPeakBytes), time.Since(began).Seconds())
		}
		sh.mu.Lock()
		sh.strategies = append(sh.strategies, round)
		sh.mu.Unlock()
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.strategies, nil
}

// runStrategy runs one strategy on a clone of d and checks it verified.
func (c Config) runStrategy(ctx context.Context, name string, d *experiment.Dataset, s strategySetup) (*experiment.Outcome, error) {
	dir := filepath.Join(c.shared.dir, "strategy-"+name)
	_ = os.RemoveAll(dir)
	defer os.RemoveAll(dir)
	load := d.Config.Load
	load.Rate = s.Rate
	var out *experiment.Outcome
	var err error
	if name == "newindex" {
		out, err = experiment.RunNewIndex(ctx, experiment.NewIndexConfig{
			Dir: dir, Dataset: d, Durability: storage.DurabilityRequest, Load: load, Factor: 2,
			Cleanup: baseline.CleanupPerDoc, Steady: s.Steady, After: s.After, Logger: c.Logger, Reads: s.Reads,
		})
	} else {
		if err := d.Clone(dir); err != nil {
			return nil, err
		}
		build := storage.ChildExcise
		if name == "rfc" {
			build = storage.ChildKeepAll
		}
		out, err = experiment.RunInPlace(ctx, experiment.InPlaceConfig{
			Dir: dir, Dataset: d, Durability: storage.DurabilityRequest, Load: load,
			Splits: []splitter.Plan{splitter.SplitPlan(0, 2)}, Steady: s.Steady, After: s.After, Logger: c.Logger,
			ChildBuild: build, CleanupWait: s.CleanupWait, Reads: s.Reads,
		})
	}
	if err != nil {
		return nil, err
	}
	if !out.Verify.OK() {
		return nil, fmt.Errorf("%w: %+v", experiment.ErrVerify, out.Verify)
	}
	if n := out.FailedWrites(); n > 0 && name != "newindex" {
		return nil, fmt.Errorf("%w: %d of %d", experiment.ErrWritesFailed, n, len(out.Load.Records))
	}
	if out.Reads != nil && out.Reads.Foreign > 0 {
		return nil, fmt.Errorf("reads returned %d foreign documents", out.Reads.Foreign)
	}
	return out, nil
}

// strategyRunOf reduces an outcome to what the questions read.
func strategyRunOf(o *experiment.Outcome) strategyRun {
	win := experiment.WindowsOf(o)
	recs := o.Load.Records
	r := strategyRun{Strategy: o.Strategy, Summary: experiment.Summarize(o), Reads: map[string]map[string]readStat{},
		SteadyWriteP99Ms: msOf(loadgen.Summarize(recs, win.SteadyFrom, o.WindowStart).P99),
		WindowEndS:       (o.WindowEnd - o.WindowStart).Seconds(),
		CleanupStartS:    (o.CleanupStart - o.WindowStart).Seconds(),
		CleanupEndS:      (o.CleanupEnd - o.WindowStart).Seconds(),
	}
	r.AfterHandoffOps = r.Summary.ThroughputAfterHandoffOps
	if o.CleanupEnd > o.CleanupStart {
		r.CleanupOps = loadgen.SummarizeOverlap(recs, o.CleanupStart, o.CleanupEnd).OpsPerS
	}
	for _, kind := range readKinds {
		recs := o.Reads.Of(kind)
		stat := func(w loadgen.Window) readStat { return readStat{N: w.Acked, P50: msOf(w.P50), P99: msOf(w.P99)} }
		r.Reads[kind.String()] = map[string]readStat{
			"steady": stat(loadgen.Summarize(recs, win.SteadyFrom, o.WindowStart)),
			"during": stat(loadgen.SummarizeOverlap(recs, o.WindowStart, o.WindowEnd)),
			"after":  stat(loadgen.Summarize(recs, o.WindowEnd, win.AfterEnd)),
		}
	}
	for _, s := range o.Disk {
		r.Disk = append(r.Disk, diskPoint{T: (s.At - o.WindowStart).Seconds(), MiB: mibOf(s.Bytes)})
	}
	return r
}

func mibOf(b int64) float64 { return float64(b) / (1 << 20) }

// strategyMeasure is one per-run value of a strategy question, named and
// in the unit its Answer reports it.
type strategyMeasure struct {
	name, unit string
	f          func(strategyRun) float64
}

// strategyRows runs the strategies' comparison for a question (label names
// its runs) and returns its rounds and one row a strategy, made by rowOf;
// every measure of every strategy goes into a's numbers.
func strategyRows[R any](ctx context.Context, cfg Config, label string, a *Answer, measures []strategyMeasure, rowOf func([]strategyRound, string) R) ([]strategyRound, []R, error) {
	rounds, err := cfg.strategyRuns(ctx, label, cfg.runs())
	if err != nil {
		return nil, nil, err
	}
	var rows []R
	for _, s := range strategies {
		for _, m := range measures {
			a.Numbers = append(a.Numbers, Measured(s+": "+m.name, m.unit, of(rounds, s, m.f)...))
		}
		rows = append(rows, rowOf(rounds, s))
	}
	return rounds, rows, nil
}

// of collects one value of a strategy from every round.
func of(rounds []strategyRound, strategy string, f func(strategyRun) float64) []float64 {
	v := make([]float64, 0, len(rounds))
	for _, r := range rounds {
		if s, ok := r[strategy]; ok {
			v = append(v, f(s))
		}
	}
	return v
}

// med is the median of one value of a strategy over the rounds.
func med(rounds []strategyRound, strategy string, f func(strategyRun) float64) float64 {
	return Measured("", "", of(rounds, strategy, f)...).Median
}
