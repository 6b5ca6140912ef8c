package main

import (
	"strings"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/lab/experiment"
	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/routing"
)

// TestReviewS22eAutosplitFailedWritesFail: autosplit splits and merges in
// place, where no write may fail (compare fails an in-place run whose
// writes got errors). A run in which writes got errors printed "All N
// acknowledged writes verified" and exited 0: verification allows
// whatever a failed write left, so it alone cannot pass such a run. The
// run must fail and the reading must say that writes failed.
func TestReviewS22eAutosplitFailedWritesFail(t *testing.T) {
	var recs []loadgen.Record
	for i := range 100 {
		at := time.Duration(i) * 10 * time.Millisecond
		recs = append(recs, loadgen.Record{Start: at, End: at + time.Millisecond, OK: i%25 != 7, Moving: true})
	}
	settings := routing.Settings{Shards: 4, RoutingShards: 256, PartitionSize: 1}
	tab, err := routing.NewTable(routing.ModePartition, settings)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &autosplitConfig{duration: time.Second, rate: 100, writers: 2, th: demoThresholds()}
	res := &autosplitResult{cfg: cfg, settings: settings, phases: []phase{{Name: "spread evenly", To: time.Second}},
		load: &loadgen.Result{Records: recs}, verify: experiment.Verification{Checked: 96}, end: time.Second, finalTab: tab}
	res.summary = autosplitSummary(res)
	res.reading = autosplitReading(res)
	if res.verified() {
		t.Errorf("a run with %v failed writes verified (exit 0); reading: %s", res.summary["write_errors"], res.reading)
	}
	if !strings.Contains(res.reading, "WRITES FAILED: 4 writes") {
		t.Errorf("reading does not say 4 writes failed: %s", res.reading)
	}
}
