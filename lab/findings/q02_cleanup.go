package findings

import (
	"context"
	"fmt"
	"strings"
)

// cleanupQuestion is question 2 of design/findings.md, answered by runCleanup.
var cleanupQuestion = Question{ID: 2, Slug: "cleanup", Title: "Cleanup and the deleted-document overhang", Run: runCleanup,
	RaisedIn: "#12918 (search −40–50 %, indexing −50 %, 2.5–3 h per 100 GB of merges)",
	Question: "What does removing the foreign documents cost — bytes written, time until the space is reclaimed, write and search latency while it runs — with excise, with per-document deletes, and with a new index?"}

// rfcCleanupSecondsPerGB is the RFC's clean-up time: 2.5–3 h for a
// 100 GB shard on 2 cores (#12918), in seconds per GB.
var rfcCleanupSecondsPerGB = [2]float64{2.5 * 3600 / 100, 3 * 3600 / 100}

// cleanupRow is one strategy's medians for question 2.
type cleanupRow struct {
	Strategy                          string
	DurationMs, WrittenMiB, Deleted   float64
	TotalWrittenMiB, ReclaimMs        float64
	WriteP99Steady, WriteP99Cleanup   float64
	TputRatio                         float64 // writes/s while the cleanup ran / steady
	SearchP99Steady, SearchP99Cleanup float64
	ParentMiB                         float64
}

// cleanupMeasures are question 2's per-run values, in table order.
var cleanupMeasures = []strategyMeasure{
	{"cleanup duration", "ms", func(r strategyRun) float64 { return r.Summary.CleanupDurationMs }},
	{"bytes written by the cleanup", "MiB", func(r strategyRun) float64 { return float64(r.Summary.CleanupBytesWritten) / (1 << 20) }},
	{"documents deleted one by one", "docs", func(r strategyRun) float64 { return float64(r.Summary.CleanupDocsDeleted) }},
	{"bytes written in the whole run (flushes, compactions)", "MiB", func(r strategyRun) float64 { return float64(r.Summary.BytesWritten) / (1 << 20) }},
	{"space reclaimed (split request to within 10 % of settled)", "ms", func(r strategyRun) float64 { return r.Summary.ReclaimMs }},
	{"write p99, steady", "ms", func(r strategyRun) float64 { return r.SteadyWriteP99Ms }},
	{"write p99 while the cleanup ran", "ms", func(r strategyRun) float64 { return r.Summary.CleanupWriteP99Ms }},
	{"writes/s while the cleanup ran / steady", "ratio", func(r strategyRun) float64 { return r.CleanupOps / max(1, r.Summary.ThroughputSteadyOps) }},
	{"search p99, steady", "ms", func(r strategyRun) float64 { return r.Summary.SearchP99SteadyMs }},
	{"search p99 while the cleanup ran", "ms", func(r strategyRun) float64 { return r.Summary.CleanupSearchP99Ms }},
}

func cleanupRowOf(rounds []strategyRound, strategy string) cleanupRow {
	m := func(i int) float64 { return med(rounds, strategy, cleanupMeasures[i].f) }
	return cleanupRow{Strategy: strategy,
		DurationMs: m(0), WrittenMiB: m(1), Deleted: m(2), TotalWrittenMiB: m(3), ReclaimMs: m(4),
		WriteP99Steady: m(5), WriteP99Cleanup: m(6), TputRatio: m(7), SearchP99Steady: m(8), SearchP99Cleanup: m(9),
		ParentMiB: med(rounds, strategy, func(r strategyRun) float64 { return mibOf(r.Summary.DiskBeforeBytes) }),
	}
}

// runCleanup answers question 2.
func runCleanup(ctx context.Context, cfg Config) (Answer, error) {
	a := Answer{Command: cfg.reproduce(2)}
	_, rows, err := strategyRows(ctx, cfg, "q2", &a, cleanupMeasures, cleanupRowOf)
	if err != nil {
		return a, err
	}
	a.Tables = []Table{cleanupTable(rows)}
	a.Answer = cleanupAnswer(cfg.strategySetup(), rows)
	a.Summary = cleanupSummary(rows)
	if err := cleanupChart(cfg.Out, rows); err != nil {
		return a, err
	}
	a.Charts = []string{"q02-cleanup-search.png"}
	a.NotMeasured = "Lucene's cost: in OpenSearch a deleted document stays in its segment, interleaved with live ones, so every search skips it until a merge " +
		"rewrites the segment — the RFC's search −40–50 % and its 2.5–3 h of merges per 100 GB. In this prototype a keep-all child's foreign documents lie in key ranges " +
		"outside the child's span (the key encoding puts each child's documents in one contiguous span), so searches never scan them: " +
		"what the rfc strategy measures is the deletes' and compactions' competition for the disk and CPU, not deletes seen by queries. " +
		"Shards larger than " + cfg.strategySetup().Size.Name + " (the per-GB rate is an extrapolation); replicas (OpenSearch replays the deletes on each); " +
		"the new index's cleanup runs under the write block (its latency while the cleanup ran is the blocked writes' wait), and its space comes back only when the source index is deleted after the load. " +
		"A machine shared with other work: the numbers are medians of " + fmt.Sprint(cfg.runs()) + " runs."
	return a, nil
}

