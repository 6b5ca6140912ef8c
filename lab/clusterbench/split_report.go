package clusterbench

import (
	"fmt"
	"slices"
	"strings"
)

// SplitSummary is one strategy's split runs, each quantity per run (in
// ms, s, MiB as named) so callers can take medians and ranges.
type SplitSummary struct {
	Strategy string
	// Refused is set when the cluster refused the strategy (and no run
	// was measured).
	Refused string
	Note    string
	Runs    int
	// RolledBack are the reasons of the runs whose split was rolled back
	// before its hand-off (not counted in Runs).
	RolledBack []string
	// Windows are every child range's window of every run, in ms.
	Windows, Gaps                              []float64
	ParentMiB, TputRatio, ToHandoffS, ToGreenS []float64
	RecoveryMiB, RecoveryPerParent             []float64
	TransportMiB, TransportPerParent           []float64
	DiskBeforeMiB, DiskGreenMiB, DiskAfterMiB  []float64
	BlockedMs, StaleRetries, StaleWaitMs       []float64
	// PhaseS and PhaseRatio are, by the split task's phase, each run's
	// time in it and its write rate over steady; PhaseNames their order.
	PhaseS, PhaseRatio map[string][]float64
	PhaseNames         []string
	Errors             int
}

// SummarizeSplit groups runs by strategy, in the order they first ran.
func SummarizeSplit(runs []SplitRun) []SplitSummary {
	var out []SplitSummary
	at := map[string]int{}
	const mib = 1 << 20
	for _, r := range runs {
		i, ok := at[r.Strategy]
		if !ok {
			i = len(out)
			at[r.Strategy] = i
			out = append(out, SplitSummary{Strategy: r.Strategy})
		}
		s := &out[i]
		switch {
		case r.Refused != "":
			s.Refused = r.Refused
			continue
		case r.RolledBack != "":
			s.RolledBack = append(s.RolledBack, r.RolledBack)
			continue
		}
		s.Note = r.Note
		s.Runs++
		for _, w := range r.Windows {
			s.Windows = append(s.Windows, float64(w.Len().Microseconds())/1000)
		}
		for _, g := range r.Gaps {
			s.Gaps = append(s.Gaps, float64(g.Microseconds())/1000)
		}
		parent := float64(max(r.ParentBytes, 1))
		s.ParentMiB = append(s.ParentMiB, float64(r.ParentBytes)/mib)
		s.TputRatio = append(s.TputRatio, r.DuringOps/max(r.SteadyOps, 1e-9))
		s.ToHandoffS = append(s.ToHandoffS, r.ToHandoff.Seconds())
		s.ToGreenS = append(s.ToGreenS, r.ToGreen.Seconds())
		s.RecoveryMiB = append(s.RecoveryMiB, float64(r.RecoveryBytes)/mib)
		s.RecoveryPerParent = append(s.RecoveryPerParent, float64(r.RecoveryBytes)/parent)
		s.TransportMiB = append(s.TransportMiB, float64(r.TransportBytes)/mib)
		s.TransportPerParent = append(s.TransportPerParent, float64(r.TransportBytes)/parent)
		s.DiskBeforeMiB = append(s.DiskBeforeMiB, float64(r.DiskBefore)/mib)
		s.DiskGreenMiB = append(s.DiskGreenMiB, float64(r.DiskAtGreen)/mib)
		s.DiskAfterMiB = append(s.DiskAfterMiB, float64(r.DiskAfter)/mib)
		s.BlockedMs = append(s.BlockedMs, float64(r.HandoffBlocked.Microseconds())/1000)
		s.StaleRetries = append(s.StaleRetries, float64(r.StaleRetries))
		s.StaleWaitMs = append(s.StaleWaitMs, float64(r.StaleWaitMean().Microseconds())/1000)
		for _, p := range r.Phases {
			if s.PhaseS == nil {
				s.PhaseS, s.PhaseRatio = map[string][]float64{}, map[string][]float64{}
			}
			if _, ok := s.PhaseS[p.Name]; !ok {
				s.PhaseNames = append(s.PhaseNames, p.Name)
			}
			s.PhaseS[p.Name] = append(s.PhaseS[p.Name], (p.End - p.Start).Seconds())
			s.PhaseRatio[p.Name] = append(s.PhaseRatio[p.Name], p.OpsPerS/max(r.SteadyOps, 1e-9))
		}
		s.Errors += r.Errors
	}
	for i := range out {
		if out[i].Runs > 0 {
			out[i].Refused = ""
		}
	}
	return out
}

