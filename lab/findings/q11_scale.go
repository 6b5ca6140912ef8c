package findings

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"gonum.org/v1/plot/plotter"

	"github.com/shardsplit/shardsplit/storage"
)

// scaleQuestion is question 11 of design/findings.md, answered by runScale.
var scaleQuestion = Question{ID: 11, Slug: "scale", Title: "Scale: is split cost flat in parent size?", Run: runScale,
	RaisedIn: "this project's claim: an in-place split costs O(files), not O(bytes)",
	Question: "How do split time and the longest stall grow from a 100 MiB to a 4 GiB parent?"}

// scaleSizes are question 11's parent sizes: the two of question 1 and,
// with Big, 4 GiB.
//
// SHARDSPLIT_Q11_ONLY names one of them ("100 MiB", "1 GiB", "4 GiB") to
// measure it alone: on a shared 2-core machine five alternated rounds of
// every size may not fit in the time there is, and a size measured alone
// still compares its variants side by side.
func (c Config) scaleSizes() []size {
	small, large := c.parentSizes()
	sizes := []size{small, large}
	if !c.Quick && c.Big {
		sizes = append(sizes, size{"4 GiB", 4 << 20})
	}
	if only := os.Getenv("SHARDSPLIT_Q11_ONLY"); only != "" {
		for _, s := range append(sizes, size{"4 GiB", 4 << 20}) {
			if s.Name == only {
				return []size{s}
			}
		}
	}
	return sizes
}

// scaleRow is one size's medians.
type scaleRow struct {
	Case                                       splitCase
	ParentMiB, Window, Stall, Steady           float64
	Clone, CatchUp, Handoff, Node, Copied      float64
	ChildMax, Flush, RetireClose, RetireRemove float64
	Wait                                       float64 // aligned: the wait for the parent's own flush
	CPU                                        float64 // the split's CPU above the steady rate
	Throughput                                 float64 // writes/s in the window against the steady window's
	P99First, P99Steady                        float64 // write_p99_first_second_ms, write_p99_steady_second_ms
	History                                    float64 // writes the children took from the retained history
}

func scaleRowOf(k splitCase, runs []splitRun) scaleRow {
	return scaleRow{Case: k,
		ParentMiB:    median(runs, func(r splitRun) float64 { return r.ParentMiB }),
		Window:       median(runs, func(r splitRun) float64 { return r.WindowMs }),
		Stall:        median(runs, func(r splitRun) float64 { return r.StallMs }),
		Steady:       median(runs, func(r splitRun) float64 { return r.SteadyStallMs }),
		Clone:        median(runs, func(r splitRun) float64 { return r.PhaseMs["clone"] }),
		CatchUp:      median(runs, func(r splitRun) float64 { return r.PhaseMs["catch-up"] }),
		Handoff:      median(runs, func(r splitRun) float64 { return r.PhaseMs["handoff"] }),
		Node:         median(runs, func(r splitRun) float64 { return r.NodeStallMs }),
		Copied:       median(runs, func(r splitRun) float64 { return r.CopiedMiB }),
		ChildMax:     median(runs, func(r splitRun) float64 { return r.ChildMaxMs }),
		Flush:        median(runs, func(r splitRun) float64 { return r.FlushMs }),
		RetireClose:  median(runs, func(r splitRun) float64 { return r.RetireCloseMs }),
		RetireRemove: median(runs, func(r splitRun) float64 { return r.RetireRemoveMs }),
		Wait:         median(runs, func(r splitRun) float64 { return r.AlignWaitMs }),
		CPU:          median(runs, func(r splitRun) float64 { return r.SplitCPUMs }),
		Throughput:   median(runs, func(r splitRun) float64 { return r.DuringOps / nonzero(r.SteadyOps) }),
		P99First:     median(runs, func(r splitRun) float64 { return r.P99FirstSecondMs }),
		P99Steady:    median(runs, func(r splitRun) float64 { return r.P99SteadySecondMs }),
		History:      median(runs, func(r splitRun) float64 { return r.HistoryOps }),
	}
}

// scaleVariant is one way question 11 makes its splits.
type scaleVariant struct {
	name         string
	align, flush bool
}

