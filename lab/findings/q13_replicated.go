package findings

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shardsplit/shardsplit/lab/clusterbench"
	"github.com/shardsplit/shardsplit/storage"
)

// replicatedQuestion is question 13 of design/findings.md, answered by
// runReplicated.
var replicatedQuestion = Question{ID: 13, Slug: "replicated", Title: "A replicated split across processes", Run: runReplicated,
	RaisedIn: "#13925's open questions; the fork's child replicas by peer recovery; TiKV's region split, MongoDB's critical section",
	Question: "With one replica on another process, how long is each child range unavailable for writes under each way of giving the children " +
		"their replicas, what does the split cost in throughput, bytes over the network, time to green and disk, how many writes take the " +
		"stale-coordinator retry, and what does the hand-off's cluster-state round trip cost against the single node's in-memory publish?"}

// replicatedCase is question 13's scale: the goals' (1 GiB parent, 5,000
// fsync'd writes/s), or a quick run's.
type replicatedCase struct {
	Parent        size
	Rate          float64
	Writers       int
	Steady, After time.Duration
}

func (c Config) replicatedCase() replicatedCase {
	if c.Quick {
		return replicatedCase{Parent: size{"16 MiB", 16 << 10}, Rate: 1000, Writers: 32, Steady: 2 * time.Second, After: time.Second}
	}
	return replicatedCase{Parent: size{"1 GiB", 1 << 20}, Rate: 5000, Writers: 64, Steady: 5 * time.Second, After: 2 * time.Second}
}

// windowGoalMs and tputGoal are the replicated split's goals: TiKV states
// "usually within 1 second" for a region split with replicas.
const (
	windowGoalMs  = 1000
	tputGoal      = 0.9
	localCopyGoal = 0.01
)

// runReplicated answers question 13: three splitdemo serve processes on
// loopback, each strategy's splits (clusterbench.Split), a peer recovery
// of a child's size, and the single-node split of the same parent at the
// same rate for its hand-off.
func runReplicated(ctx context.Context, cfg Config) (Answer, error) {
	a := Answer{Command: cfg.reproduce(13)}
	if cfg.Binary == "" {
		return a, errors.New("findings: question 13 starts splitdemo serve processes and needs the splitdemo binary (Config.Binary)")
	}
	k := cfg.replicatedCase()
	parentBytes := int64(k.Parent.Docs) << 10
	dir := filepath.Join(cfg.Scratch, "cluster")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return a, fmt.Errorf("findings: %w", err)
	}
	c, err := clusterbench.Start(cfg.Binary, dir, 3, clusterbench.Options{})
	if err != nil {
		return a, err
	}
	defer c.Stop()
	progress := func(s string) { cfg.Progressf("q13: %s", s) }
	runs, err := clusterbench.Split(ctx, c, clusterbench.SplitConfig{Strategies: clusterbench.Strategies, ParentSize: parentBytes, Runs: cfg.runs(),
		Load: clusterbench.LoadConfig{Rate: k.Rate, Writers: k.Writers, Duration: k.Steady}, After: k.After, Within: 45 * time.Minute}, progress)
	if err != nil {
		return a, err
	}
	// One peer recovery of a copy of a child's documents (half the parent):
	// the term of the time-to-green goal.
	rec, err := clusterbench.Recovery(ctx, c, parentBytes/2, 1, progress)
	if err != nil {
		return a, err
	}
	c.Stop()
	// The single node's split of the same parent at the same rate: its
	// hand-off publishes the new table in memory.
	single, err := cfg.measure(ctx, "q13", splitCase{Layout: storage.LayoutPerShard, Size: k.Parent, Rate: k.Rate, Ways: 2}, cfg.runs())
	if err != nil {
		return a, err
	}
	sums := clusterbench.SummarizeSplit(runs)
	singleLock := Measured("single node: apply lock held at the hand-off", "ms", field(single, func(r splitRun) float64 { return r.NodeStallMs })...)
	singleStall := Measured("single node: longest write stall in the split window", "ms", field(single, func(r splitRun) float64 { return r.StallMs })...)
	singleTook := Measured("single node: split request to the end of the hand-off", "ms", field(single, func(r splitRun) float64 { return r.WindowMs })...)
	recovery := Measured("peer recovery of half the parent's documents", "s", rec[0].Recovery.Seconds())
	for _, s := range sums {
		if s.Refused != "" {
			continue
		}
		p := s.Strategy + ": "
		a.Numbers = append(a.Numbers,
			Measured(p+"write-unavailability window per child range", "ms", s.Windows...),
			Measured(p+"longest span without an acknowledged write per child range", "ms", s.Gaps...),
			Measured(p+"throughput from the request to green / steady", "ratio", s.TputRatio...),
			Measured(p+"request to hand-off", "s", s.ToHandoffS...),
			Measured(p+"request to green", "s", s.ToGreenS...),
			Measured(p+"peer-recovery chunks sent / parent size", "ratio", s.RecoveryPerParent...),
			Measured(p+"everything the nodes sent / parent size", "ratio", s.TransportPerParent...),
			Measured(p+"disk of the three nodes at green", "MiB", s.DiskGreenMiB...),
			Measured(p+"parent primary's writes blocked for the hand-off (block to retire)", "ms", s.BlockedMs...),
			Measured(p+"writes retried on a child by a stale coordinator", "count", s.StaleRetries...),
			Measured(p+"their mean wait", "ms", s.StaleWaitMs...),
			Measured(p+"splits rolled back before the hand-off", "count", float64(len(s.RolledBack))))
		for _, name := range s.PhaseNames {
			a.Numbers = append(a.Numbers, Measured(p+"time in phase "+name, "s", s.PhaseS[name]...),
				Measured(p+"write rate in phase "+name+" / steady", "ratio", s.PhaseRatio[name]...))
		}
	}
	a.Numbers = append(a.Numbers, singleLock, singleStall, singleTook, recovery)
	a.Tables = []Table{replicatedTable(sums), {Header: []string{"hand-off", "writes blocked (ms)", "longest write stall (ms)"},
		Rows: [][]string{{"single node, in-memory publish (apply lock)", num(singleLock.Median), num(singleStall.Median)}}}}
	for _, s := range sums {
		if s.Refused == "" {
			a.Tables[1].Rows = append(a.Tables[1].Rows, []string{"cluster, " + s.Strategy + ": hand-off record through the cluster state",
				num(Measured("", "", s.BlockedMs...).Median), num(Measured("", "", s.Gaps...).Median)})
		}
	}
	a.Answer = replicatedAnswer(k, sums, singleLock, singleTook, recovery)
	a.Summary = replicatedSummary(k, sums, singleLock)
	a.Goals = replicatedGoals(k, sums, singleTook, recovery, cfg.Quick)
	a.NotMeasured = "Strategies the cluster refuses (not built in this tree) are listed as refused, not measured. " +
		"Three processes on one 2-core machine shared with other work: the network is loopback and every node competes for the same CPUs and disk, " +
		"so throughput and windows include that contention. Splits into more than two children, more than one replica, failures during the split " +
		"(the fault matrix), and reads during the split. Peer-recovery bytes are encoded chunks (base64 in JSON, about 4/3 of the file bytes). " +
		"The window counts a write slower than the steady p99 as blocked, so a split that slows every write for a while shows that whole while; " +
		"the longest span without an acknowledgement is given beside it. The hand-off's block is timed on the parent primary's node with its clock."
	return a, nil
}

