package findings

import (
	"context"
	"fmt"
	"strings"
)

// afterHandoffQuestion is question 5 of design/findings.md, answered by
// runAfterHandoff.
var afterHandoffQuestion = Question{ID: 5, Slug: "after-handoff", Title: "The cost after the handoff", Run: runAfterHandoff,
	RaisedIn: "this project (the second after a 1 GiB handoff stalled 34–39 ms against 12–15 ms steady)",
	Question: "Does retiring the parent (its close and file deletion) disturb writes in the second after the handoff, and does pacing it help?"}

// The goals for the second after the handoff.
const (
	afterStallGoal = 1.25 // its longest stall ≤ 1.25× a steady second's
	afterTputGoal  = 0.97 // writes acknowledged in it ≥ 0.97 of a steady second's
)

// afterRow is question 5's medians for one case or strategy.
type afterRow struct {
	Name                    string
	Steady1s, After, Retire float64 // ms; Retire: the split's cleanup phase (retiring the parent), 0 if unknown
	AfterOps, SteadyOps     float64 // writes acked in the second after; steady writes/s
	StallRatio, TputRatio   float64 // medians of the per-run ratios
	StallRatios, TputRatios []float64
	Runs                    int
}

func afterRowOfCase(k splitCase, runs []splitRun) afterRow {
	r := afterRow{Name: k.String(), Runs: len(runs),
		Steady1s:  median(runs, func(r splitRun) float64 { return r.Steady1sStallMs }),
		After:     median(runs, func(r splitRun) float64 { return r.AfterHandoffStallMs }),
		Retire:    median(runs, func(r splitRun) float64 { return r.PhaseMs["cleanup"] }),
		AfterOps:  median(runs, func(r splitRun) float64 { return r.AfterHandoffOps }),
		SteadyOps: median(runs, func(r splitRun) float64 { return r.SteadySecondOps }),
	}
	r.StallRatios = field(runs, func(r splitRun) float64 { return r.AfterHandoffStallMs / nonzero(r.Steady1sStallMs) })
	r.TputRatios = field(runs, func(r splitRun) float64 { return r.AfterHandoffOps / max(1, r.SteadySecondOps) })
	r.StallRatio, r.TputRatio = Measured("", "", r.StallRatios...).Median, Measured("", "", r.TputRatios...).Median
	return r
}

func afterRowOfStrategy(rounds []strategyRound, s string) afterRow {
	r := afterRow{Name: s + " (question 2-4 runs)", Runs: len(of(rounds, s, func(strategyRun) float64 { return 0 })),
		Steady1s:  med(rounds, s, func(r strategyRun) float64 { return r.Summary.Steady1sStallMs }),
		After:     med(rounds, s, func(r strategyRun) float64 { return r.Summary.AfterHandoffStallMs }),
		AfterOps:  med(rounds, s, func(r strategyRun) float64 { return r.AfterHandoffOps }),
		SteadyOps: med(rounds, s, func(r strategyRun) float64 { return r.Summary.ThroughputSteadyOps }),
	}
	r.StallRatios = of(rounds, s, func(r strategyRun) float64 { return r.Summary.AfterHandoffStallMs / nonzero(r.Summary.Steady1sStallMs) })
	r.TputRatios = of(rounds, s, func(r strategyRun) float64 {
		return r.AfterHandoffOps / max(1, r.Summary.ThroughputSteadyOps)
	})
	r.StallRatio, r.TputRatio = Measured("", "", r.StallRatios...).Median, Measured("", "", r.TputRatios...).Median
	return r
}

