package findings

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/lab/clusterbench"
	"github.com/shardsplit/shardsplit/routing"
)

// replicatedRuns are two measured recover runs and a refused local one.
func replicatedRuns() []clusterbench.SplitRun {
	ms := time.Millisecond
	run := func(w1, w2, gap time.Duration, green time.Duration) clusterbench.SplitRun {
		return clusterbench.SplitRun{Strategy: "recover", ParentBytes: 1 << 30, Children: []routing.ShardID{1, 2},
			Windows: []clusterbench.Window{{Start: 0, End: w1}, {Start: 0, End: w2}},
			Gaps:    []time.Duration{gap, gap}, SteadyOps: 5000, DuringOps: 4000, ToHandoff: green - ms, ToGreen: green,
			RecoveryBytes: 2 << 30, TransportBytes: 3 << 30, HandoffBlocked: 90 * ms, StaleRetries: 10, StaleWaitTotal: 300 * ms}
	}
	return []clusterbench.SplitRun{
		run(400*ms, 600*ms, 150*ms, 20*time.Second),
		{Strategy: "local", Refused: "400 illegal_argument_exception: unknown setting"},
		{Strategy: "recover", RolledBack: "illegal_state_exception: rolled back"},
		run(800*ms, 1200*ms, 250*ms, 30*time.Second),
	}
}

// The answer and goals of question 13 come from the best measured
// strategy; a refused strategy is named, and its goal is not met because
// it was not measured.
func TestReplicatedAnswerAndGoals(t *testing.T) {
	sums := clusterbench.SummarizeSplit(replicatedRuns())
	k := replicatedCase{Parent: size{"1 GiB", 1 << 20}, Rate: 5000}
	lock := Measured("lock", "ms", 0.5)
	took := Measured("took", "ms", 5000)
	rec := Measured("recovery", "s", 10)
	a := replicatedAnswer(k, sums, lock, took, rec)
	for _, want := range []string{"best strategy measured (recover)", "1200 ms at p99", "p50 600 ms", "0.80 of steady",
		"2.00× the parent's size", "blocked 90.0 ms", "against 0.5 ms", "10.0 writes per split", "30.0 ms on average", "refused by this build: local",
		"1 of recover's 3 splits was rolled back before their hand-off and are not in these numbers (the first: illegal_state_exception: rolled back)"} {
		if !strings.Contains(a, want) {
			t.Errorf("answer lacks %q:\n%s", want, a)
		}
	}
	var got []string
	for _, g := range replicatedGoals(k, sums, took, rec, false) {
		got = append(got, g.Goal+": "+g.Measured+" "+map[bool]string{true: "met", false: "not met " + g.Why}[g.Met])
	}
	want := []string{
		"3 processes, 1 replica, 5,000 fsync'd writes/s, 1 GiB parent: write-unavailability window ≤ 1 s at p99 under the best strategy: 1.20 (1200 ms / 1000 ms, recover) not met 1.20 is above 1.00",
		"same case: throughput during the split ≥ 0.9 of steady: 0.80 (median, recover) not met 0.80 is below 0.90",
		"local: bytes sent over the transport ≤ 1 % of the parent's size: not measured not met local is not built in this tree",
		"recover: request to green ≤ 2× the single-copy split's time plus one peer recovery of the largest child: 1.25 (25.0 s / (2 × 5 s + 10.0 s)) not met 1.25 is above 1.00",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("goals (-want +got):\n%s", diff)
	}
}
