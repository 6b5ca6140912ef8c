package clusterbench

import (
	"strings"
	"testing"
	"time"
)

// A strategy is reported refused only when none of its runs was measured;
// a split rolled back is counted apart from the measured runs, with its
// reason.
func TestSummarizeSplitKeepsRefusalsAndRollbacksApartFromMeasuredRuns(t *testing.T) {
	measured := SplitRun{Strategy: "recover", ParentBytes: 1 << 20, Windows: []Window{{End: 300 * time.Millisecond}, {End: 500 * time.Millisecond}},
		Gaps: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}, SteadyOps: 100, DuringOps: 50, RecoveryBytes: 2 << 20,
		Phases: []Phase{{Name: "CATCHING_UP", Start: time.Second, End: 1500 * time.Millisecond, OpsPerS: 80},
			{Name: "RECOVERING_REPLICAS", Start: 1500 * time.Millisecond, End: 3500 * time.Millisecond, OpsPerS: 10}}}
	runs := []SplitRun{
		measured,
		{Strategy: "recover", RolledBack: "illegal_state_exception: a copy failed"},
		{Strategy: "local", Refused: "400 illegal_argument_exception: unknown setting"},
	}
	sums := SummarizeSplit(runs)
	if len(sums) != 2 {
		t.Fatalf("%d summaries, want 2: %+v", len(sums), sums)
	}
	rec, local := sums[0], sums[1]
	if rec.Strategy != "recover" || rec.Runs != 1 || rec.Refused != "" || len(rec.RolledBack) != 1 || len(rec.Windows) != 2 ||
		rec.TputRatio[0] != 0.5 || rec.RecoveryPerParent[0] != 2 {
		t.Errorf("recover: %+v", rec)
	}
	if local.Refused == "" || local.Runs != 0 {
		t.Errorf("local: %+v", local)
	}
	report := SplitReport(runs)
	for _, want := range []string{"| recover | 1 | 300 / 500 / 500 | 100 / 200 / 200 | 0.50", "| local | refused: 400 illegal_argument_exception",
		"recover, by the split task's phase (medians, ranges): CATCHING_UP 0.50 (0.50–0.50) s at 0.80 (0.80–0.80) of steady; RECOVERING_REPLICAS 2.00 (2.00–2.00) s at 0.10 (0.10–0.10) of steady.",
		"recover: 1 split(s) rolled back before the hand-off, not measured: illegal_state_exception: a copy failed."} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
}