// scaleVariants: the default (children from the parent's last flushed
// state and its retained history), the parent flushed first (as before
// the history), and the split waiting for the parent's own flush first.
var scaleVariants = []scaleVariant{
	{name: "from the flushed state"},
	{name: "the parent flushed first", flush: true},
	{name: "after the parent's own flush", align: true},
}

// runScale answers question 11. Each size is measured in every variant
// (scaleVariants), the runs alternated: round i makes run i of every size
// and variant, so a slow minute of the shared machine lands on all of
// them alike.
//
// SHARDSPLIT_Q11_VARIANTS=n keeps the first n variants (the default first):
// a 4 GiB run takes minutes, most of them cloning and verifying.
func runScale(ctx context.Context, cfg Config) (Answer, error) {
	a := Answer{Command: cfg.reproduce(11)}
	sizes := cfg.scaleSizes()
	scaleVariants := scaleVariants
	if n, err := strconv.Atoi(os.Getenv("SHARDSPLIT_Q11_VARIANTS")); err == nil && n >= 1 && n < len(scaleVariants) {
		scaleVariants = scaleVariants[:n]
	}
	runs := make([][][]splitRun, len(scaleVariants))
	cases := make([][]splitCase, len(scaleVariants))
	for v, sv := range scaleVariants {
		runs[v] = make([][]splitRun, len(sizes))
		for _, sz := range sizes {
			cases[v] = append(cases[v], splitCase{Layout: storage.LayoutPerShard, Size: sz, Rate: 5000, Ways: 2, Align: sv.align, Flush: sv.flush, Warm: true})
		}
	}
	n := cfg.runs()
	for i := range n {
		for s := range sizes {
			for v := range scaleVariants {
				r, err := cfg.measureRun(ctx, "q11", cases[v][s], i, n)
				if err != nil {
					return a, err
				}
				runs[v][s] = append(runs[v][s], r)
			}
		}
	}
	rows := make([][]scaleRow, len(scaleVariants))
	for v := range scaleVariants {
		for s := range sizes {
			a.Numbers = append(a.Numbers, scaleNumbers(cases[v][s], runs[v][s])...)
			rows[v] = append(rows[v], scaleRowOf(cases[v][s], runs[v][s]))
		}
	}
	t := Table{Header: []string{"parent", "split", "on disk (MiB)", "wait (ms)", "split time (ms)", "clone (ms)", "catch-up (ms)", "handoff (ms)", "stall (ms)", "steady stall (ms)",
		"write p99 first / steady second (ms)", "throughput", "from the history (writes)", "split's CPU (ms)", "apply lock (ms)", "copied (MiB)",
		"slowest child (ms)", "parent's flush (ms)", "retirement: close / remove (ms)"}}
	var splits, stalls []line
	for v, sv := range scaleVariants {
		split, stall := line{Name: "split " + sv.name}, line{Name: "split " + sv.name}
		for _, r := range rows[v] {
			t.Rows = append(t.Rows, []string{r.Case.Size.Name, sv.name, num(r.ParentMiB), num(r.Wait), num(r.Window), num(r.Clone), num(r.CatchUp), num(r.Handoff),
				num(r.Stall), num(r.Steady), num(r.P99First) + " / " + num(r.P99Steady), num(r.Throughput), num(r.History), num(r.CPU), num(r.Node), num(r.Copied),
				num(r.ChildMax), num(r.Flush), num(r.RetireClose) + " / " + num(r.RetireRemove)})
			split.XYs = append(split.XYs, plotter.XY{X: r.ParentMiB, Y: r.Window})
			stall.XYs = append(stall.XYs, plotter.XY{X: r.ParentMiB, Y: r.Stall})
		}
		splits, stalls = append(splits, split), append(stalls, stall)
		a.Goals = append(a.Goals, scaleGoals(rows[v], cfg.Quick, sv.name)...)
	}
	steady := line{Name: "steady windows as long (default runs)"}
	for _, r := range rows[0] {
		steady.XYs = append(steady.XYs, plotter.XY{X: r.ParentMiB, Y: r.Steady})
	}
	stalls = append(stalls, steady)
	a.Tables = []Table{t}
	a.Answer = scaleAnswer(rows[0])
	a.Summary = scaleSummary(rows[0])
	for v, sv := range scaleVariants[1:] {
		a.Answer += " With " + sv.name + ": " + scaleAnswer(rows[v+1])
	}
	if err := lines(cfg.Out, "q11-scale.png", "Split time under 5,000 fsync'd writes/s against parent size (per-shard, medians)",
		"parent on disk (MiB, log scale)", "request (or start) to end of handoff, ms", true, splits); err != nil {
		return a, err
	}
	if err := lines(cfg.Out, "q11-stall.png", "Longest write stall in the split window against parent size (medians)",
		"parent on disk (MiB, log scale)", "ms", true, stalls); err != nil {
		return a, err
	}
	a.Charts = []string{"q11-scale.png", "q11-stall.png"}
	a.NotMeasured = "parents above 4 GiB in this command (8 GiB: alternated probe pairs, TestScaleProbe with SHARDSPLIT_SCALE_DOCS=8388608, in design/2026-11-30-split-scale.md; BenchmarkSplitUnderLoad runs it with SHARDSPLIT_BENCH_8GIB=1); " +
		"the shared layout (its split links no files: see question 1); the cost after the handoff (question 5); " +
		"a parent in compaction debt (each dataset settles its load's compactions before it is cloned; a parent at L0's stop-writes depth takes the copy-WAL fallback) " +
		"and a parent opened moments before its split (each run waits for the parent's first own memtable flush under the load, then its steady window, then the split)."
	switch {
	case cfg.Quick:
		a.NotMeasured = "quick run: 4 GiB not measured. " + a.NotMeasured
	case !cfg.Big:
		a.NotMeasured = "4 GiB: not measured in this run (it takes ~15 more minutes; rerun with --big). " + a.NotMeasured
	}
	return a, nil
}

