package experiment

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const benchOutput = `goos: linux
BenchmarkSplitUnderLoad/layout=per-shard/parent=100MiB-2   1   100.0 split-ms   8.0 stall-ms   6.0 steady-stall-ms   12.0 after-stall-ms   0.99 split/steady   107.0 parent-MiB   50.0 child1-ms
BenchmarkSplitUnderLoad/layout=per-shard/parent=100MiB-2   1   300.0 split-ms   10.0 stall-ms   7.0 steady-stall-ms   14.0 after-stall-ms   0.97 split/steady   107.0 parent-MiB   70.0 child1-ms
BenchmarkSplitUnderLoad/layout=per-shard/parent=100MiB-2   1   200.0 split-ms   9.0 stall-ms   8.0 steady-stall-ms   13.0 after-stall-ms   0.98 split/steady   107.0 parent-MiB   60.0 child1-ms
BenchmarkSplitUnderLoad/layout=per-shard/parent=4GiB-2     1   400.0 split-ms   20.0 stall-ms   9.0 steady-stall-ms   30.0 after-stall-ms   0.96 split/steady   4354.0 parent-MiB   90.0 child1-ms
PASS
`

func TestParseScaleBench(t *testing.T) {
	got, err := ParseScaleBench(strings.NewReader(benchOutput), "after")
	if err != nil {
		t.Fatal(err)
	}
	want := []ScalePoint{
		{Label: "after", Parent: "100MiB", ParentMiB: 107, Runs: 3, SplitMs: 200, StallMs: 9, SteadyStallMs: 7, AfterStallMs: 13, Throughput: 0.98,
			Metrics: map[string]float64{"split-ms": 200, "stall-ms": 9, "steady-stall-ms": 7, "after-stall-ms": 13, "split/steady": 0.98, "parent-MiB": 107, "child1-ms": 60}},
		{Label: "after", Parent: "4GiB", ParentMiB: 4354, Runs: 1, SplitMs: 400, StallMs: 20, SteadyStallMs: 9, AfterStallMs: 30, Throughput: 0.96,
			Metrics: map[string]float64{"split-ms": 400, "stall-ms": 20, "steady-stall-ms": 9, "after-stall-ms": 30, "split/steady": 0.96, "parent-MiB": 4354, "child1-ms": 90}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseScaleBench (-want +got):\n%s", diff)
	}
}

func TestScaleChart(t *testing.T) {
	before, err := ParseScaleBench(strings.NewReader(benchOutput), "before")
	if err != nil {
		t.Fatal(err)
	}
	after, err := ParseScaleBench(strings.NewReader(benchOutput), "after")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"scale.png", "scale.svg"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), name)
			if err := ScaleChart(append(before, after...), path); err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
				t.Fatalf("chart %s not written: %v", path, err)
			}
		})
	}
	if err := ScaleChart(nil, filepath.Join(t.TempDir(), "empty.png")); err == nil {
		t.Error("ScaleChart of no points: no error")
	}
}

// TestScaleChartFromBench draws the chart of real benchmark outputs
// (skipped unless SHARDSPLIT_SCALE_BENCH is set): SHARDSPLIT_SCALE_BENCH is
// label=file[,label=file...], each file `go test -bench SplitUnderLoad`
// output, and the chart goes to SHARDSPLIT_SCALE_CHART (default
// scale.png in the working directory).
func TestScaleChartFromBench(t *testing.T) {
	spec := os.Getenv("SHARDSPLIT_SCALE_BENCH")
	if spec == "" {
		t.Skip("SHARDSPLIT_SCALE_BENCH not set")
	}
	var pts []ScalePoint
	for _, part := range strings.Split(spec, ",") {
		label, file, ok := strings.Cut(part, "=")
		if !ok {
			t.Fatalf("SHARDSPLIT_SCALE_BENCH: %q is not label=file", part)
		}
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		p, err := ParseScaleBench(f, label)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, pt := range p {
			t.Logf("%s %s (%.0f MiB, %d runs): split %.1f ms, stall %.1f ms, steady stall %.1f ms, after %.1f ms, throughput %.3f; %v",
				label, pt.Parent, pt.ParentMiB, pt.Runs, pt.SplitMs, pt.StallMs, pt.SteadyStallMs, pt.AfterStallMs, pt.Throughput, pt.Metrics)
		}
		pts = append(pts, p...)
	}
	out := os.Getenv("SHARDSPLIT_SCALE_CHART")
	if out == "" {
		out = "scale.png"
	}
	if err := ScaleChart(pts, out); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkSplitUnderLoad runs both storage layouts (layout=per-shard/
// parent=…, layout=shared/parent=…) and its documented command (-bench
// SplitUnderLoad) prints both. Runs of different configurations must not
// share a median: keyed by parent size alone, the scale curve's medians
// would pool per-shard splits (hundreds of ms) with shared ones (metadata
// only). ParseScaleBench answers an error naming both.
func TestParseScaleBenchKeepsLayoutsApart(t *testing.T) {
	const out = `BenchmarkSplitUnderLoad/layout=per-shard/parent=100MiB-2   1   300.0 split-ms   10.0 stall-ms   107.0 parent-MiB
BenchmarkSplitUnderLoad/layout=per-shard/parent=100MiB-2   1   310.0 split-ms   11.0 stall-ms   107.0 parent-MiB
BenchmarkSplitUnderLoad/layout=shared/parent=100MiB-2      1   2.0 split-ms     1.0 stall-ms    107.0 parent-MiB
`
	pts, err := ParseScaleBench(strings.NewReader(out), "x")
	if err == nil {
		t.Fatalf("per-shard and shared runs pooled: %+v (split-ms median %v of 300, 310 per-shard and 2 shared)", pts, pts[0].SplitMs)
	}
	if !strings.Contains(err.Error(), "layout=per-shard") || !strings.Contains(err.Error(), "layout=shared") {
		t.Fatalf("error %q does not name both configurations", err)
	}
	// One layout selected (-bench 'SplitUnderLoad/layout=shared') parses.
	if _, err := ParseScaleBench(strings.NewReader(strings.SplitAfterN(out, "\n", 3)[2]), "x"); err != nil {
		t.Fatalf("one layout: %v", err)
	}
}
