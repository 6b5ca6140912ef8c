package findings

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/lab/experiment"
	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/storage"
)

// summarize's per-step timings (question 11): each child's and the
// slowest child's whole creation, the parent's flush (whichever child paid it), the parent's
// retirement; zero where the outcome has none (the shared layout's split
// retires no store of its own, a merge makes no children).
func TestSummarizePerStepTimings(t *testing.T) {
	ms := time.Millisecond
	type steps struct {
		ChildMax, Flush, RetireClose, RetireRemove float64
		Child                                      []float64
		Skipped                                    float64
	}
	for _, tc := range []struct {
		name     string
		children []storage.ChildStats
		retired  []storage.RetireStats
		want     steps
	}{
		{name: "none"},
		{
			name: "two children, the first flushed",
			children: []storage.ChildStats{
				{Shard: 1, Flush: 30 * ms, Checkpoint: 5 * ms, Open: 10 * ms, Excise: 2 * ms},
				{Shard: 2, Checkpoint: 4 * ms, Open: 40 * ms, Excise: 4 * ms},
			},
			retired: []storage.RetireStats{{Close: 7 * ms, Remove: 3 * ms}},
			want:    steps{ChildMax: 48, Flush: 30, RetireClose: 7, RetireRemove: 3, Child: []float64{47, 48}},
		},
		{
			name:     "a zero retirement (no store of its own)",
			children: []storage.ChildStats{{Shard: 1, Checkpoint: 1 * ms}},
			retired:  []storage.RetireStats{{}},
			want:     steps{ChildMax: 1, Child: []float64{1}},
		},
		{
			name: "the parent at the stop-writes depth: no flush, two WAL copies",
			children: []storage.ChildStats{
				{Shard: 1, SkippedFlush: true, Checkpoint: 5 * ms, Open: 30 * ms},
				{Shard: 2, SkippedFlush: true, Checkpoint: 4 * ms, Open: 20 * ms},
			},
			want: steps{ChildMax: 35, Child: []float64{35, 24}, Skipped: 2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := &experiment.Outcome{Load: &loadgen.Result{}, WindowStart: time.Second, WindowEnd: 2 * time.Second,
				End: 3 * time.Second, Children: tc.children, Retired: tc.retired}
			r := summarize(out, time.Second)
			got := steps{r.ChildMaxMs, r.FlushMs, r.RetireCloseMs, r.RetireRemoveMs, r.ChildMs, r.SkippedFlushes}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("per-step timings (-want +got):\n%s", d)
			}
		})
	}
}