// runAfterHandoff answers question 5 on question 1's goal case (1 GiB,
// per-shard, 5,000 fsync'd writes/s, 2 children; its runs are reused when
// question 1 measured them), and quotes the same measures of the
// three-strategy runs when questions 2-4 made them in this Run.
func runAfterHandoff(ctx context.Context, cfg Config) (Answer, error) {
	a := Answer{Command: cfg.reproduce(5)}
	goal, _ := cfg.handoffCases()
	runs, err := cfg.measure(ctx, "q5", goal, cfg.runs())
	if err != nil {
		return a, err
	}
	p := goal.String() + ": "
	a.Numbers = append(a.Numbers,
		Measured(p+"longest stall in the second after the handoff", "ms", field(runs, func(r splitRun) float64 { return r.AfterHandoffStallMs })...),
		Measured(p+"median steady one-second window's longest stall", "ms", field(runs, func(r splitRun) float64 { return r.Steady1sStallMs })...),
		Measured(p+"writes/s acknowledged in the second after the handoff", "writes/s", field(runs, func(r splitRun) float64 { return r.AfterHandoffOps })...),
		Measured(p+"steady writes/s", "writes/s", field(runs, func(r splitRun) float64 { return r.SteadySecondOps })...),
		Measured(p+"retiring the parent (the split's cleanup phase)", "ms", field(runs, func(r splitRun) float64 { return r.PhaseMs["cleanup"] })...),
	)
	row := afterRowOfCase(goal, runs)
	a.Numbers = append(a.Numbers, Measured(p+"after-handoff stall / steady second's, per run", "ratio", row.StallRatios...),
		Measured(p+"writes in the second after / steady second's, per run", "ratio", row.TputRatios...))
	rows := []afterRow{row}
	cfg.shared.mu.Lock()
	rounds := cfg.shared.strategies
	cfg.shared.mu.Unlock()
	for _, s := range strategies {
		if len(rounds) == 0 {
			break
		}
		r := afterRowOfStrategy(rounds, s)
		a.Numbers = append(a.Numbers,
			Measured(r.Name+": longest stall in the second after the split window", "ms", of(rounds, s, func(r strategyRun) float64 { return r.Summary.AfterHandoffStallMs })...),
			Measured(r.Name+": median steady one-second window's longest stall", "ms", of(rounds, s, func(r strategyRun) float64 { return r.Summary.Steady1sStallMs })...),
			Measured(r.Name+": writes in the second after / steady second's", "ratio", r.TputRatios...))
		rows = append(rows, r)
	}
	a.Tables = []Table{afterTable(rows)}
	a.Answer = afterAnswer(rows[0], rows[1:])
	a.Summary = afterSummary(rows[0])
	a.Goals = afterGoals(rows[0], cfg.Quick, goal.Size.Name)
	if err := afterChart(cfg.Out, runs); err != nil {
		return a, err
	}
	a.Charts = []string{"q05-after-handoff.png"}
	a.NotMeasured = "A paced or deferred retirement: none was built, since the retirement does not wait for the parent's compaction and costs tens of ms; " +
		"the before-and-after of that design is the split-scale benchmark (design/2026-11-30-split-scale.md), not these runs. " +
		"The steady one-second stall is the median over the whole seconds of the steady window, as compare's steady_1s_stall_ms takes it: at 1 GiB the window holds 2 and the median of two is taken as the larger (quick: the whole shorter window), " +
		"the disk's own noise in the same runs. Writes to shards other than the parent (the index has one shard). " +
		"The three strategies' rows are quoted only when questions 2-4 ran in the same invocation; " +
		"newindex's second after starts at the alias swap and its stall counts the writes that waited out the write block and ended in that second, so it is the block's length."
	return a, nil
}

func afterTable(rows []afterRow) Table {
	t := Table{Header: []string{"case", "runs", "steady second's stall (ms)", "stall in the second after (ms)", "after / steady (median of runs)",
		"steady writes/s", "writes/s in the second after", "after / steady (median of runs)", "retiring the parent (ms)"}}
	for _, r := range rows {
		retire := "–"
		if r.Retire > 0 {
			retire = num(r.Retire)
		}
		t.Rows = append(t.Rows, []string{r.Name, fmt.Sprint(r.Runs), num(r.Steady1s), num(r.After), fmt.Sprintf("%.2f", r.StallRatio),
			num(r.SteadyOps), num(r.AfterOps), fmt.Sprintf("%.2f", r.TputRatio), retire})
	}
	return t
}

// afterAnswer writes question 5's answer from the medians.
func afterAnswer(goal afterRow, others []afterRow) string {
	s := fmt.Sprintf("At %s the longest write stall in the second after the handoff was %s ms (median) against %s ms in a steady second (%.2f×, median of the runs' ratios), "+
		"and that second acknowledged writes at %.2f of the steady rate; retiring the parent took %s ms of it.",
		goal.Name, num(goal.After), num(goal.Steady1s), goal.StallRatio, goal.TputRatio, num(goal.Retire))
	if len(others) > 0 {
		var parts []string
		for _, r := range others {
			parts = append(parts, fmt.Sprintf("%s %s ms against %s ms (%.2f×), writes %.2f", r.Name, num(r.After), num(r.Steady1s), r.StallRatio, r.TputRatio))
		}
		s += " The same measures in the three-strategy runs: " + strings.Join(parts, "; ") + "."
	}
	s += " The retirement is not paced: it was made cheap instead (the parent's close abandons the compaction it is running instead of waiting for it; the split's start abandons it too unless Pebble signals L0 or debt pressure), which leaves little to pace."
	return s
}

// afterGoals evaluates the after-handoff goals on the goal case.
func afterGoals(r afterRow, quick bool, sizeName string) []Goal {
	goals := []Goal{
		ratioGoal("1 GiB parent, per-shard, 5,000 fsync'd writes/s: the longest stall in the second after the handoff ≤ 1.25× a steady second's",
			r.StallRatio, afterStallGoal, true, fmt.Sprintf("median of the runs' ratios; %s / %s ms medians", num(r.After), num(r.Steady1s))),
		ratioGoal("same case: throughput in the second after the handoff ≥ 0.97 of steady",
			r.TputRatio, afterTputGoal, false, fmt.Sprintf("median of the runs' ratios; %s / %s writes/s medians", num(r.AfterOps), num(r.SteadyOps))),
	}
	if quick {
		for i := range goals {
			notTheGoalCase(&goals[i], sizeName)
		}
	}
	return goals
}

func afterChart(dir string, runs []splitRun) error {
	var labels []string
	steady, after := bars{Name: "steady second (median of the steady window's)"}, bars{Name: "the second after the handoff"}
	for i, r := range runs {
		labels = append(labels, fmt.Sprintf("run %d", i+1))
		steady.Values = append(steady.Values, r.Steady1sStallMs)
		after.Values = append(after.Values, r.AfterHandoffStallMs)
	}
	return groupedBars(dir, "q05-after-handoff.png", "Longest write stall: a steady second against the second after the handoff", "ms", labels, []bars{steady, after})
}
