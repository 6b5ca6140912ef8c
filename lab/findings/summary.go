package findings

import (
	"fmt"
	"strings"

	"github.com/shardsplit/shardsplit/lab/clusterbench"
	"github.com/shardsplit/shardsplit/storage"
)

// SummaryWords is the most words a question's Summary may have: the
// report's Summary table is read at a glance, the section holds the rest.
const SummaryWords = 60

// words counts the whitespace-separated words of s.
func words(s string) int { return len(strings.Fields(s)) }

// Each question's summary builder below is a pure function of that
// question's measured values (the medians its answer is written from), so
// a test can build every summary from realistic values and hold it to
// SummaryWords.

// handoffSummary is question 1's one-liner.
func handoffSummary(base splitCase, rows []handoffRow) string {
	b, ok := findRow(rows, base)
	if !ok {
		return "No base case was measured."
	}
	s := fmt.Sprintf("At %s %s, writers' longest stall in the split window is %s ms against %s ms in steady windows as long (%s×); the apply lock is held %s ms, %.0f× under MongoDB's %d ms critical section.",
		base.Size.Name, base.Layout, num(b.Stall), num(b.Steady), ratio(b.Stall, b.Steady), num(b.Node), mongoCriticalMs/nonzero(b.Stall), mongoCriticalMs)
	held := base
	held.Hold = true
	if h, ok := findRow(rows, held); ok {
		s += fmt.Sprintf(" Holding writes until the table is durable: lock %s ms, stall %s ms.", num(h.Node), num(h.Stall))
	}
	return s
}

// cleanupSummary is question 2's one-liner.
func cleanupSummary(rows []cleanupRow) string {
	var parts []string
	for _, r := range rows {
		switch r.Strategy {
		case "inplace":
			parts = append(parts, fmt.Sprintf("inplace: retiring the parent, its only cleanup, took %s ms and wrote %s MiB", num(r.DurationMs), num(r.WrittenMiB)))
		case "rfc":
			parts = append(parts, fmt.Sprintf("rfc: deleting %s documents one by one took %s ms and wrote %s MiB, search p99 %s× steady meanwhile",
				num(r.Deleted), num(r.DurationMs), num(r.WrittenMiB), ratio(r.SearchP99Cleanup, r.SearchP99Steady)))
		case "newindex":
			parts = append(parts, fmt.Sprintf("newindex: %s ms under the write block", num(r.DurationMs)))
		}
	}
	if len(parts) == 0 {
		return "No strategy was measured."
	}
	return strings.Join(parts, "; ") + "."
}

// searchSummary is question 3's one-liner.
func searchSummary(cells searchCells) string {
	var parts []string
	for _, st := range strategies {
		q := cells[st]["search"]
		if q["steady"].Runs == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s×", st, ratio(q["during"].P99, q["steady"].P99)))
	}
	if len(parts) == 0 {
		return "No reads were measured."
	}
	s := "Search p99 during the split against steady: " + strings.Join(parts, ", ") + " (goal for inplace ≤ 1.25×)."
	if g := cells["inplace"]["get"]; g["steady"].Runs > 0 {
		worst := max(g["steady"].P99, g["during"].P99, g["after"].P99)
		s += fmt.Sprintf(" inplace's get p99 stays at or under %s ms before, during and after.", num(worst))
	}
	return s
}

// diskSummary is question 4's one-liner.
func diskSummary(rows []diskRow) string {
	var parts []string
	for _, r := range rows {
		parts = append(parts, fmt.Sprintf("%s +%.2f×", r.Strategy, r.ExtraAtPeak))
	}
	if len(parts) == 0 {
		return "No strategy was measured."
	}
	return "Peak disk from the split request on, above what was there, in parent sizes: " + strings.Join(parts, ", ") + "; the floor for _split is +1.00× (one extra full copy)."
}

