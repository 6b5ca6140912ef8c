package experiment

import (
	"testing"

	"github.com/shardsplit/shardsplit/internal/loadgen"
)

// requireLoadServed fails a run whose writers were refused: the runs inject
// no fault, so every write must be acknowledged, and some of those in
// flight during the split window and after it. Verify alone cannot see it:
// a failed write may or may not have happened, so a model whose writes all
// failed allows anything the index holds, and the run's record count
// includes failed writes. With every write refused while a split was in
// progress (mutation: node.Write's guard returning an error whenever
// t.InProgress() is not empty) TestInPlaceRunVerifies passed in both modes
// (review s21).
func requireLoadServed(t *testing.T, out *Outcome) {
	t.Helper()
	recs := out.Load.Records
	all := loadgen.Summarize(recs, 0, out.End+1<<40)
	during := loadgen.SummarizeOverlap(recs, out.WindowStart, out.WindowEnd)
	after := loadgen.Summarize(recs, out.WindowEnd, out.End+1<<40)
	if all.Errors > 0 || during.Acked == 0 || after.Acked == 0 {
		t.Errorf("the load was not served: %d of %d writes failed (first: %v); %d acknowledged in flight during the window [%v, %v], %d after it",
			all.Errors, len(recs), out.Load.Errors, during.Acked, out.WindowStart, out.WindowEnd, after.Acked)
	}
}
