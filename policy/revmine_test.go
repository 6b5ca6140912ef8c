package policy

import (
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/routing"
)

// revmineMerge feeds a Recorder readings of two idle leaves of root 0 at
// the given instants (seconds after t0) and returns Decide's action at the
// last one.
func revmineMerge(t *testing.T, th Thresholds, at []float64) Action {
	t.Helper()
	r := NewRecorder(th)
	tab := table(t, routing.ModePartition, split(0, 2))
	var last time.Time
	for i, s := range at {
		last = t0.Add(time.Duration(s * float64(time.Second)))
		w := uint64(i) // one write per reading: far under the merge limit
		r.Observe(last, map[routing.ShardID]Reading{2: {Writes: w}, 3: {Writes: w}})
	}
	return Decide(Input{Now: last, Table: tab, Shards: r.Stats()}, th).Action
}

// TestRevmineStalledIntervalIsAStallNotTheCadence: the rule of 2026-12-03
// (a stalled reading's long interval does not cover a merge window) took
// every interval longer than SplitSustain for a stall. A caller reading
// every 15 s with the default 10 s sustain window then never merged: each
// of its intervals was "stalled". The rule now compares an interval with
// the shard's usual one, and the stall that motivated it (38 s without a
// reading in a run read every 500 ms, longer than the whole merge window)
// still leaves the window uncovered.
func TestRevmineStalledIntervalIsAStallNotTheCadence(t *testing.T) {
	th := DefaultThresholds() // 10 s sustain, 5 min merge window
	var slow []float64
	for s := 0.0; s <= 600; s += 15 {
		slow = append(slow, s)
	}
	if a := revmineMerge(t, th, slow); a.Kind != Merge {
		t.Errorf("idle leaves read every 15 s for 10 min (sustain %v, merge window %v): %v, want a merge", th.SplitSustain, th.MergeWindow, a)
	}

	demo := th
	demo.SplitSustain, demo.MergeWindow, demo.SplitWritesPerSec = 3*time.Second, 6*time.Second, 420
	var stalled []float64
	for s := 0.0; s <= 10; s += 0.5 {
		stalled = append(stalled, s)
	}
	stalled = append(stalled, 48) // 38 s without a reading
	if a := revmineMerge(t, demo, stalled); a.Kind != None {
		t.Errorf("a 38 s stall after readings every 500 ms (merge window %v): %v, want nothing", demo.MergeWindow, a)
	}
	// Once ordinary readings cover a window again, the leaves merge.
	for s := 48.5; s <= 56; s += 0.5 {
		stalled = append(stalled, s)
	}
	if a := revmineMerge(t, demo, stalled); a.Kind != Merge {
		t.Errorf("8 s of readings every 500 ms after the stall: %v, want a merge", a)
	}
}
