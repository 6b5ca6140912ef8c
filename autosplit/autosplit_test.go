package autosplit

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/policy"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

// recorder is an Executor that records what it was asked. It answers a
// split as done without changing anything (so the loop asks again on the
// next tick) and carries merges out with SplitterExecutor.
type recorder struct {
	merger SplitterExecutor
	splits []splitter.Plan
	merges [][]routing.ShardID
}

func (r *recorder) Split(p splitter.Plan) (splitter.Report, error) {
	r.splits = append(r.splits, p)
	return splitter.Report{Phase: splitter.PhaseDone}, nil
}

func (r *recorder) Merge(shards []routing.ShardID) (splitter.Report, error) {
	r.merges = append(r.merges, shards)
	return r.merger.Merge(shards)
}

// openNode serves a 2-shard partition-mode index (R = 16) whose root 0 is
// split into leaves 2 = [0, 4) and 3 = [4, 8).
func openNode(t *testing.T) *node.Node {
	t.Helper()
	tab, err := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 2, RoutingShards: 16, PartitionSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []routing.Edit{{Kind: routing.BeginSplit, Shard: 0, Ways: 2}, {Kind: routing.CommitSplit, Shard: 0, Children: []routing.ShardID{2, 3}}} {
		if tab, err = routing.Apply(tab, e); err != nil {
			t.Fatal(err)
		}
	}
	eng, err := storage.Open(storage.Options{Dir: "/data", FS: vfs.NewMem(), Durability: storage.DurabilityAsync, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(node.Config{Engine: eng, Table: tab})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// TestLoopCarriesOutTheDecision: writes to shard 1 at 2,000/s (on the
// test's clock) make the loop split it at the point that halves them; cool
// leaves 2 and 3 make it merge them (through the splitter's driver) into
// one leaf that owns root 0's keyspace.
func TestLoopCarriesOutTheDecision(t *testing.T) {
	th := policy.Thresholds{SplitWritesPerSec: 1000, SplitSustain: time.Second, MaxShardBytes: 1 << 30,
		MergeWindow: time.Second, MergeLoadFraction: 0.5, MergeDelay: time.Second, MinKeySamples: 10}
	cases := []struct {
		name       string
		hot        bool
		wantSplits []splitter.Plan
		wantMerges [][]routing.ShardID
	}{
		{name: "hot shard 1 is split between its two hot partitions", hot: true,
			wantSplits: []splitter.Plan{{Sources: []routing.ShardID{1}, Points: []routing.Key{12}}}},
		{name: "cool leaves 2 and 3 are merged", hot: false,
			wantMerges: [][]routing.ShardID{{2, 3}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := openNode(t)
			exec := &recorder{merger: SplitterExecutor{Driver: splitter.NewDriver(n, splitter.Config{})}}
			l, err := New(Config{Node: n, Executor: exec, Thresholds: th})
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
			var merged []*splitter.Report
			for i := range 6 { // ticks every 500 ms; 1,000 writes between ticks = 2,000/s
				if c.hot {
					for j := range 1000 {
						key := routing.Key(9) // half on partition 9, half on 14
						if j%2 == 1 {
							key = 14
						}
						if _, err := n.Write(node.WriteRequest{Kind: storage.OpIndex, Shard: 1, Version: n.Table().Version(), Root: 1,
							Key: key, ID: fmt.Sprintf("d%d-%d", i, j), Source: []byte("x")}); err != nil {
							t.Fatal(err)
						}
					}
				}
				ev, err := l.Tick(t0.Add(time.Duration(i) * 500 * time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				if ev.Decision.Action.Kind == policy.Merge {
					if ev.Err != nil {
						t.Fatalf("merge of %v: %v", ev.Decision.Action.Shards, ev.Err)
					}
					merged = append(merged, ev.Merge)
				}
			}
			if diff := cmp.Diff(c.wantSplits, exec.splits[:min(1, len(exec.splits))]); diff != "" {
				t.Errorf("splits (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.wantMerges, exec.merges[:min(1, len(exec.merges))]); diff != "" {
				t.Errorf("merges (-want +got):\n%s", diff)
			}
			if c.wantMerges == nil {
				return
			}
			if len(merged) != 1 || merged[0].Phase != splitter.PhaseDone {
				t.Fatalf("merges carried out: %+v, want one done", merged)
			}
			// Root 0 is one leaf again: the merge's target, owning [0, 8).
			want := []routing.Leaf{{Shard: merged[0].Targets[0], Span: routing.Span{Start: 0, End: 8}}}
			if diff := cmp.Diff(want, n.Table().Leaves(0)); diff != "" {
				t.Errorf("leaves of root 0 after the merge (-want +got):\n%s", diff)
			}
			if ms := n.Table().MergesInProgress(); len(ms) != 0 {
				t.Errorf("merges in progress after the merge: %v", ms)
			}
		})
	}
}

// failing is an Executor whose splits of one shard always fail; it records
// every split it is asked for and answers the others as recorder does.
type failing struct {
	shard  routing.ShardID
	splits []routing.ShardID
}

func (f *failing) Split(p splitter.Plan) (splitter.Report, error) {
	f.splits = append(f.splits, p.Parent())
	if p.Parent() == f.shard {
		return splitter.Report{Phase: splitter.PhaseFailed}, fmt.Errorf("split of shard %d: injected failure", p.Parent())
	}
	return splitter.Report{Phase: splitter.PhaseDone}, nil
}

func (f *failing) Merge([]routing.ShardID) (splitter.Report, error) {
	return splitter.Report{}, fmt.Errorf("no merge expected")
}

// TestAFailingSplitDoesNotStarveTheNextHottest: shard 1 (3,000 writes/s)
// is hotter than leaf 2 (2,000 writes/s) and every split of it fails.
// Without a retry delay the loop asked for shard 1 at every tick and leaf 2
// was never split (the adversarial review of 2026-12-03 found 22 calls in
// 24 ticks). With RetryAfter the loop splits leaf 2 while shard 1 is held
// back, and tries shard 1 again once RetryAfter has passed.
func TestAFailingSplitDoesNotStarveTheNextHottest(t *testing.T) {
	th := policy.Thresholds{SplitWritesPerSec: 1000, SplitSustain: time.Second, MaxShardBytes: 1 << 30,
		MergeWindow: time.Minute, MergeLoadFraction: 0.5, MergeDelay: time.Minute, MinKeySamples: 10,
		RetryAfter: 2 * time.Second}
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
	var failedAt []int
	for i := range 14 { // ticks every 500 ms
		write(1, 1, []routing.Key{9, 14}, 1500, i) // 3,000/s
		write(2, 0, []routing.Key{1, 2}, 1000, i)  // 2,000/s
		ev, err := l.Tick(t0.Add(time.Duration(i) * 500 * time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Err != nil {
			failedAt = append(failedAt, i)
		}
	}
	var first2, retries1 = -1, 0
	for i, s := range exec.splits {
		switch {
		case s == 2 && first2 < 0:
			first2 = i
		case s == 1:
			retries1++
		}
	}
	if first2 < 0 || first2 > 1 {
		t.Errorf("splits asked for, in order: %v; want leaf 2 right after shard 1's first failure", exec.splits)
	}
	// Sustained from tick 2 (1 s of history): 12 ticks, 6 s; shard 1 is
	// tried at the first and then once per RetryAfter (4 ticks) plus the
	// tick the failure is recorded on.
	if retries1 < 2 || retries1 > 4 {
		t.Errorf("shard 1 tried %d times in 6 s with RetryAfter %v (failures at ticks %v); want 2 to 4", retries1, th.RetryAfter, failedAt)
	}
}