func replicatedTable(sums []clusterbench.SplitSummary) Table {
	t := Table{Header: []string{"strategy", "window p50 / p99 / max (ms)", "no-ack span p50 / max (ms)", "throughput / steady",
		"to green (s)", "recovery bytes / parent", "disk at green (MiB)", "parent blocked (ms)", "stale retries (mean wait ms)"}}
	for _, s := range sums {
		if s.Refused != "" {
			t.Rows = append(t.Rows, []string{s.Strategy, "refused: " + s.Refused, "", "", "", "", "", "", ""})
			continue
		}
		med := func(xs []float64) float64 { return Measured("", "", xs...).Median }
		t.Rows = append(t.Rows, []string{s.Strategy,
			fmt.Sprintf("%s / %s / %s", num(clusterbench.Percentile(s.Windows, 50)), num(clusterbench.Percentile(s.Windows, 99)), num(clusterbench.Percentile(s.Windows, 100))),
			fmt.Sprintf("%s / %s", num(clusterbench.Percentile(s.Gaps, 50)), num(clusterbench.Percentile(s.Gaps, 100))),
			fmt.Sprintf("%.2f", med(s.TputRatio)), num(med(s.ToGreenS)), fmt.Sprintf("%.2f", med(s.RecoveryPerParent)),
			num(med(s.DiskGreenMiB)), num(med(s.BlockedMs)), fmt.Sprintf("%s (%s)", num(med(s.StaleRetries)), num(med(s.StaleWaitMs)))})
	}
	return t
}

// bestStrategy is the measured strategy with the smallest p99 window.
func bestStrategy(sums []clusterbench.SplitSummary) (clusterbench.SplitSummary, bool) {
	var best clusterbench.SplitSummary
	found := false
	for _, s := range sums {
		if s.Refused == "" && len(s.Windows) > 0 && (!found || clusterbench.Percentile(s.Windows, 99) < clusterbench.Percentile(best.Windows, 99)) {
			best, found = s, true
		}
	}
	return best, found
}