// afterSummary is question 5's one-liner.
func afterSummary(goal afterRow) string {
	return fmt.Sprintf("The second after the handoff (%s) stalls %.2f× a steady second (%s against %s ms) at %.2f of steady throughput; retiring the parent takes %s ms.",
		goal.Name, goal.StallRatio, num(goal.After), num(goal.Steady1s), goal.TputRatio, num(goal.Retire))
}

// childrenFacts are the values question 6's summary is written from.
type childrenFacts struct {
	DepthPartition, DepthHash   int
	PartitionSize               int
	SpreadPartition, SpreadHash float64 // shards per tenant at the deepest partition-aligned level
	HotShare                    float64 // the hot routing value's share of writes (0–1)
	HotPartition, HotHash       float64 // its shard's share of writes after the splits (0–1)
	SplitsPartition, SplitsHash int
}

// childrenSummary is question 6's one-liner.
func childrenSummary(f childrenFacts) string {
	return fmt.Sprintf("Partition-aligned children go %d levels deep, hash-range children %d. A routing_partition_size %d tenant spreads over %.2f shards with partition-aligned children, %.2f with hash-range ones. "+
		"A routing value taking %.0f%% of writes still leaves %.1f%% / %.1f%% on one shard after %d / %d splits.",
		f.DepthPartition, f.DepthHash, f.PartitionSize, f.SpreadPartition, f.SpreadHash,
		100*f.HotShare, 100*f.HotPartition, 100*f.HotHash, f.SplitsPartition, f.SplitsHash)
}

// routeCostRange is the lowest and highest median cost of routing one
// document over every cell.
func routeCostRange(cells []*routeCell) (lo, hi float64) {
	for i, c := range cells {
		v := Measured("", "", c.ns...).Median
		if i == 0 || v < lo {
			lo = v
		}
		hi = max(hi, v)
	}
	return lo, hi
}

// routeCostSummary is question 7's one-liner.
func routeCostSummary(lo, hi float64, maxAllocs int64) string {
	allocs := "no allocation"
	if maxAllocs > 0 {
		allocs = fmt.Sprintf("up to %d allocations per call", maxAllocs)
	}
	return fmt.Sprintf("Routing one document costs %s–%s ns at depth 0–%d in both modes, %s, against OpenSearch's JMH %s–%s ns at depth 0–2.",
		num(lo), num(hi), routeMaxDepth, allocs, num(jmhRange[0]), num(jmhRange[len(jmhRange)-1]))
}

// staleFacts are the values question 8's summary is written from.
type staleFacts struct {
	Fenced       float64 // writes fenced per split (median, partition mode)
	MaxRetries   int     // most retries one fenced write took
	WorstBehind  int     // splits a stale router was behind
	WorstRetries int     // retries it took to converge
	ClientWrong  float64 // % of documents the smart client sends to the wrong shard after one split
}

// staleSummary is question 8's one-liner.
func staleSummary(f staleFacts) string {
	return fmt.Sprintf("%.0f writes fenced per split, each retried at most %s; a router %d splits behind converges in %d retr%s; opensearch-go's shard-exact router picks the wrong shard for %.1f%% of documents after one split.",
		f.Fenced, staleTimes(f.MaxRetries), f.WorstBehind, f.WorstRetries, map[bool]string{true: "y", false: "ies"}[f.WorstRetries == 1], f.ClientWrong)
}

// crashSummary is question 9's one-liner.
func crashSummary(t crashTally, kills, verified, okKills int, killErr error) string {
	s := fmt.Sprintf("%d crash points across splits, nested splits and merges: %d recovered and passed every check.", t.Points, t.Points-t.Failed)
	if killErr != nil {
		return s + " No kill -9 run was made."
	}
	return s + fmt.Sprintf(" Of %d kill -9 runs, %d left a directory to verify and %d of those verified.", kills, verified, okKills)
}

