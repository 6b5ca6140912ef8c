package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/internal/experiment"
	"github.com/shardsplit/shardsplit/internal/loadgen"
)

// TestCompareSmallRun runs the whole comparison on a tiny index and checks
// every output exists, summary.json has exactly the agreed keys, and both
// strategies verified clean.
func TestCompareSmallRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs both strategies end to end")
	}
	out := filepath.Join(t.TempDir(), "out")
	stdout, stderr, code := runCmd("compare", "--docs", "3000", "--doc-size", "256", "--writers", "4", "--rate", "800",
		"--steady", "1500ms", "--after", "300ms", "--out", out, "--data", filepath.Join(t.TempDir(), "data"))
	if code != exitOK {
		t.Fatalf("compare exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	for _, f := range []string{"report.md", "throughput.png", "latency.png", "timeline.csv", "summary.json"} {
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	data, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]map[string]any
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	want := []string{"max_write_stall_ms", "write_p50_ms", "write_p99_ms", "write_max_ms", "throughput_steady_ops",
		"throughput_during_split_ops", "split_duration_ms", "write_errors", "write_retries", "acked_writes", "lost_writes",
		"misplaced_docs", "duplicate_docs", "bytes_written", "disk_before_bytes", "disk_peak_bytes", "disk_after_bytes"}
	for _, strategy := range []string{"inplace", "newindex"} {
		m := s[strategy]
		if len(m) != len(want) {
			t.Errorf("%s has %d keys, want %d", strategy, len(m), len(want))
		}
		for _, k := range want {
			if _, ok := m[k]; !ok {
				t.Errorf("%s lacks %s", strategy, k)
			}
		}
		for _, k := range []string{"lost_writes", "misplaced_docs", "duplicate_docs"} {
			if m[k] != 0.0 {
				t.Errorf("%s: %s = %v", strategy, k, m[k])
			}
		}
		if m["acked_writes"].(float64) < 500 {
			t.Errorf("%s acked only %v writes", strategy, m["acked_writes"])
		}
	}
	if s["config"] == nil || s["machine"] == nil {
		t.Errorf("summary lacks config or machine")
	}
	if !strings.Contains(stdout, "none lost") {
		t.Errorf("reading: %s", stdout)
	}
}

func TestCompareBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"compare", "--mode", "hash"}, {"compare", "--strategy", "x"}, {"compare", "--cleanup", "x"},
		{"compare", "--split", "99"}, {"compare", "--docs", "0"}, {"--durability", "never"}, {"compare", "extra"},
	} {
		out, errOut, code := runCmd(args...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and one line", args, code, out, errOut)
		}
	}
	out, _, code := runCmd("help", "compare")
	if code != exitOK || !strings.Contains(out, "--cleanup") || !strings.Contains(out, "Examples") {
		t.Errorf("help compare: exit %d %q", code, out)
	}
}

// The reading warns when the writers could not offer the target rate before
// the split (then lost throughput measures the load generator, not the
// split), and stays quiet when they could.
func TestReadingWarnsOfAnUnderpoweredLoad(t *testing.T) {
	outcome := func(perSecond int) *experiment.Outcome {
		var recs []loadgen.Record
		gap := time.Second / time.Duration(perSecond)
		for at := time.Duration(0); at < 4*time.Second; at += gap {
			recs = append(recs, loadgen.Record{Start: at, End: at + time.Millisecond, OK: true, Moving: true})
		}
		return &experiment.Outcome{Strategy: "inplace", Load: &loadgen.Result{Records: recs},
			WindowStart: 3 * time.Second, WindowEnd: 3100 * time.Millisecond, End: 4 * time.Second}
	}
	cfg := &compareConfig{rate: 5000, writers: 16}
	for _, tc := range []struct {
		perSecond int
		warn      bool
	}{{4700, true}, {5000, false}} {
		got := reading(&comparison{cfg: cfg, outcomes: []*experiment.Outcome{outcome(tc.perSecond)}})
		if strings.Contains(got, "Caution: the writers did not reach the target rate") != tc.warn {
			t.Errorf("steady %d/s of 5000: warning = %v, want %v:\n%s", tc.perSecond, !tc.warn, tc.warn, got)
		}
	}
}
