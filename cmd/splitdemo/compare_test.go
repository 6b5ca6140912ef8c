package main

import (
	"encoding/json"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/lab/experiment"
	"github.com/shardsplit/shardsplit/lab/loadgen"
)

// summaryKeys are the keys every strategy object of summary.json has, in
// the order the report documents them.
func summaryKeys() []string {
	var keys []string
	for _, k := range experiment.SummaryKeyDocs {
		keys = append(keys, k[0])
	}
	return keys
}

// TestCompareSmallRun runs the whole comparison on a tiny index and checks
// every output exists, summary.json has exactly the documented keys for
// each of the three strategies, and all three verified clean, with reads
// that never saw a foreign document.
func TestCompareSmallRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three strategies end to end")
	}
	out := filepath.Join(t.TempDir(), "out")
	stdout, stderr, code := runCmd("compare", "--docs", "3000", "--doc-size", "256", "--writers", "4", "--rate", "800",
		"--steady", "1500ms", "--after", "1200ms", "--read-rate", "100", "--count-every", "5", "--out", out, "--data", filepath.Join(t.TempDir(), "data"))
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
	want := summaryKeys()
	slices.Sort(want)
	top := slices.Sorted(maps.Keys(s))
	if diff := cmp.Diff([]string{"config", "inplace", "machine", "newindex", "rfc"}, top); diff != "" {
		t.Errorf("summary.json top-level keys (-want +got):\n%s", diff)
	}
	for _, strategy := range []string{"inplace", "rfc", "newindex"} {
		m := s[strategy]
		if diff := cmp.Diff(want, slices.Sorted(maps.Keys(m))); diff != "" {
			t.Errorf("%s keys (-want +got):\n%s", strategy, diff)
		}
		for _, k := range []string{"lost_writes", "misplaced_docs", "duplicate_docs", "read_foreign_docs", "read_errors"} {
			if m[k] != 0.0 {
				t.Errorf("%s: %s = %v", strategy, k, m[k])
			}
		}
		for _, k := range []string{"acked_writes", "reads", "get_p99_steady_ms", "search_p99_steady_ms", "count_p99_ms", "steady_1s_stall_ms", "disk_after_bytes"} {
			if v, _ := m[k].(float64); v <= 0 {
				t.Errorf("%s: %s = %v, want > 0", strategy, k, m[k])
			}
		}
	}
	// Only the RFC's path and the per-doc new-index cleanup delete documents one by one.
	if s["rfc"]["cleanup_docs_deleted"].(float64) == 0 || s["newindex"]["cleanup_docs_deleted"].(float64) == 0 || s["inplace"]["cleanup_docs_deleted"].(float64) != 0 {
		t.Errorf("cleanup_docs_deleted: inplace %v, rfc %v, newindex %v; want 0, > 0, > 0",
			s["inplace"]["cleanup_docs_deleted"], s["rfc"]["cleanup_docs_deleted"], s["newindex"]["cleanup_docs_deleted"])
	}
	if s["config"]["read_rate"] != 100.0 || s["config"]["search_rate"] != 10.0 || s["config"]["count_every"] != 5.0 {
		t.Errorf("config: read_rate %v, search_rate %v", s["config"]["read_rate"], s["config"]["search_rate"])
	}
	if s["config"] == nil || s["machine"] == nil {
		t.Errorf("summary lacks config or machine")
	}
	if !strings.Contains(stdout, "none lost") || !strings.Contains(stdout, "The RFC's data path") {
		t.Errorf("reading: %s", stdout)
	}
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range summaryKeys() {
		if !strings.Contains(string(report), "`"+k+"`: ") {
			t.Errorf("report.md does not document %s", k)
		}
	}
	header, _, _ := strings.Cut(string(mustRead(t, filepath.Join(out, "timeline.csv"))), "\n")
	for _, col := range []string{"get_p99_ms", "search_p99_ms", "in_cleanup", "disk_bytes"} {
		if !strings.Contains(header, col) {
			t.Errorf("timeline.csv lacks %s: %s", col, header)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// --strategy chooses the columns; "both" keeps its old meaning.
func TestCompareStrategies(t *testing.T) {
	for _, tc := range []struct {
		arg                    string
		inplace, rfc, newindex bool
	}{
		{"", true, true, true}, {"all", true, true, true}, {"both", true, false, true},
		{"inplace", true, false, false}, {"rfc", false, true, false}, {"newindex", false, false, true},
	} {
		args := []string{}
		if tc.arg != "" {
			args = []string{"--strategy", tc.arg}
		}
		c, _, err := parseCompare(args, io.Discard)
		if err != nil {
			t.Fatalf("%q: %v", tc.arg, err)
		}
		if c.inplace != tc.inplace || c.rfc != tc.rfc || c.newindex != tc.newindex {
			t.Errorf("--strategy %q: inplace %v rfc %v newindex %v", tc.arg, c.inplace, c.rfc, c.newindex)
		}
	}
}

func TestCompareBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"compare", "--mode", "hash"}, {"compare", "--strategy", "x"}, {"compare", "--cleanup", "x"}, {"compare", "--read-rate", "-1"}, {"compare", "--align-flush", "-1s"}, {"compare", "--count-every", "-1"},
		{"compare", "--split", "99"}, {"compare", "--docs", "0"}, {"--durability", "never"}, {"compare", "extra"},
	} {
		out, errOut, code := runCmd(args...)
		if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and one line", args, code, out, errOut)
		}
	}
	out, _, code := runCmd("help", "compare")
	if code != exitOK || !strings.Contains(out, "--cleanup") || !strings.Contains(out, "--read-rate") || !strings.Contains(out, "rfc") || !strings.Contains(out, "Examples") {
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

// A run whose writes got errors says so: for an in-place strategy it is a
// failure (no write may fail because of the split, and verification alone
// allows whatever a failed write left), for the new-index one a cost.
func TestReadingReportsFailedWrites(t *testing.T) {
	outcome := func(strategy string, failed int) *experiment.Outcome {
		var recs []loadgen.Record
		for i := range 100 {
			at := time.Duration(i) * 40 * time.Millisecond
			recs = append(recs, loadgen.Record{Start: at, End: at + time.Millisecond, OK: i >= failed, Moving: true})
		}
		return &experiment.Outcome{Strategy: strategy, Load: &loadgen.Result{Records: recs},
			WindowStart: 3 * time.Second, WindowEnd: 3100 * time.Millisecond, End: 4 * time.Second}
	}
	cfg := &compareConfig{rate: 25, writers: 16}
	for _, tc := range []struct {
		strategy string
		failed   int
		want     string
	}{
		{"inplace", 3, "WRITES FAILED: 3 writes of the inplace run got an error"},
		{"rfc", 1, "WRITES FAILED: 1 writes of the rfc run got an error"},
		{"newindex", 2, " 2 writes of the newindex run got an error."},
		{"inplace", 0, ""},
	} {
		got := reading(&comparison{cfg: cfg, outcomes: []*experiment.Outcome{outcome(tc.strategy, tc.failed)}})
		if tc.want == "" && strings.Contains(got, "got an error") || tc.want != "" && !strings.Contains(got, tc.want) {
			t.Errorf("%s with %d failed writes: reading %q; want it to say %q", tc.strategy, tc.failed, got, tc.want)
		}
	}
}

// compare refuses a --rate, --read-rate, --steady or --after it cannot
// measure, as a usage error naming the flag and its value. A NaN or
// infinite rate would pace nothing (loadgen reads an interval <= 0 as "as
// fast as possible") and then fail the whole run at its end, when
// summary.json cannot encode the NaN; a rate so low that writers/rate
// seconds overflow a time.Duration would be unpaced too; --rate 0 would
// write flat out under a report saying "under 0 writes/s"; a zero or
// negative --steady leaves no steady window, so throughput during the split
// would be a percentage of 0 ops/s; a negative --after would be read as 0.
func TestCompareRefusesUnmeasurableLoads(t *testing.T) {
	for _, args := range [][]string{
		{"--rate", "NaN"}, {"--rate", "+Inf"}, {"--rate", "0"}, {"--rate", "1e-12"},
		{"--read-rate", "NaN"}, {"--read-rate", "+Inf"}, {"--read-rate", "1e-12"},
		{"--steady", "0s"}, {"--steady", "-1s"}, {"--after", "-1s"},
	} {
		cfg, code, err := parseCompare(args, io.Discard)
		if err == nil {
			t.Errorf("%v accepted: rate %v, read rate %v, steady %v, after %v", args, cfg.rate, cfg.readRate, cfg.steady, cfg.after)
			continue
		}
		if code != exitUsage || !strings.Contains(err.Error(), args[0]) || !strings.Contains(err.Error(), strings.TrimPrefix(args[1], "+")) {
			t.Errorf("%v: exit %d, error %q; want a usage error naming the flag and its value", args, code, err)
		}
	}
	for _, args := range [][]string{{"--rate", "0.5"}, {"--read-rate", "0"}, {"--after", "0s"}, {"--steady", "100ms"}} {
		if _, _, err := parseCompare(args, io.Discard); err != nil {
			t.Errorf("%v refused: %v", args, err)
		}
	}
}

// Flags that shape only the in-place strategies (--split, --mode,
// --align-flush) are refused with --strategy newindex, and --cleanup
// (new-index only) without newindex, as usage errors naming the flag and
// the strategy. Ignored, they would misreport the run: a run asked to split
// shard 3 four ways in opensearch mode would measure a _split x2 of the
// whole index in partition mode, with summary.json's config saying
// split_ways 4 and mode opensearch.
func TestCompareRefusesFlagsNoStrategyUses(t *testing.T) {
	for _, args := range [][]string{
		{"--strategy", "newindex", "--split", "3:4"},
		{"--strategy", "newindex", "--mode", "opensearch"},
		{"--strategy", "newindex", "--align-flush", "1s"},
		{"--strategy", "inplace", "--cleanup", "range"},
		{"--strategy", "rfc", "--cleanup", "per-doc"},
	} {
		_, code, err := parseCompare(args, io.Discard)
		if err == nil {
			t.Errorf("%v accepted: the flag is ignored by every strategy run", args)
			continue
		}
		if code != exitUsage || !strings.Contains(err.Error(), args[2]) || !strings.Contains(err.Error(), args[1]) {
			t.Errorf("%v: exit %d, error %q; want a usage error naming %s and --strategy %s", args, code, err, args[2], args[1])
		}
	}
	for _, args := range [][]string{
		{"--strategy", "all", "--split", "3:4", "--cleanup", "range", "--mode", "opensearch"},
		{"--strategy", "both", "--align-flush", "1s", "--cleanup", "range"},
		{"--strategy", "rfc", "--split", "3"},
		{"--strategy", "newindex", "--cleanup", "range"},
	} {
		if _, _, err := parseCompare(args, io.Discard); err != nil {
			t.Errorf("%v refused: %v", args, err)
		}
	}
}
