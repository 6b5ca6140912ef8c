package autosplit

import (
	"errors"
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

// recorder is an Executor that records what it was asked, changes nothing
// (so the loop asks again on the next tick) and merges nothing, like
// SplitterExecutor.
type recorder struct {
	splits []splitter.Plan
	merges [][]routing.ShardID
}

func (r *recorder) Split(p splitter.Plan) (splitter.Report, error) {
	r.splits = append(r.splits, p)
	return splitter.Report{Phase: splitter.PhaseDone}, nil
}

func (r *recorder) Merge(shards []routing.ShardID) error {
	r.merges = append(r.merges, shards)
	return SplitterExecutor{}.Merge(shards)
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
// leaves 2 and 3 make it propose their merge, which the executor refuses
// with ErrMergeNotSupported.
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
			wantSplits: []splitter.Plan{{Parent: 1, Points: []routing.Key{12}}}},
		{name: "cool leaves 2 and 3 are proposed for a merge", hot: false,
			wantMerges: [][]routing.ShardID{{2, 3}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := openNode(t)
			exec := &recorder{}
			l, err := New(Config{Node: n, Executor: exec, Thresholds: th})
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
			var last Event
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
				if last, err = l.Tick(t0.Add(time.Duration(i) * 500 * time.Millisecond)); err != nil {
					t.Fatal(err)
				}
			}
			if diff := cmp.Diff(c.wantSplits, exec.splits[:min(1, len(exec.splits))]); diff != "" {
				t.Errorf("splits (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.wantMerges, exec.merges[:min(1, len(exec.merges))]); diff != "" {
				t.Errorf("merges (-want +got):\n%s", diff)
			}
			if c.wantMerges != nil && !errors.Is(last.Err, ErrMergeNotSupported) {
				t.Errorf("last tick's error %v, want ErrMergeNotSupported", last.Err)
			}
		})
	}
}
