package findings

import (
	"context"
	"fmt"
	"strings"
)

// searchQuestion is question 3 of design/findings.md, answered by runSearch.
var searchQuestion = Question{ID: 3, Slug: "search", Title: "Search during and after a split", Run: runSearch,
	RaisedIn: "#13923 (searches that picked the parent before the handoff)",
	Question: "What happens to routed gets and unrouted searches (p50/p99) in steady state, during the split and in the 10 s after it?"}

// searchGoalRatio is the search goal: search p99 during the split ≤ 1.25×
// steady, for inplace.
const searchGoalRatio = 1.25

// readCell is one strategy's, kind's and window's medians over the runs
// that had reads of that kind in that window.
type readCell struct {
	P50, P99 float64
	N        int // reads over all runs
	Runs     int // runs with at least one
}

// readCellOf takes the medians over the runs with reads in the window.
func readCellOf(rounds []strategyRound, strategy, kind, window string) (readCell, []float64, []float64) {
	var p50, p99 []float64
	c := readCell{}
	for _, r := range rounds {
		s, ok := r[strategy].Reads[kind][window]
		if !ok || s.N == 0 {
			continue
		}
		c.N += s.N
		c.Runs++
		p50 = append(p50, s.P50)
		p99 = append(p99, s.P99)
	}
	c.P50, c.P99 = Measured("", "", p50...).Median, Measured("", "", p99...).Median
	return c, p50, p99
}

// searchRows are question 3's medians: cells[strategy][kind][window].
type searchCells map[string]map[string]map[string]readCell

// runSearch answers question 3.
func runSearch(ctx context.Context, cfg Config) (Answer, error) {
	a := Answer{Command: cfg.reproduce(3)}
	rounds, err := cfg.strategyRuns(ctx, "q3", cfg.runs())
	if err != nil {
		return a, err
	}
	cells := searchCells{}
	for _, s := range strategies {
		cells[s] = map[string]map[string]readCell{}
		for _, k := range readKinds {
			kind := k.String()
			cells[s][kind] = map[string]readCell{}
			for _, w := range readWindows {
				c, p50, p99 := readCellOf(rounds, s, kind, w)
				cells[s][kind][w] = c
				if c.Runs > 0 {
					p := fmt.Sprintf("%s: %s %s", s, kind, w)
					a.Numbers = append(a.Numbers, Measured(p+" p50", "ms", p50...), Measured(p+" p99", "ms", p99...))
				}
			}
		}
		a.Numbers = append(a.Numbers, Measured(s+": search p99 during / steady, per run", "ratio",
			of(rounds, s, func(r strategyRun) float64 { return r.Summary.SearchP99DuringMs / nonzero(r.Summary.SearchP99SteadyMs) })...))
	}
	a.Tables = []Table{searchTable(cells)}
	a.Answer = searchAnswer(cfg.strategySetup(), cells)
	a.Summary = searchSummary(cells)
	a.Goals = searchGoals(cells, cfg.Quick, cfg.strategySetup().Size.Name)
	if err := searchChart(cfg.Out, cells); err != nil {
		return a, err
	}
	a.Charts = []string{"q03-search-p99.png"}
	after := cfg.strategySetup().After
	a.NotMeasured = fmt.Sprintf("Searches with a query (every search here is a match_all page of 10 hits per shard, or an exact count, which is a full scan here, unlike OpenSearch's count from segment metadata); "+
		"counts are rare (one search in %d, so a few per run: their p99 is close to their maximum, and a split window of a few hundred ms rarely holds one); "+
		"reads through a coordinator on another node; the after window is %v (the goal asks for 10 s; quick runs shorten it). "+
		"A p99 over the split window rests on the few searches in flight in it (tens), hence medians over %d runs.",
		cfg.strategySetup().Reads.CountEvery, after, cfg.runs())
	return a, nil
}

func searchTable(cells searchCells) Table {
	t := Table{Header: []string{"strategy", "read", "steady p50 / p99 (ms)", "during the split p50 / p99 (ms)", "after p50 / p99 (ms)", "reads (all runs) steady / during / after"}}
	for _, s := range strategies {
		for _, k := range readKinds {
			kind := k.String()
			row := []string{s, kind}
			var ns []string
			for _, w := range readWindows {
				c := cells[s][kind][w]
				if c.Runs == 0 {
					row = append(row, "–")
				} else {
					row = append(row, num(c.P50)+" / "+num(c.P99))
				}
				ns = append(ns, fmt.Sprint(c.N))
			}
			t.Rows = append(t.Rows, append(row, strings.Join(ns, " / ")))
		}
	}
	return t
}

// searchAnswer writes question 3's answer from the medians.
func searchAnswer(s strategySetup, cells searchCells) string {
	var parts []string
	for _, st := range strategies {
		g, q := cells[st]["get"], cells[st]["search"]
		if q["steady"].Runs == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s: search p99 %s ms steady, %s during (%s×), %s after; get p99 %s, %s, %s ms",
			st, num(q["steady"].P99), num(q["during"].P99), ratio(q["during"].P99, q["steady"].P99), num(q["after"].P99),
			num(g["steady"].P99), num(g["during"].P99), num(g["after"].P99)))
	}
	if len(parts) == 0 {
		return "No reads were measured."
	}
	ans := fmt.Sprintf("On %s (medians): %s.", s, strings.Join(parts, "; "))
	var counts []string
	for _, st := range strategies {
		for _, w := range readWindows {
			if c := cells[st]["count"][w]; c.Runs > 0 {
				counts = append(counts, fmt.Sprintf("%s %s %s ms (%d)", st, w, num(c.P50), c.N))
			}
		}
	}
	if len(counts) > 0 {
		ans += " An exact count (a full scan here) took, p50 (counts over all runs): " + strings.Join(counts, ", ") + "."
	}
	return ans
}

// searchGoals evaluates the search goal on inplace (the ratio of
// the medians); rfc and newindex are reported as they are, in the answer.
func searchGoals(cells searchCells, quick bool, sizeName string) []Goal {
	q := cells["inplace"]["search"]
	if q["steady"].Runs == 0 || q["during"].Runs == 0 {
		return nil
	}
	g := ratioGoal("search p99 during the split ≤ 1.25× steady for inplace", q["during"].P99/nonzero(q["steady"].P99), searchGoalRatio, true,
		fmt.Sprintf("%s / %s ms, medians; %d searches in flight in the split windows of %d runs, %d in the steady windows", num(q["during"].P99), num(q["steady"].P99),
			q["during"].N, q["during"].Runs, q["steady"].N))
	if quick {
		notTheGoalCase(&g, sizeName)
	}
	return []Goal{g}
}

func searchChart(dir string, cells searchCells) error {
	var labels []string
	series := []bars{{Name: "steady"}, {Name: "during the split"}, {Name: "after"}}
	for _, st := range strategies {
		for _, kind := range []string{"get", "search"} {
			labels = append(labels, st+" "+kind)
			for i, w := range readWindows {
				series[i].Values = append(series[i].Values, cells[st][kind][w].P99)
			}
		}
	}
	return groupedBars(dir, "q03-search-p99.png", "p99 of routed gets and searches (a page of hits), medians", "ms", labels, series)
}
