package sim

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/storage"
)

// Review of 5380313 and 1852061 (reclaim waits for the dead process's
// calls, counted by spawn).

// reviewWorld is an alive world (per-shard layout) with some documents.
func reviewWorld(t *testing.T, seed uint64) *world {
	t.Helper()
	w := &world{seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5eed)), model: newSharedModel(),
		clk: clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	w.sw = drawSwarm(w.rng)
	w.sw.layout = storage.LayoutPerShard
	w.sw.pOpenFault = 0
	w.setup()
	for range 40 {
		w.clientOp()
	}
	return w
}

// Finding 2: TestReclaimWaitsForTheDeadProcessCalls's probe (shardClosed)
// polled old.Scan until it answered ErrShardClosed: Scan reads the store
// outside its gate, so beside the reclaim's close it checks the closed
// flag, then takes a snapshot and iterates with nothing holding the close
// off. A probe that passes the flag just before DestroyShard sets it takes
// its snapshot of a closed DB (Pebble panics, "pebble: closed": in the
// test's goroutine, that kills the test binary) or iterates one being
// closed. Spinning probes make the window visible; the probe must not
// panic however often it runs.
func TestReviewS19ScanProbeRacesTheReclaim(t *testing.T) {
	var panics, probes atomic.Int64
	var first atomic.Value
	for i := range 30 {
		func() {
			w := reviewWorld(t, uint64(100+i))
			defer w.teardown()
			var shards []*storage.Shard
			for _, id := range w.n.Table().ActiveShards() {
				if s, ok := w.n.Engine().Shard(id); ok {
					shards = append(shards, s)
				}
			}
			release := make(chan struct{})
			w.spawn(func() { <-release })
			w.fatalMsg = "review-s19: a Fatalf on another goroutine"
			w.crashDead()
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for _, s := range shards {
				for range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							select {
							case <-stop:
								return
							default:
							}
							probes.Add(1)
							func() {
								defer func() {
									if r := recover(); r != nil {
										panics.Add(1)
										first.CompareAndSwap(nil, fmt.Sprint(r))
									}
								}()
								_ = shardClosed(s)
							}()
						}
					}()
				}
			}
			close(release)
			deadline := time.Now().Add(5 * time.Second)
			for _, s := range shards {
				for !shardClosed(s) && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
			}
			time.Sleep(5 * time.Millisecond)
			close(stop)
			wg.Wait()
		}()
	}
	t.Logf("%d probes, %d panicked", probes.Load(), panics.Load())
	if panics.Load() > 0 {
		t.Fatalf("a Scan probe beside the reclaim's close panicked %d times (first: %v): the probe reads the store outside its gate", panics.Load(), first.Load())
	}
}
