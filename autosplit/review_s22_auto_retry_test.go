package autosplit

import (
	"fmt"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/policy"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// TestReviewS22AutoFailingSplitDoesNotStarveASlowLoop: RetryAfter holds a
// failed action's shards back so that one that keeps failing "neither
// runs at every tick nor starves the next hottest leaf". A loop that ticks
// less often than RetryAfter (nothing asks it not to: revmine's slow-tick
// test ticks every 15 s against the default 10 s) saw every failure older
// than RetryAfter at its next tick: shard 1, whose splits always fail, was
// proposed at every tick and leaf 2, over the threshold all along, was
// never split.
func TestReviewS22AutoFailingSplitDoesNotStarveASlowLoop(t *testing.T) {
	th := policy.Thresholds{SplitWritesPerSec: 100, SplitSustain: time.Second, MaxShardBytes: 1 << 30,
		MergeWindow: time.Minute, MergeLoadFraction: 0.5, MergeDelay: time.Minute, MinKeySamples: 10,
		RetryAfter: 2 * time.Second}
	const tick = 3 * time.Second // 1.5 × RetryAfter
	n := openNode(t)
	exec := &failing{shard: 1}
	l, err := New(Config{Node: n, Executor: exec, Thresholds: th})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	write := func(shard, root routing.ShardID, keys []routing.Key, count int, tick int) {
		for j := range count {
			if _, err := n.Write(node.WriteRequest{Kind: storage.OpIndex, Shard: shard, Version: n.Table().Version(), Root: root,
				Key: keys[j%len(keys)], ID: fmt.Sprintf("s%d-%d-%d", shard, tick, j), Source: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
	}
	const ticks = 8
	for i := range ticks {
		write(1, 1, []routing.Key{9, 14}, 900, i) // 300/s
		write(2, 0, []routing.Key{1, 2}, 600, i)  // 200/s
		if _, err := l.Tick(t0.Add(time.Duration(i) * tick)); err != nil {
			t.Fatal(err)
		}
	}
	tries1, tries2 := 0, 0
	for _, s := range exec.splits {
		switch s {
		case 1:
			tries1++
		case 2:
			tries2++
		}
	}
	t.Logf("splits asked for, in order: %v", exec.splits)
	// Both are over the threshold from the second tick on: 7 decisions.
	if tries2 == 0 || tries1 == ticks-1 {
		t.Errorf("ticking every %v with RetryAfter %v: splits asked for, in order: %v (shard 1 %d times, failing each time; leaf 2 %d times); "+
			"want leaf 2 split while shard 1 is held back", tick, th.RetryAfter, exec.splits, tries1, tries2)
	}
}
