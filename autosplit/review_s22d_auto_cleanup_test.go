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

// TestReviewS22dAutoAbandonedCleanupDoesNotStopTheLoop: a split the loop
// ran committed, and its cleanup (retiring the parent's store) kept failing
// longer than the driver's RetryFor, so Run returned with the split
// unfinished in the journal. Nothing is reserved in the table any more, so
// the loop does not Resume it ("holds nothing back"), but with a journal
// the driver refuses every later split or merge while one is unfinished
// (checkBegin): once the disk worked again the loop never acted on the
// index again, however hot a leaf, until a restart.
func TestReviewS22dAutoAbandonedCleanupDoesNotStopTheLoop(t *testing.T) {
	var broken, broke atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if broken.Load() && (op.Kind == errorfs.OpRemoveAll || op.Kind == errorfs.OpRemove) && strings.Contains(op.Path, "shard-1") {
			return fmt.Errorf("injected: %w", syscall.EBUSY)
		}
		return nil
	})
	tab, err := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 2, RoutingShards: 16, PartitionSize: 1})
	if err != nil {
		t.Fatal(err)
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
	j, err := splitter.OpenJournal(eng)
	if err != nil {
		t.Fatal(err)
	}
	hook := func(_ splitter.Phase, in splitter.Intent) {
		if in.Kind == splitter.IntentCleanup && broke.CompareAndSwap(false, true) {
			broken.Store(true) // the parent's store cannot be retired, for a while
		}
	}
	drv := splitter.NewDriver(n, splitter.Config{Hook: hook, Journal: j, RetryFor: 100 * time.Millisecond})
	th := policy.Thresholds{SplitWritesPerSec: 100, SplitSustain: time.Second, MaxShardBytes: 1 << 30,
		MergeWindow: time.Hour, MergeLoadFraction: 0.5, MergeDelay: time.Hour, MinKeySamples: 10, RetryAfter: time.Second}
	l, err := New(Config{Node: n, Executor: SplitterExecutor{Driver: drv}, Thresholds: th})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	hot := func(shard routing.ShardID, root routing.ShardID, keys []routing.Key, tag string) {
		for k := range 150 {
			if _, err := n.Write(node.WriteRequest{Kind: storage.OpIndex, Shard: shard, Version: n.Table().Version(), Root: root,
				Key: keys[k%len(keys)], ID: fmt.Sprintf("%s-%d", tag, k), Source: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var first *Event
	i := 0
	for ; i < 20 && first == nil; i++ { // shard 1 hot: a split, whose cleanup fails
		hot(1, 1, []routing.Key{9, 14}, fmt.Sprintf("a%d", i))
		ev, err := l.Tick(t0.Add(time.Duration(i) * 500 * time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Decision.Action.Kind == policy.Split {
			first = &ev
		}
	}
	if first == nil || first.Err == nil {
		t.Fatalf("the test needs a split whose cleanup failed: %+v", first)
	}
	t.Logf("split of %d: %v (in progress %v)", first.Decision.Action.Shard, first.Err, n.Table().InProgress())
	broken.Store(false) // the disk works again

	// Shard 0 takes 300 writes/s (three times the threshold) from now on.
	var actions []string
	for k := range 20 {
		hot(0, 0, []routing.Key{1, 6}, fmt.Sprintf("b%d", k))
		ev, err := l.Tick(t0.Add(time.Duration(i+k) * 500 * time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Resumed != nil {
			t.Logf("tick %d resumed the split: %s, %v", k, ev.Resumed.Phase, ev.Err)
		}
		if a := ev.Decision.Action; a.Kind != policy.None {
			actions = append(actions, fmt.Sprintf("%v (err %v)", a, ev.Err))
		}
		if a := ev.Decision.Action; a.Kind == policy.Split && a.Shard == 0 && ev.Err == nil {
			t.Logf("tick %d: %v", k, a)
			return
		}
	}
	t.Errorf("10 s after the disk worked again, with shard 0 at 3× the split threshold: actions %v", actions)
}
