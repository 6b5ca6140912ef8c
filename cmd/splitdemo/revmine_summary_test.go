package main

import (
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/policy"
	"github.com/shardsplit/shardsplit/routing"
)

// TestRevmineAutosplitOutputsNameEveryThreshold: the autosplit demo's
// summary.json lists the thresholds the policy ran with, and report.md
// states them, so that a run can be read and repeated. 91e3102 added
// RetryAfter (a failed action held back 3 s, which changes what the demo
// does after a failure) to the demo's thresholds, but neither output named
// it; MinKeySamples was missing from summary.json too. Every field of
// policy.Thresholds must have a key, and RetryAfter's value must be in
// both outputs.
func TestRevmineAutosplitOutputsNameEveryThreshold(t *testing.T) {
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