func replicatedAnswer(k replicatedCase, sums []clusterbench.SplitSummary, lock, took, recovery Number) string {
	best, ok := bestStrategy(sums)
	if !ok {
		return "No strategy was measured."
	}
	med := func(xs []float64) float64 { return Measured("", "", xs...).Median }
	s := fmt.Sprintf("At a %s parent with one replica under %.0f fsync'd writes/s through three processes, the best strategy measured (%s) "+
		"left each child range without acknowledged writes for %s ms at p99 by the window's measure (p50 %s ms; the longest span without any "+
		"acknowledgement: p50 %s ms, max %s ms), kept %.2f of steady throughput from the request to green, and was green %s s after the request. "+
		"Its peer recoveries sent %.2f× the parent's size (the children's files are hard links of the parent's, foreign documents included). "+
		"The parent's writes were blocked %s ms for the hand-off record's round trip through the cluster state, against %s ms of the single node's "+
		"in-memory publish (its split took %s ms to the end of the hand-off); %s writes per split took the stale-coordinator retry, waiting %s ms on average.",
		k.Parent.Name, k.Rate, best.Strategy, num(clusterbench.Percentile(best.Windows, 99)), num(clusterbench.Percentile(best.Windows, 50)),
		num(clusterbench.Percentile(best.Gaps, 50)), num(clusterbench.Percentile(best.Gaps, 100)), med(best.TputRatio), num(med(best.ToGreenS)),
		med(best.RecoveryPerParent), num(med(best.BlockedMs)), num(lock.Median), num(took.Median), num(med(best.StaleRetries)), num(med(best.StaleWaitMs)))
	if len(best.PhaseNames) > 0 {
		var ps []string
		for _, name := range best.PhaseNames {
			ps = append(ps, fmt.Sprintf("%s %s s at %.2f of steady", name, num(med(best.PhaseS[name])), med(best.PhaseRatio[name])))
		}
		s += " By the split task's phase (medians): " + strings.Join(ps, ", ") + "."
	}
	var refused []string
	for _, r := range sums {
		if r.Refused != "" {
			refused = append(refused, r.Strategy)
		}
		if n := len(r.RolledBack); n > 0 {
			were := "were"
			if n == 1 {
				were = "was"
			}
			s += fmt.Sprintf(" %d of %s's %d splits %s rolled back before their hand-off and are not in these numbers (the first: %s).",
				n, r.Strategy, n+r.Runs, were, r.RolledBack[0])
		}
	}
	if len(refused) > 0 {
		s += fmt.Sprintf(" Not measured, refused by this build: %s.", strings.Join(refused, ", "))
	}
	return s
}

func replicatedGoals(k replicatedCase, sums []clusterbench.SplitSummary, single, recovery Number, quick bool) []Goal {
	best, ok := bestStrategy(sums)
	if !ok {
		return nil
	}
	med := func(xs []float64) float64 { return Measured("", "", xs...).Median }
	p99 := clusterbench.Percentile(best.Windows, 99)
	goals := []Goal{
		ratioGoal("3 processes, 1 replica, 5,000 fsync'd writes/s, 1 GiB parent: write-unavailability window ≤ 1 s at p99 under the best strategy",
			p99/windowGoalMs, 1, true, fmt.Sprintf("%s ms / %d ms, %s", num(p99), windowGoalMs, best.Strategy)),
		ratioGoal("same case: throughput during the split ≥ 0.9 of steady", med(best.TputRatio), tputGoal, false, "median, "+best.Strategy),
	}
	local := Goal{Goal: "local: bytes sent over the transport ≤ 1 % of the parent's size", Measured: "not measured", Why: "local is not built in this tree"}
	for _, s := range sums {
		if s.Strategy == "local" && s.Refused == "" {
			local = ratioGoal(local.Goal, med(s.RecoveryPerParent), localCopyGoal, true, "peer-recovery chunks / parent, median")
		}
	}
	goals = append(goals, local)
	for _, s := range sums {
		if s.Strategy == "recover" && s.Refused == "" {
			bound := 2*single.Median/1000 + recovery.Median
			goals = append(goals, ratioGoal("recover: request to green ≤ 2× the single-copy split's time plus one peer recovery of the largest child",
				med(s.ToGreenS)/bound, 1, true, fmt.Sprintf("%s s / (2 × %s s + %s s)", num(med(s.ToGreenS)), num(single.Median/1000), num(recovery.Median))))
		}
	}
	if quick || k.Rate != 5000 {
		for i := range goals {
			if goals[i].Measured != "not measured" {
				notTheGoalCase(&goals[i], fmt.Sprintf("%s, %.0f writes/s", k.Parent.Name, k.Rate))
			}
		}
	}
	return goals
}
