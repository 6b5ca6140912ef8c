package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/baseline"
	"github.com/shardsplit/shardsplit/lab/experiment"
	"github.com/shardsplit/shardsplit/lab/loadgen"
)

// blockedOutcome is a new-index-like run: a write every 10 ms from 0 to 8 s,
// but none issued from 3 s to 4.2 s, where the write issued just before the
// block waits for it; the split request is at 3 s, the window 1.2 s.
func blockedOutcome() *experiment.Outcome {
	ms := time.Millisecond
	var recs []loadgen.Record
	for at := time.Duration(0); at < 8*time.Second; at += 10 * ms {
		switch {
		case at == 2990*ms:
			recs = append(recs, loadgen.Record{Start: at, End: 4200 * ms, OK: true, Moving: true})
		case at >= 3*time.Second && at < 4200*ms:
		default:
			recs = append(recs, loadgen.Record{Start: at, End: at + 2*ms, OK: true, Moving: true})
		}
	}
	return &experiment.Outcome{Strategy: "newindex", Load: &loadgen.Result{Records: recs},
		WindowStart: 3 * time.Second, WindowEnd: 4200 * time.Millisecond, End: 8 * time.Second}
}

// The latency line is broken where no write was issued: no segment spans a
// bucket without one, in the whole-run panel and in the zoom, so the chart
// draws no diagonal across a write block. Throughput is a value in every
// bucket, 0 in the block.
func TestLatencyChartDrawsNoSegmentAcrossBucketsWithoutWrites(t *testing.T) {
	o := blockedOutcome()
	all := func(*experiment.Outcome) time.Duration { return 0 }
	end := func(o *experiment.Outcome) time.Duration { return o.End }
	for _, tc := range []struct {
		name     string
		from, to func(*experiment.Outcome) time.Duration
		b        time.Duration
	}{
		{"whole run", all, end, bucket},
		{"zoom", func(o *experiment.Outcome) time.Duration { return o.WindowStart - zoomBefore },
			func(o *experiment.Outcome) time.Duration { return o.WindowStart + zoomAfter }, zoomBucket},
	} {
		tput, lat := chartData([]*experiment.Outcome{o}, tc.from, tc.to, tc.b)
		runs := lat.series[0].runs
		if len(runs) != 2 {
			t.Errorf("%s: %d latency runs, want 2 (before and after the block)", tc.name, len(runs))
		}
		for _, run := range runs {
			for i := 1; i < len(run); i++ {
				if gap := run[i].X - run[i-1].X; gap > tc.b.Seconds()*1.001 {
					t.Errorf("%s: a latency segment spans %.3f s to %.3f s, more than one %v bucket", tc.name, run[i-1].X, run[i].X, tc.b)
				}
			}
			for _, pt := range run {
				if pt.X > 0 && pt.X < 1.2 {
					t.Errorf("%s: a latency point at %.3f s, inside the block where no write was issued", tc.name, pt.X)
				}
			}
		}
		zeros := 0
		for _, pt := range tput.series[0].runs[0] {
			if pt.X > 0 && pt.X < 1.2 && pt.Y == 0 {
				zeros++
			}
		}
		if want := int(1200*time.Millisecond/tc.b) - 1; zeros < want {
			t.Errorf("%s: throughput is 0 in %d buckets of the block, want at least %d", tc.name, zeros, want)
		}
	}
}

// t = 0 is a labelled tick on every panel, wherever the default ticks fall.
func TestChartTicksLabelTheSplitRequest(t *testing.T) {
	for _, r := range [][2]float64{{-4.05, 12.3}, {-0.5, 1.5}, {-3.3, 17.7}} {
		found := false
		for _, tk := range (zeroTicks{}).Ticks(r[0], r[1]) {
			if tk.Value == 0 && tk.Label == "0" {
				found = true
			}
		}
		if !found {
			t.Errorf("ticks of [%v, %v] have no labelled 0", r[0], r[1])
		}
	}
}

// The charts render with a zoom panel for a run whose window is a
// millisecond sliver beside one of seconds.
func TestWriteChartsDrawsBothPanels(t *testing.T) {
	ms := time.Millisecond
	in := blockedOutcome()
	in.Strategy, in.WindowEnd = "inplace", 3*time.Second+60*ms
	dir := t.TempDir()
	if err := writeCharts(dir, &comparison{outcomes: []*experiment.Outcome{in, blockedOutcome()}}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"throughput.png", "latency.png"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// The reading names the new-index baseline's cleanup model wherever it
// quotes the baseline (its sentence and the ratio), and quotes the ratio
// without our consistency check too, so the headline says what it
// measured against.
func TestReadingNamesTheBaselinesCleanupModel(t *testing.T) {
	ms := time.Millisecond
	inplace := func() *experiment.Outcome {
		var recs []loadgen.Record
		for at := time.Duration(0); at < 8*time.Second; at += 5 * ms {
			recs = append(recs, loadgen.Record{Start: at, End: at + ms, OK: true, Moving: true})
		}
		return &experiment.Outcome{Strategy: "inplace", Load: &loadgen.Result{Records: recs},
			WindowStart: 3 * time.Second, WindowEnd: 3060 * ms, End: 8 * time.Second}
	}
	for _, c := range []baseline.Cleanup{baseline.CleanupMark, baseline.CleanupPerDoc, baseline.CleanupRange} {
		ni := blockedOutcome()
		ni.Phases = []experiment.Phase{{Name: "resize", Start: 3 * time.Second, End: 3900 * ms}, {Name: "wait-consistent", Start: 3900 * ms, End: 4150 * ms}}
		got := reading(&comparison{cfg: &compareConfig{rate: 200, writers: 4, cleanup: c}, outcomes: []*experiment.Outcome{inplace(), ni}})
		for _, want := range []string{"new-index _split x2, with " + cleanupModel(c) + ",", "than the new-index split's with " + c.String() + " cleanup",
			"against its block less our consistency check", "250 ms of the block is our check"} {
			if !strings.Contains(got, want) {
				t.Errorf("%s cleanup: the reading lacks %q:\n%s", c, want, got)
			}
		}
	}
}

// The tick labels are round numbers at one step, whatever the range.
func TestChartTicksAreRoundSteps(t *testing.T) {
	var labels []string
	for _, tk := range (zeroTicks{}).Ticks(-4.05, 19.7) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got, want := strings.Join(labels, " "), "0 5 10 15"; got != want {
		t.Errorf("labels of [-4.05, 19.7] = %q, want %q", got, want)
	}
}