// mergeSummary is question 10's one-liner.
func mergeSummary(rows []mergeRow) string {
	if len(rows) == 0 {
		return "No merge was measured."
	}
	var parts []string
	for _, r := range rows {
		parts = append(parts, fmt.Sprintf("%s %s ms, stall %s× steady, throughput %.2f", r.Case.Layout, num(r.Window), ratio(r.Stall, r.Steady), r.Tput))
	}
	return fmt.Sprintf("A split is undone in place: merging the two halves of a %s parent under load took %s.", rows[0].Case.Size.Name, strings.Join(parts, "; "))
}

// scaleSummary is question 11's one-liner, from the default variant's
// rows (smallest size first).
func scaleSummary(rows []scaleRow) string {
	if len(rows) < 2 {
		return "Fewer than two sizes were measured."
	}
	first, last := rows[0], rows[len(rows)-1]
	return fmt.Sprintf("From %s to %s the split took %s → %s ms (%.2f×; goal ≤ 1.5×), its longest stall %s → %s ms (steady windows as long: %s → %s ms).",
		first.Case.Size.Name, last.Case.Size.Name, num(first.Window), num(last.Window), last.Window/nonzero(first.Window),
		num(first.Stall), num(last.Stall), num(first.Steady), num(last.Steady))
}

// idFacts are the values question 12's summary is written from.
type idFacts struct {
	UnroutedCPU float64 // CPU of an unrouted write with the index (no routed document held) / without
	RoutedCPU   float64 // CPU of a routed write with the index / without
	RoutedFsync float64 // writes/s of routed fsync'd writes with the index / without
	ShardMiB    float64
	SplitOff    float64 // ms, splitting an all-routed shard without the index
	SplitIndex  float64 // ms, the same rebuilding the children's entries
}

// idSummary is question 12's one-liner.
func idSummary(f idFacts) string {
	return fmt.Sprintf("An unrouted write into a store with no routed document costs %.2f× the CPU without the _id index (goal ≤ 1.05×); a routed write %.2f× (async), %.2f× the throughput fsync'd; splitting an all-routed %.0f MiB shard takes %s against %s ms.",
		f.UnroutedCPU, f.RoutedCPU, f.RoutedFsync, f.ShardMiB, num(f.SplitIndex), num(f.SplitOff))
}

// idFactsOf reads question 12's summary values from its runs.
func idFactsOf(async, request string, writes map[string][]idWriteRun, splits map[idSplitCase][]idSplitRun, mib float64) idFacts {
	cpu := func(key string) float64 { return Measured("", "", cpuOf(writes[async+": "+key])...).Median }
	req := func(key string) float64 { return Measured("", "", opsOf(writes[request+": "+key])...).Median }
	split := func(k idSplitCase) float64 {
		var v []float64
		for _, r := range splits[k] {
			v = append(v, r.SplitMs)
		}
		return Measured("", "", v...).Median
	}
	return idFacts{
		UnroutedCPU: cpu("unrouted, index, no routed document held") / nonzero(cpu("unrouted, no index")),
		RoutedCPU:   cpu("routed, index") / nonzero(cpu("routed, no index")),
		RoutedFsync: req("routed, index") / nonzero(req("routed, no index")),
		ShardMiB:    mib,
		SplitOff:    split(idSplitCase{storage.LayoutPerShard, storage.IDIndexOff}),
		SplitIndex:  split(idSplitCase{storage.LayoutPerShard, storage.IDIndexRebuild}),
	}
}

// replicatedSummary is question 13's one-liner.
func replicatedSummary(k replicatedCase, sums []clusterbench.SplitSummary, lock Number) string {
	best, ok := bestStrategy(sums)
	if !ok {
		return "No strategy was measured."
	}
	med := func(xs []float64) float64 { return Measured("", "", xs...).Median }
	return fmt.Sprintf("A %s parent with one replica across three processes (best strategy: %s): child ranges without acknowledged writes %s ms at p99, %.2f of steady throughput, green %s s after the request; the hand-off blocked writes %s ms against %s ms on a single node.",
		k.Parent.Name, best.Strategy, num(clusterbench.Percentile(best.Windows, 99)), med(best.TputRatio), num(med(best.ToGreenS)), num(med(best.BlockedMs)), num(lock.Median))
}
