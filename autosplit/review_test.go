package autosplit

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/policy"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

// TestReviewAutosplitNewRefusesMissingParts: a Config without a node or an
// executor was accepted, and the loop then panicked with a nil pointer on
// its first Tick (or on its first action). New must say what is missing.
func TestReviewAutosplitNewRefusesMissingParts(t *testing.T) {
	n := openNode(t)
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no node", Config{Executor: &recorder{}, Thresholds: policy.DefaultThresholds()}, "node"},
		{"no executor", Config{Node: n, Thresholds: policy.DefaultThresholds()}, "executor"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := New(c.cfg)
			if err == nil {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("New accepted a config with %s; Tick panicked: %v", c.name, p)
					}
				}()
				_, terr := l.Tick(time.Now())
				t.Fatalf("New accepted a config with %s (Tick: %v)", c.name, terr)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not name the %s", err, c.want)
			}
		})
	}
}

// TestReviewAutosplitCommittedSplitThatErredStaysSticky: a split that
// passed its commit point is a split, even when the executor reports an
// error after it (here: a search holds the parent, so the retirement in
// cleanup times out until the driver gives up). The loop recorded load
// splits only when the executor returned no error, so the children of this
// one were not sticky and merged as soon as their merge window was
// covered, long before the merge delay.
func TestReviewAutosplitCommittedSplitThatErredStaysSticky(t *testing.T) {
	th := policy.Thresholds{SplitWritesPerSec: 1000, SplitSustain: time.Second, MaxShardBytes: 1 << 30,
		MergeWindow: time.Second, MergeLoadFraction: 0.5, MergeDelay: time.Minute, MinKeySamples: 10}
	n := openNode(t)
	drv := splitter.NewDriver(n, splitter.Config{RetireWait: time.Microsecond})
	l, err := New(Config{Node: n, Executor: SplitterExecutor{Driver: drv}, Thresholds: th})
	if err != nil {
		t.Fatal(err)
	}
	// A search that holds every shard (the parent too) until released.
	release, holding := make(chan struct{}), make(chan struct{})
	searched := make(chan error, 1)
	write := func(i, j int) {
		key := routing.Key(9 + 5*(j%2)) // partitions 9 and 14 of shard 1
		if _, err := n.Write(node.WriteRequest{Kind: storage.OpIndex, Shard: 1, Version: n.Table().Version(), Root: 1,
			Key: key, ID: fmt.Sprintf("d%d-%d", i, j), Source: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var split *Event
	for i := 0; i < 60 && split == nil; i++ {
		for j := range 1000 { // 2,000 writes/s on the test's clock
			write(i, j)
		}
		if i == 2 {
			go func() {
				var once sync.Once
				_, err := n.Search(func(routing.ShardID, storage.Doc) error {
					once.Do(func() { close(holding); <-release })
					return nil
				})
				searched <- err
			}()
			<-holding
		}
		ev, err := l.Tick(t0.Add(time.Duration(i) * 500 * time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if ev.Decision.Action.Kind == policy.Split {
			split = &ev
		}
	}
	close(release)
	if err := <-searched; err != nil {
		t.Fatal(err)
	}
	if split == nil || split.Split == nil {
		t.Fatal("the loop never split shard 1")
	}
	r := split.Split
	if split.Err == nil || !r.Phase.Published() {
		t.Fatalf("the split ended %s with error %v; the test needs one published and reported as an error", r.Phase, split.Err)
	}
	t.Logf("split of 1 into %v: %s, %v", r.SortedTargets(), r.Phase, split.Err)
	// The children cool down; for the merge delay (1 min) they must not merge.
	for i := 1; i <= 20; i++ {
		now := split.At.Add(time.Duration(i) * 500 * time.Millisecond)
		ev, err := l.Tick(now)
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.Decision.Action; a.Kind == policy.Merge && slices.ContainsFunc(a.Shards, func(id routing.ShardID) bool { return slices.Contains(r.Targets, id) }) {
			t.Fatalf("%v after the load split of %v: %v, inside the merge delay %v", now.Sub(split.At), r.SortedTargets(), a, th.MergeDelay)
		}
	}
}