// medianRange formats the median and range of xs.
func medianRange(xs []float64, format string) string {
	if len(xs) == 0 {
		return "-"
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return fmt.Sprintf(format+" ("+format+"–"+format+")", s[len(s)/2], s[0], s[len(s)-1])
}

// SplitReport is the split scenario's markdown section.
func SplitReport(runs []SplitRun) string {
	var b strings.Builder
	b.WriteString("## Split of a replicated shard\n\n")
	b.WriteString("One shard, one replica, split in two through REST under the write load; medians (ranges) over runs. " +
		"Window: per child range, from the first write begun after the request that was refused or slower than the steady p99 " +
		"to the first acknowledgement of a write begun since; gap: per child range, the longest span without an acknowledged write; " +
		"p50/p99/max over every child range of every run (nearest rank).\n\n")
	b.WriteString("| strategy | runs | window p50 / p99 / max ms | gap p50 / p99 / max ms | throughput / steady | request → hand-off s | request → green s | " +
		"peer-recovery MiB (× parent) | transport MiB | disk MiB before → green → after | parent blocked ms | stale retries (mean wait ms) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range SummarizeSplit(runs) {
		if s.Refused != "" {
			fmt.Fprintf(&b, "| %s | refused: %s ||||||||||\n", s.Strategy, strings.ReplaceAll(s.Refused, "|", "/"))
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %.0f / %.0f / %.0f | %.0f / %.0f / %.0f | %s | %s | %s | %s (%s) | %s | %s → %s → %s | %s | %s (%s) |\n",
			s.Strategy, s.Runs, Percentile(s.Windows, 50), Percentile(s.Windows, 99), Percentile(s.Windows, 100),
			Percentile(s.Gaps, 50), Percentile(s.Gaps, 99), Percentile(s.Gaps, 100),
			medianRange(s.TputRatio, "%.2f"), medianRange(s.ToHandoffS, "%.1f"), medianRange(s.ToGreenS, "%.1f"),
			medianRange(s.RecoveryMiB, "%.0f"), medianRange(s.RecoveryPerParent, "%.2f"), medianRange(s.TransportMiB, "%.0f"),
			medianRange(s.DiskBeforeMiB, "%.0f"), medianRange(s.DiskGreenMiB, "%.0f"), medianRange(s.DiskAfterMiB, "%.0f"),
			medianRange(s.BlockedMs, "%.0f"), medianRange(s.StaleRetries, "%.0f"), medianRange(s.StaleWaitMs, "%.0f"))
	}
	for _, s := range SummarizeSplit(runs) {
		if s.Note != "" {
			fmt.Fprintf(&b, "\n%s: %s.\n", s.Strategy, s.Note)
		}
		if len(s.PhaseNames) > 0 {
			var ps []string
			for _, name := range s.PhaseNames {
				ps = append(ps, fmt.Sprintf("%s %s s at %s of steady", name, medianRange(s.PhaseS[name], "%.2f"), medianRange(s.PhaseRatio[name], "%.2f")))
			}
			fmt.Fprintf(&b, "\n%s, by the split task's phase (medians, ranges): %s.\n", s.Strategy, strings.Join(ps, "; "))
		}
		if len(s.RolledBack) > 0 {
			fmt.Fprintf(&b, "\n%s: %d split(s) rolled back before the hand-off, not measured: %s.\n", s.Strategy, len(s.RolledBack),
				strings.Join(s.RolledBack, "; "))
		}
	}
	b.WriteString("\n")
	return b.String()
}
