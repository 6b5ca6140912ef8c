package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/lab/experiment"
	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/policy"
	"github.com/shardsplit/shardsplit/routing"
)

// TestAutosplitSmallRun runs the autosplit demo for a few seconds with
// thresholds scaled down further, and checks that the policy split on its
// own, every output exists, summary.json has the agreed keys, and every
// acknowledged write verified.
func TestAutosplitSmallRun(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	cfg, _, err := parseAutosplit([]string{"--duration", "4s", "--rate", "400", "--writers", "8", "--out", out,
		"--json", filepath.Join(t.TempDir(), "s.json"), "--data", filepath.Join(t.TempDir(), "data")}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.docs, cfg.tick = 2000, 200*time.Millisecond
	cfg.th = policy.Thresholds{SplitWritesPerSec: 100, SplitSustain: 600 * time.Millisecond, MaxShardBytes: 1 << 30,
		MergeWindow: time.Second, MergeLoadFraction: 0.5, MergeDelay: time.Second, MinKeySamples: 10}
	res, err := autosplitRun(context.Background(), cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeAutosplitOutputs(cfg, res); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"report.md", "shard-writes.png", "timeline.csv", "summary.json"} {
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	data, err := os.ReadFile(cfg.jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"max_shard_write_share_before", "max_shard_write_share_after", "splits", "merges",
		"unsplittable_hot_keys", "max_write_stall_ms", "lost_writes", "misplaced_docs", "duplicate_docs"} {
		if _, ok := s[k]; !ok {
			t.Errorf("summary.json lacks %s", k)
		}
	}
	for _, k := range []string{"lost_writes", "misplaced_docs", "duplicate_docs"} {
		if s[k] != 0.0 {
			t.Errorf("%s = %v", k, s[k])
		}
	}
	if !res.verify.OK() || res.verify.Checked == 0 {
		t.Errorf("verification: %+v", res.verify)
	}
	if s["splits"].(float64) < 1 {
		t.Errorf("the policy never split (hot root at about twice the threshold): %s", res.reading)
	}
	t.Log(res.reading)
}

// TestAutosplitBadFlags: bad input is a usage error naming the value.
func TestAutosplitBadFlags(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string // in the message
	}{
		{name: "zero duration", args: []string{"--duration", "0s"}, want: "0s"},
		{name: "negative rate", args: []string{"--rate", "-5"}, want: "-5"},
		{name: "unknown mode", args: []string{"--mode", "hash"}, want: `"hash"`},
		{name: "stray argument", args: []string{"extra"}, want: `"extra"`},
		// Refused before the run begins, with 2, not found when it begins
		// and answered with 1 ("the command ran and found a problem").
		{name: "unknown log level", args: []string{"--log-level", "loud"}, want: `"loud"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := runCmd(append([]string{"autosplit"}, c.args...)...)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr %s", code, exitUsage, stderr)
			}
			if !strings.Contains(stderr, c.want) {
				t.Fatalf("stderr %q does not name %s", stderr, c.want)
			}
		})
	}
}

// A run whose load acknowledged no write has verified nothing: it fails,
// rather than print "All 0 acknowledged writes verified" and exit 0 (here
// --rate 0.001 with 32 writers: one write per writer every 32,000 s, none
// in the run).
func TestAutosplitWithNothingAcknowledgedFails(t *testing.T) {
	dir := t.TempDir()
	stdout, stderr, code := runCmd("autosplit", "--rate", "0.001", "--duration", "1s",
		"--out", filepath.Join(dir, "out"), "--data", filepath.Join(dir, "data"))
	if code == exitOK || strings.Contains(stdout, "All 0 acknowledged writes verified") {
		t.Fatalf("exit %d with no acknowledged write; stdout %q", code, stdout)
	}
	if !strings.Contains(stdout+stderr, "no write was acknowledged") {
		t.Fatalf("exit %d, but nothing says why: stdout %q, stderr %q", code, stdout, stderr)
	}
}

// --rate sets each writer's pace, writers/rate seconds apart. An infinite
// rate makes that 0 and a rate so low that the interval overflows a
// time.Duration makes it negative, and loadgen, reading any interval <= 0
// as "as fast as possible", would write unpaced, the opposite of 1e-12.
// Both are usage errors naming the value.
func TestAutosplitRateMustBePaceable(t *testing.T) {
	for _, rate := range []string{"inf", "1e-12"} {
		t.Run(rate, func(t *testing.T) {
			cfg, code, err := parseAutosplit([]string{"--rate", rate}, io.Discard)
			if err == nil {
				t.Fatalf("--rate %s accepted: rate %v, %d writers", rate, cfg.rate, cfg.writers)
			}
			if code != exitUsage || !strings.Contains(err.Error(), "--rate") {
				t.Fatalf("--rate %s: exit %d, error %q; want a usage error naming --rate", rate, code, err)
			}
		})
	}
	if _, _, err := parseAutosplit([]string{"--rate", "0.5"}, io.Discard); err != nil {
		t.Fatalf("--rate 0.5 refused: %v", err)
	}
}

// autosplit splits and merges in place, where no write may fail (compare
// fails an in-place run whose writes got errors). Verification allows
// whatever a failed write left, so it alone cannot pass such a run, and
// "All N acknowledged writes verified" with exit 0 would hide the errors:
// the run fails and the reading says that writes failed.
func TestAutosplitWithFailedWritesFails(t *testing.T) {
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

// The autosplit demo's summary.json lists the thresholds the policy ran
// with, and report.md states them, so that a run can be read and repeated:
// every field of policy.Thresholds has a key, and RetryAfter (a failed
// action held back, which changes what the demo does after a failure) is in
// both outputs.
func TestAutosplitOutputsNameEveryThreshold(t *testing.T) {
	cfg, _, err := parseAutosplit(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.th.RetryAfter = 7 * time.Second // distinct from every other duration
	settings := routing.Settings{Shards: 4, RoutingShards: 256, PartitionSize: 1}
	tab, err := routing.NewTable(cfg.mode, settings)
	if err != nil {
		t.Fatal(err)
	}
	r := &autosplitResult{cfg: cfg, settings: settings, phases: []phase{{Name: "only"}}, load: &loadgen.Result{}, finalTab: tab}
	r.summary = autosplitSummary(r)
	th, ok := r.summary["thresholds"].(map[string]any)
	if !ok {
		t.Fatalf("summary.json has no thresholds: %v", r.summary)
	}
	if got, want := len(th)-1, reflect.TypeFor[policy.Thresholds]().NumField(); got != want { // -1: scaled_down_from
		t.Errorf("summary.json names %d thresholds, policy.Thresholds has %d fields: %v", got, want, th)
	}
	if got := th["retry_after"]; got != "7s" {
		t.Errorf("summary.json thresholds.retry_after = %v, want 7s (thresholds: %v)", got, th)
	}
	if md := autosplitMarkdown(r); !strings.Contains(md, "7s") {
		t.Errorf("report.md does not state the retry delay (7s):\n%s", md)
	}
}
