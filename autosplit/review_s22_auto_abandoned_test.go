package autosplit

import (
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/policy"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

// TestReviewS22AutoAbandonedMergeDoesNotStopTheLoop: a merge the loop ran
// failed (its target could not be made: the disk was full) and its undo
// kept failing longer than the driver's RetryFor, so RunMerge returned,
// leaving the merge aborting and reserved in the table "for a later Next
// or the next open's recovery". Nothing in the loop ever takes that later
// Next, and the policy proposes nothing while a merge is in progress: once
// the disk had room again, the loop never acted on the index again,
// though shard 1 stayed far over the split threshold.
func TestReviewS22AutoAbandonedMergeDoesNotStopTheLoop(t *testing.T) {
	var full atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && (strings.Contains(op.Path, "TABLE") || strings.Contains(op.Path, "shard-4")) {
			return fmt.Errorf("injected: %w", syscall.ENOSPC)
		}
		return nil
	})
	tab, err := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 2, RoutingShards: 16, PartitionSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []routing.Edit{{Kind: routing.BeginSplit, Shard: 0, Ways: 2}, {Kind: routing.CommitSplit, Shard: 0, Children: []routing.ShardID{2, 3}}} {
		if tab, err = routing.Apply(tab, e); err != nil {
			t.Fatal(err)
		}
	}
	eng, err := storage.Open(storage.Options{Dir: "/data", FS: errorfs.Wrap(vfs.NewMem(), inj), Durability: storage.DurabilityAsync, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(node.Config{Engine: eng, Table: tab})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })

	var filled atomic.Bool
	hook := func(_ splitter.Phase, in splitter.Intent) {
		if in.Kind == splitter.IntentBuildTargets && filled.CompareAndSwap(false, true) {
			full.Store(true) // the disk fills as the merge (the first operation) builds its target
		}
	}
	drv := splitter.NewDriver(n, splitter.Config{Hook: hook, RetryFor: 100 * time.Millisecond})
	th := policy.Thresholds{SplitWritesPerSec: 100, SplitSustain: time.Second, MaxShardBytes: 1 << 30,
		MergeWindow: time.Second, MergeLoadFraction: 0.5, MergeDelay: time.Second, MinKeySamples: 10, RetryAfter: time.Second}
	l, err := New(Config{Node: n, Executor: SplitterExecutor{Driver: drv}, Thresholds: th})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var merged *Event
	i := 0
	for ; i < 10 && merged == nil; i++ { // idle leaves 2 and 3: a merge
		ev, err := l.Tick(t0.Add(time.Duration(i) * 500 * time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Decision.Action.Kind == policy.Merge {
			merged = &ev
		}
	}
	if merged == nil || merged.Err == nil || len(n.Table().MergesInProgress()) == 0 {
		t.Fatalf("the test needs a merge that failed and stayed reserved: %+v, merges in progress %v", merged, n.Table().MergesInProgress())
	}
	t.Logf("merge of %v: %v", merged.Decision.Action.Shards, merged.Err)
	full.Store(false) // room again

	// Shard 1 takes 300 writes/s (three times the threshold) from now on.
	var actions []string
	for j := range 20 {
		for k := range 150 {
			if _, err := n.Write(node.WriteRequest{Kind: storage.OpIndex, Shard: 1, Version: n.Table().Version(), Root: 1,
				Key: routing.Key(9 + 5*(k%2)), ID: fmt.Sprintf("d%d-%d", j, k), Source: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
		ev, err := l.Tick(t0.Add(time.Duration(i+j) * 500 * time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Resumed != nil {
			t.Logf("tick %d resumed the merge: %s, %v", j, ev.Resumed.Phase, ev.Err)
		}
		if a := ev.Decision.Action; a.Kind != policy.None {
			actions = append(actions, fmt.Sprintf("%v (err %v)", a, ev.Err))
		}
		if ev.Decision.Action.Kind == policy.Split && ev.Err == nil {
			t.Logf("tick %d: %v", j, ev.Decision.Action)
			return
		}
	}
	t.Errorf("10 s after the disk had room again, with shard 1 at 3× the split threshold: actions %v; the table still has merges %v in progress, which nothing will finish",
		actions, n.Table().MergesInProgress())
}
