package findings

import (
	"context"
	"fmt"

	"github.com/shardsplit/shardsplit/storage"
)

// mergeQuestion is question 10 of design/findings.md, answered by runMerge.
var mergeQuestion = Question{ID: 10, Slug: "merge", Title: "Reversibility: in-place merge", Run: runMerge,
	RaisedIn: "#18809 (\"a one-time structural operation\", no reversible remapping)",
	Question: "Can a split be undone in place, and what does merging two siblings cost?"}

// mergeCases are question 10's cases: the large dataset's root split in
// two before the load, the two siblings (half each) merged under 5,000
// fsync'd writes/s, in both layouts.
func (c Config) mergeCases() []splitCase {
	_, large := c.parentSizes()
	var cases []splitCase
	for _, layout := range []storage.Layout{storage.LayoutPerShard, storage.LayoutShared} {
		cases = append(cases, splitCase{Layout: layout, Size: large, Rate: 5000, Ways: 2, Merge: true})
	}
	return cases
}

// mergeRow is one case's medians.
type mergeRow struct {
	Case                                      splitCase
	Window, Stall, Steady, Node, Tput, Copied float64
	Written                                   float64
}

func mergeRowOf(k splitCase, runs []splitRun) mergeRow {
	return mergeRow{Case: k,
		Window:  median(runs, func(r splitRun) float64 { return r.WindowMs }),
		Stall:   median(runs, func(r splitRun) float64 { return r.StallMs }),
		Steady:  median(runs, func(r splitRun) float64 { return r.SteadyStallMs }),
		Node:    median(runs, func(r splitRun) float64 { return r.NodeStallMs }),
		Tput:    median(runs, func(r splitRun) float64 { return r.DuringOps / max(1, r.SteadyOps) }),
		Copied:  median(runs, func(r splitRun) float64 { return r.CopiedMiB }),
		Written: median(runs, func(r splitRun) float64 { return r.WrittenMiB }),
	}
}

// runMerge answers question 10.
func runMerge(ctx context.Context, cfg Config) (Answer, error) {
	a := Answer{Command: cfg.reproduce(10)}
	var rows []mergeRow
	for _, k := range cfg.mergeCases() {
		runs, err := cfg.measure(ctx, "q10", k, cfg.runs())
		if err != nil {
			return a, err
		}
		a.Numbers = append(a.Numbers, caseNumbers(k, runs)...)
		a.Numbers = append(a.Numbers, Measured(k.String()+": bytes the engine wrote during the run", "MiB",
			field(runs, func(r splitRun) float64 { return r.WrittenMiB })...))
		rows = append(rows, mergeRowOf(k, runs))
	}
	t := Table{Header: []string{"case", "merge time (ms)", "stall (ms)", "steady stall (ms)", "stall / steady", "apply lock held (ms)", "throughput / steady", "copied (MiB)"}}
	var labels []string
	steady, stall, window := bars{Name: "steady-window stall (ms)"}, bars{Name: "merge-window stall (ms)"}, bars{Name: "merge time (ms / 10)"}
	for _, r := range rows {
		t.Rows = append(t.Rows, []string{r.Case.String(), num(r.Window), num(r.Stall), num(r.Steady), ratio(r.Stall, r.Steady),
			num(r.Node), fmt.Sprintf("%.2f", r.Tput), num(r.Copied)})
		labels = append(labels, fmt.Sprintf("%s %s", r.Case.Size.Name, r.Case.Layout))
		steady.Values = append(steady.Values, r.Steady)
		stall.Values = append(stall.Values, r.Stall)
		window.Values = append(window.Values, r.Window/10)
	}
	a.Tables = []Table{t}
	a.Answer = mergeAnswer(rows)
	a.Summary = mergeSummary(rows)
	if err := groupedBars(cfg.Out, "q10-merge.png", "Merging two siblings under 5,000 fsync'd writes/s (medians)", "ms", labels, []bars{steady, stall, window}); err != nil {
		return a, err
	}
	a.Charts = []string{"q10-merge.png"}
	a.NotMeasured = "merges of more than two siblings, or of siblings of unequal size; merges of shards that were never split (OpenSearch's _shrink case); " +
		"search during the merge; the cost after the merge's handoff (the sources' retirement). " +
		"No goal is set for the merge; the stall and throughput are read against the same runs' steady windows. A window longer than the steady span (2 s; quick 1 s) is compared with one steady window of the whole span, which favours the steady side."
	return a, nil
}

// mergeAnswer writes question 10's answer from the medians.
func mergeAnswer(rows []mergeRow) string {
	if len(rows) == 0 {
		return "No merge was measured."
	}
	s := "Yes: a split is undone in place by merging the siblings back, under load and with every acknowledged write verified."
	for _, r := range rows {
		s += fmt.Sprintf(" %s: %s ms, longest stall %s ms against %s ms steady (%s×), throughput %.2f of steady, %s MiB copied.",
			r.Case, num(r.Window), num(r.Stall), num(r.Steady), ratio(r.Stall, r.Steady), r.Tput, num(r.Copied))
	}
	return s
}