// scaleNumbers are every number question 11 reports of one case.
func scaleNumbers(k splitCase, runs []splitRun) []Number {
	ns := caseNumbers(k, runs)
	if k.Warm {
		ns = append(ns, Measured(k.String()+": the wait for the parent's first own flush under the load, before the steady window (not in the window)", "ms", field(runs, func(r splitRun) float64 { return r.WarmWaitMs })...),
			Measured(k.String()+": that flush came (1) or the wait reached its 10 s bound (0)", "warmed", field(runs, func(r splitRun) float64 { return r.Warmed })...))
	}
	if k.Align {
		ns = append(ns, Measured(k.String()+": the wait for the parent's own flush before the split began (not in the window)", "ms", field(runs, func(r splitRun) float64 { return r.AlignWaitMs })...),
			Measured(k.String()+": the wait ended after the flush (1) or at its 5 s bound (0, the split then flushed)", "aligned", field(runs, func(r splitRun) float64 { return r.Aligned })...))
	}
	ns = append(ns, Measured(k.String()+": write p99 of the writes issued in the first second from the request (write_p99_first_second_ms)", "ms", field(runs, func(r splitRun) float64 { return r.P99FirstSecondMs })...),
		Measured(k.String()+": median over the steady window's seconds of each second's write p99 (write_p99_steady_second_ms)", "ms", field(runs, func(r splitRun) float64 { return r.P99SteadySecondMs })...),
		Measured(k.String()+": writes the children took from the parent's retained history", "writes", field(runs, func(r splitRun) float64 { return r.HistoryOps })...))
	for _, p := range []string{"clone", "catch-up", "handoff"} {
		ns = append(ns, Measured(fmt.Sprintf("%s: %s phase", k, p), "ms", field(runs, func(r splitRun) float64 { return r.PhaseMs[p] })...))
	}
	ns = append(ns, Measured(k.String()+": parent on disk", "MiB", field(runs, func(r splitRun) float64 { return r.ParentMiB })...),
		Measured(k.String()+": slowest child's creation (flush, checkpoint, open, excise)", "ms", field(runs, func(r splitRun) float64 { return r.ChildMaxMs })...),
		Measured(k.String()+": the parent's flush before its checkpoint", "ms", field(runs, func(r splitRun) float64 { return r.FlushMs })...),
		Measured(k.String()+": of that flush, the memtable rotation (the parent's commits held)", "ms", field(runs, func(r splitRun) float64 { return r.RotateMs })...),
		Measured(k.String()+": flushes not forced (the parent's L0 at the stop-writes depth)", "children", field(runs, func(r splitRun) float64 { return r.SkippedFlushes })...),
		Measured(k.String()+": longest stall in a steady second (median over the steady window's seconds)", "ms", field(runs, func(r splitRun) float64 { return r.Steady1sStallMs })...),
		Measured(k.String()+": longest stall in the second after the handoff", "ms", field(runs, func(r splitRun) float64 { return r.AfterHandoffStallMs })...),
		Measured(k.String()+": the process's CPU time in the window above the steady window's rate (the split's)", "ms", field(runs, func(r splitRun) float64 { return r.SplitCPUMs })...))
	for i := range k.Ways {
		ns = append(ns, Measured(fmt.Sprintf("%s: child %d's creation (the first pays the parent's flush)", k, i+1), "ms",
			field(runs, func(r splitRun) float64 { return at(r.ChildMs, i) })...))
	}
	return append(ns,
		Measured(k.String()+": the parent's retirement: its store's close", "ms", field(runs, func(r splitRun) float64 { return r.RetireCloseMs })...),
		Measured(k.String()+": the parent's retirement: removing its directory", "ms", field(runs, func(r splitRun) float64 { return r.RetireRemoveMs })...))
}

