package autosplit

import (
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/policy"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
)

// TestRevmineSlowTickStillMerges: a loop that ticks less often than
// SplitSustain (here every 2 s with a 1 s sustain window: nothing in
// Loop, Decide or the design asks for a faster tick, and splits still work
// at that cadence) must still merge two idle leaves once the merge window
// is covered. Every one of its intervals is longer than SplitSustain, and
// the stalled-reading rule of 2026-12-03 took each of them for a stall:
// the window was never covered and the loop never merged, however long it
// ran.
func TestRevmineSlowTickStillMerges(t *testing.T) {
	th := policy.Thresholds{SplitWritesPerSec: 1000, SplitSustain: time.Second, MaxShardBytes: 1 << 30,
		MergeWindow: 4 * time.Second, MergeLoadFraction: 0.5, MergeDelay: time.Second, MinKeySamples: 10}
	n := openNode(t)
	exec := &recorder{merger: SplitterExecutor{Driver: splitter.NewDriver(n, splitter.Config{})}}
	l, err := New(Config{Node: n, Executor: exec, Thresholds: th})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const tick = 2 * time.Second
	for i := range 20 { // 40 s: ten merge windows
		ev, err := l.Tick(t0.Add(time.Duration(i) * tick))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Decision.Action.Kind == policy.Merge && ev.Err != nil {
			t.Fatalf("merge of %v: %v", ev.Decision.Action.Shards, ev.Err)
		}
	}
	if want := [][]routing.ShardID{{2, 3}}; len(exec.merges) != 1 || exec.merges[0][0] != 2 || exec.merges[0][1] != 3 {
		t.Errorf("merges with a %v tick and a %v merge window over 40 s of idle leaves 2 and 3: %v, want %v",
			tick, th.MergeWindow, exec.merges, want)
	}
}
