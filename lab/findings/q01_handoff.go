package findings

import (
	"context"
	"fmt"
	"strings"

	"github.com/shardsplit/shardsplit/storage"
)

// handoffQuestion is question 1 of design/findings.md, answered by runHandoff.
var handoffQuestion = Question{ID: 1, Slug: "handoff", Title: "Write pause at the handoff", Run: runHandoff,
	RaisedIn: "#13923 (hand-off), MongoDB's critical section, Elasticsearch resharding",
	Question: "How long are writes paused at the handoff, against parent size, write rate, number of children and layout, and against a handoff that holds every write until the new table is durable?"}

// mongoCriticalMs is MongoDB resharding's write-blocking critical section
// (it engages when the estimated remaining time is under 500 ms; 2 s up to
// 8.0.12): the peer bound question 1 compares with.
const mongoCriticalMs = 500

// handoffCases are question 1's cases. The factors are varied one at a
// time around a small parent (per-shard, 5,000 writes/s, 2 children: a
// run there takes seconds); the large parent is the goals' case (a
// run at 1 GiB takes ~30 s, most of it opening and verifying the index).
// The hold-until-durable variant runs beside the goal case, the small base
// and the shared layout (quick: the goal case only).
func (c Config) handoffCases() (goal splitCase, cases []splitCase) {
	small, large := c.parentSizes()
	base := splitCase{Layout: storage.LayoutPerShard, Size: small, Rate: 5000, Ways: 2}
	goal = base
	goal.Size = large
	vary := []splitCase{goal, base}
	k := base
	k.Rate = 1000
	vary = append(vary, k)
	for _, ways := range []int{4, 8} {
		k = base
		k.Ways = ways
		vary = append(vary, k)
	}
	k = base
	k.Layout = storage.LayoutShared
	vary = append(vary, k)
	for _, k := range vary {
		cases = append(cases, k)
		if k == goal || (!c.Quick && (k == base || k.Layout == storage.LayoutShared)) {
			held := k
			held.Hold = true
			cases = append(cases, held)
		}
	}
	return goal, cases
}

// handoffRow is one case's medians.
type handoffRow struct {
	Case                                  splitCase
	Stall, Steady, Node, Window, TputRate float64
}

func handoffRowOf(k splitCase, runs []splitRun) handoffRow {
	return handoffRow{Case: k,
		Stall:    median(runs, func(r splitRun) float64 { return r.StallMs }),
		Steady:   median(runs, func(r splitRun) float64 { return r.SteadyStallMs }),
		Node:     median(runs, func(r splitRun) float64 { return r.NodeStallMs }),
		Window:   median(runs, func(r splitRun) float64 { return r.WindowMs }),
		TputRate: median(runs, func(r splitRun) float64 { return r.DuringOps / max(1, r.SteadyOps) }),
	}
}

// runHandoff answers question 1.
func runHandoff(ctx context.Context, cfg Config) (Answer, error) {
	a := Answer{Command: cfg.reproduce(1)}
	base, cases := cfg.handoffCases()
	var rows []handoffRow
	for _, k := range cases {
		runs, err := cfg.measure(ctx, "q1", k, cfg.runs())
		if err != nil {
			return a, err
		}
		a.Numbers = append(a.Numbers, caseNumbers(k, runs)...)
		rows = append(rows, handoffRowOf(k, runs))
	}
	a.Tables = []Table{handoffTable(rows)}
	a.Answer = handoffAnswer(base, rows)
	a.Summary = handoffSummary(base, rows)
	a.Goals = handoffGoals(base, rows, cfg.Quick)
	if err := handoffChart(cfg.Out, rows); err != nil {
		return a, err
	}
	a.Charts = []string{"q01-handoff-stall.png"}
	a.NotMeasured = "4 GiB parents (question 11 measures the split at 4 GiB with --big); " +
		"more than one node or replicas (one process, one disk); a real network between coordinator and shard; " +
		"write rates above 5,000/s; the stall of writes to other shards (only writes aimed at the parent's keys count). " +
		"The steady-window stall is this machine's fsync noise, measured in the same runs before the split request. A window longer than the steady span (2 s; quick 1 s) is compared with one steady window of the whole span, which favours the steady side."
	return a, nil
}

func handoffTable(rows []handoffRow) Table {
	t := Table{Header: []string{"case", "stall in window (ms)", "steady stall (ms)", "stall / steady", "apply lock held (ms)", "window (ms)", "throughput / steady"}}
	for _, r := range rows {
		t.Rows = append(t.Rows, []string{r.Case.String(), num(r.Stall), num(r.Steady), ratio(r.Stall, r.Steady),
			num(r.Node), num(r.Window), fmt.Sprintf("%.2f", r.TputRate)})
	}
	return t
}