// scaleAnswer writes question 11's answer from the medians.
func scaleAnswer(rows []scaleRow) string {
	if len(rows) < 2 {
		return "Fewer than two sizes were measured."
	}
	first, last := rows[0], rows[len(rows)-1]
	grow := last.ParentMiB / nonzero(first.ParentMiB)
	ratio := last.Window / nonzero(first.Window)
	verdict := "close to flat"
	switch {
	case ratio > grow/2:
		verdict = "roughly proportional to size"
	case ratio > 1.5:
		verdict = "growing, well below proportional"
	}
	return fmt.Sprintf("From a %s to a %s parent (%.0f× the bytes) the split took %s ms → %s ms (%.2f×) and its longest write stall went %s ms → %s ms (steady windows: %s → %s ms): %s.",
		first.Case.Size.Name, last.Case.Size.Name, grow, num(first.Window), num(last.Window), ratio,
		num(first.Stall), num(last.Stall), num(first.Steady), num(last.Steady), verdict)
}

// scaleGoals evaluates the scale goals on the largest size measured: its
// split ≤ 1.5× the smallest's, and at every size a longest stall ≤ 20 ms
// and ≤ 1.25× the steady windows as long.
func scaleGoals(rows []scaleRow, quick bool, variant string) []Goal {
	if len(rows) < 2 {
		return nil
	}
	first, last := rows[0], rows[len(rows)-1]
	g := ratioGoal("4 GiB parent, split "+variant+": split time ≤ 1.5× the 100 MiB split", last.Window/nonzero(first.Window), 1.5, true,
		fmt.Sprintf("%s / %s ms, medians, %s against %s", num(last.Window), num(first.Window), last.Case.Size.Name, first.Case.Size.Name))
	if last.Case.Size.Docs != 4<<20 {
		g.Met = false
		g.Why = fmt.Sprintf("not measured at 4 GiB (largest parent %s%s; --big adds it)", last.Case.Size.Name, map[bool]string{true: ", quick run", false: ""}[quick])
	}
	gs := []Goal{g}
	for _, r := range rows {
		gs = append(gs,
			ratioGoal(fmt.Sprintf("%s parent, split %s: longest stall ≤ 20 ms", r.Case.Size.Name, variant), r.Stall, 20, true, "ms, median"),
			ratioGoal(fmt.Sprintf("%s parent, split %s: longest stall ≤ 1.25× the steady windows as long", r.Case.Size.Name, variant), r.Stall/nonzero(r.Steady), 1.25, true,
				fmt.Sprintf("%s / %s ms, medians", num(r.Stall), num(r.Steady))),
			ratioGoal(fmt.Sprintf("%s parent, split %s: write p99 of the first second ≤ 1.5× a steady second's", r.Case.Size.Name, variant), r.P99First/nonzero(r.P99Steady), 1.5, true,
				fmt.Sprintf("%s / %s ms, medians", num(r.P99First), num(r.P99Steady))),
			ratioGoal(fmt.Sprintf("%s parent, split %s: throughput during ≥ 0.97 of steady", r.Case.Size.Name, variant), r.Throughput, 0.97, false, "median"))
	}
	return gs
}

// at is xs[i], or 0 when a run made fewer children.
func at(xs []float64, i int) float64 {
	if i < len(xs) {
		return xs[i]
	}
	return 0
}