func cleanupTable(rows []cleanupRow) Table {
	t := Table{Header: []string{"strategy", "cleanup (ms)", "written by it (MiB)", "deleted one by one", "run wrote (MiB)", "reclaimed after (ms)",
		"write p99 steady / in cleanup (ms)", "writes/s in cleanup / steady", "search p99 steady / in cleanup (ms)"}}
	for _, r := range rows {
		t.Rows = append(t.Rows, []string{r.Strategy, num(r.DurationMs), num(r.WrittenMiB), num(r.Deleted), num(r.TotalWrittenMiB), num(r.ReclaimMs),
			num(r.WriteP99Steady) + " / " + num(r.WriteP99Cleanup), fmt.Sprintf("%.2f", r.TputRatio),
			num(r.SearchP99Steady) + " / " + num(r.SearchP99Cleanup)})
	}
	return t
}

// cleanupAnswer writes question 2's answer from the medians.
func cleanupAnswer(s strategySetup, rows []cleanupRow) string {
	by := map[string]cleanupRow{}
	for _, r := range rows {
		by[r.Strategy] = r
	}
	var parts []string
	if r, ok := by["inplace"]; ok {
		parts = append(parts, fmt.Sprintf("With children excised at creation (inplace) the only cleanup is retiring the parent: %s ms, %s MiB written, nothing deleted one by one; %s",
			num(r.DurationMs), num(r.WrittenMiB), reclaimPhrase(r.ReclaimMs)))
	}
	if r, ok := by["rfc"]; ok {
		perGB := r.DurationMs / 1000 / max(1e-9, r.ParentMiB/1024)
		parts = append(parts, fmt.Sprintf("the RFC's path (rfc) deleted %s documents one by one in %s ms, writing %s MiB, and the disk was %s; "+
			"while it ran search p99 was %s ms against %s ms steady (%s×), write p99 %s ms against %s ms and writes/s %.2f of steady; "+
			"it ran %.1f s per GB of parent, against the RFC's %.0f–%.0f s per GB (2.5–3 h per 100 GB of Lucene merges on 2 cores)",
			num(r.Deleted), num(r.DurationMs), num(r.WrittenMiB), reclaimPhrase(r.ReclaimMs),
			num(r.SearchP99Cleanup), num(r.SearchP99Steady), ratio(r.SearchP99Cleanup, r.SearchP99Steady),
			num(r.WriteP99Cleanup), num(r.WriteP99Steady), r.TputRatio,
			perGB, rfcCleanupSecondsPerGB[0], rfcCleanupSecondsPerGB[1]))
	}
	if r, ok := by["newindex"]; ok {
		parts = append(parts, fmt.Sprintf("the new index's _split deleted %s documents one by one in %s ms under the write block (writes/s %.2f of steady meanwhile), writing %s MiB; %s",
			num(r.Deleted), num(r.DurationMs), r.TputRatio, num(r.WrittenMiB), reclaimPhrase(r.ReclaimMs)))
	}
	if len(parts) == 0 {
		return "No strategy was measured."
	}
	return fmt.Sprintf("On %s: %s. Our keep-all children keep foreign documents outside the spans searches scan, so the RFC's Lucene search penalty is not reproduced here: what remains is the deletes' disk and CPU cost.",
		s, strings.Join(parts, "; "))
}

// cleanupChart draws the searches' p99 steady and while the cleanup ran
// (the writes' are in the table: the new index's blocked writes, seconds
// long, would flatten every other bar).
func cleanupChart(dir string, rows []cleanupRow) error {
	var labels []string
	ss, sc := bars{Name: "search p99 steady"}, bars{Name: "search p99 while the cleanup ran"}
	for _, r := range rows {
		labels = append(labels, r.Strategy)
		ss.Values = append(ss.Values, r.SearchP99Steady)
		sc.Values = append(sc.Values, r.SearchP99Cleanup)
	}
	return groupedBars(dir, "q02-cleanup-search.png", "Search p99 (a page of hits) steady and while the cleanup ran (medians)", "ms", labels, []bars{ss, sc})
}