// ratio prints a/b, or "n/a" when b is 0 (no steady window read).
func ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func nonzero(v float64) float64 {
	if v == 0 {
		return 1e-9
	}
	return v
}

// findRow returns the row of case k.
func findRow(rows []handoffRow, k splitCase) (handoffRow, bool) {
	for _, r := range rows {
		if r.Case == k {
			return r, true
		}
	}
	return handoffRow{}, false
}

// handoffAnswer writes question 1's answer from the medians.
func handoffAnswer(base splitCase, rows []handoffRow) string {
	b, ok := findRow(rows, base)
	if !ok {
		return "No base case was measured."
	}
	held := base
	held.Hold = true
	h, _ := findRow(rows, held)
	worst := b
	for _, r := range rows {
		if !r.Case.Hold && r.Stall > worst.Stall {
			worst = r
		}
	}
	worstIs := fmt.Sprintf("the worst of our handoff's cases (%s) stalled %s ms", worst.Case, num(worst.Stall))
	if worst.Case == base {
		worstIs = "no other case of our handoff stalled longer"
	}
	s := fmt.Sprintf("At the goal case (%s) the longest write stall in the split window was %s ms (median), against %s ms in steady windows as long (%s×), "+
		"and the parent's apply lock was held %s ms; %s, %.1f× below MongoDB's %d ms critical section.",
		base, num(b.Stall), num(b.Steady), ratio(b.Stall, b.Steady), num(b.Node), worstIs, mongoCriticalMs/nonzero(worst.Stall), mongoCriticalMs)
	var others []string
	for _, r := range rows {
		if !r.Case.Hold && r.Case != base {
			others = append(others, fmt.Sprintf("%s %s ms (steady %s ms, lock %s ms)", r.Case, num(r.Stall), num(r.Steady), num(r.Node)))
		}
	}
	if len(others) > 0 {
		s += " The other cases stalled: " + strings.Join(others, "; ") + "."
	}
	if h.Case == held {
		s += fmt.Sprintf(" Holding every parent write until the new table is durable (relocation-style) held the lock %s ms instead of %s ms and stalled writes %s ms instead of %s ms.",
			num(h.Node), num(b.Node), num(h.Stall), num(b.Stall))
	}
	return s
}

// handoffGoals evaluates the handoff goals on the goal case (at the quick
// run's large size when quick).
func handoffGoals(base splitCase, rows []handoffRow, quick bool) []Goal {
	b, ok := findRow(rows, base)
	if !ok {
		return nil
	}
	at := base.String()
	goals := []Goal{
		ratioGoal("1 GiB parent, per-shard, 5,000 fsync'd writes/s: the split window's longest stall ≤ 1.25× the steady-window stall",
			b.Stall/nonzero(b.Steady), 1.25, true, fmt.Sprintf("%s / %s ms, medians at %s", num(b.Stall), num(b.Steady), at)),
		ratioGoal("same case: throughput during the split ≥ 0.95 of steady",
			b.TputRate, 0.95, false, "median at "+at),
	}
	if quick {
		for i := range goals {
			notTheGoalCase(&goals[i], base.Size.Name)
		}
	}
	return goals
}

// notTheGoalCase marks a goal evaluated on a quick run's data as not met:
// the numbers are not the goal's case.
func notTheGoalCase(g *Goal, measuredAt string) {
	why := "quick run: measured at " + measuredAt + ", not the goal's case"
	if g.Why != "" {
		why += " (" + g.Why + ")"
	}
	g.Met, g.Why = false, why
}

func handoffChart(dir string, rows []handoffRow) error {
	var labels []string
	steady, ours, held := bars{Name: "steady windows"}, bars{Name: "our handoff"}, bars{Name: "held until durable (0: not measured)"}
	for _, r := range rows {
		if r.Case.Hold {
			continue
		}
		k := r.Case
		labels = append(labels, fmt.Sprintf("%s %s\n%d-way %.0f/s", k.Size.Name, k.Layout, k.Ways, k.Rate))
		steady.Values = append(steady.Values, r.Steady)
		ours.Values = append(ours.Values, r.Stall)
		k.Hold = true
		h, _ := findRow(rows, k)
		held.Values = append(held.Values, h.Stall)
	}
	return groupedBars(dir, "q01-handoff-stall.png", "Longest write stall of the parent's keys (medians)", "ms", labels, []bars{steady, ours, held})
}
