package sim

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

// Review of 5380313 and 1852061 (reclaim waits for the dead process's
// calls, counted by spawn).

// reviewWorld is an alive world (per-shard layout) with some documents
// (TestReclaimWaitsForTheDeadProcessCalls uses it too).
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

// Finding 1: teardown of a process still alive closes its node at once,
// beside the process's calls that still run. That is every seed whose
// finding is a hang (await's "step did not return", "held reader did not
// start", "released reader did not finish", refuseLock's): runSeed's
// deferred teardown then runs Node.Close under the call that hung, the
// use-after-free of 5380313, now on the finding path, where a SIGSEGV takes
// the whole test binary (every other seed's result) with it.
//
// Made directly: a call of the live process still running (the one that
// hung) when w.hang raises the finding and teardown runs. teardown must
// neither close the store under it nor wait for it (the hang already cost
// hangTimeout); the engine is closed once the call returns.
func TestReviewS19TeardownOfALiveProcessWaitsForItsCalls(t *testing.T) {
	w := reviewWorld(t, 7)
	id, old := firstShard(t, w)
	release := make(chan struct{})
	w.spawn(func() { <-release }) // the call that hung
	_ = catch(func() { w.hang("review-s19: the step did not return") })
	start := time.Now()
	w.teardown() // runSeed's deferred teardown after the hang finding
	took := time.Since(start)
	closedUnder := shardClosed(old)
	close(release)
	if closedUnder {
		t.Fatalf("teardown closed shard %d of a live process while one of its calls still ran", id)
	}
	if took > hangTimeout/4 {
		t.Errorf("teardown took %v: it waited for the call that hung", took)
	}
	for deadline := time.Now().Add(hangTimeout); !shardClosed(old); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("shard %d not closed %v after the hung call returned", id, hangTimeout)
		}
	}
}

// The same, with the call inside Pebble: a scan holding a snapshot and an
// iterator of the store when teardown closes it, then going on.
func TestReviewS19TeardownUnderAScanInPebble(t *testing.T) {
	w := reviewWorld(t, 7)
	id, old := firstShard(t, w)
	in, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var panicked any
	var once sync.Once
	w.spawn(func() {
		defer close(done)
		defer func() { panicked = recover() }()
		_ = old.Scan(func(storage.Doc) error {
			once.Do(func() { close(in); <-release })
			return nil
		})
	})
	select {
	case <-in:
	case <-done:
		t.Skip("no document to hold the scan on")
	}
	_ = catch(func() { w.hang("review-s19: the scan did not return") })
	w.teardown()
	closedUnder := shardClosed(old)
	close(release)
	<-done
	if panicked != nil {
		t.Errorf("the scan panicked after teardown closed its store under it: %v", panicked)
	}
	if closedUnder {
		t.Errorf("teardown closed shard %d while a scan of it was inside Pebble", id)
	}
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
		t.Fatalf("the shardClosed probe beside the reclaim's close panicked %d times (first: %v): it reads the store outside its gate", panics.Load(), first.Load())
	}
}

// Finding 3 (a leak; fixed in reclaim): a dead split that fenced its
// parent (the fence is the parent's apply lock, held from one step to a
// later one) pinned the whole dead engine: reclaim's DestroyShard(parent)
// took that lock before it closed anything and waited for ever, so
// Engine.Close never ran and the children stayed open, with the engine's
// caches. (The parent's own store closed all the same: reclaim's ids name
// it twice, and the second DestroyShard found it gone from the engine's
// shards and skipped the lock.) reclaim no longer destroys a shard the
// dead operation holds fenced; the engine's Close closes it.
func TestReviewS19ReclaimOfAFencedSplitClosesTheEngine(t *testing.T) {
	w := reviewWorld(t, 11)
	defer w.teardown()
	parent := w.n.Table().ActiveShards()[0]
	var sp *splitter.Operation
	if !w.do(func() { sp = w.drv.Start(splitter.SplitPlan(parent, 2)) }) {
		t.Fatal("died starting the split")
	}
	w.sp = newSimSplit(sp, splitter.SplitPlan(parent, 2))
	for !sp.Machine().Fenced() {
		var err error
		if !w.do(func() { _, _, err = sp.Next() }) || err != nil || sp.Done() {
			t.Fatalf("the split did not reach its fence (%v)", err)
		}
	}
	ids, shards := splitShards(t, w, parent)
	w.fatalMsg = "review-s19: a Fatalf while the parent is fenced"
	w.crashDead() // no call of the process runs: reclaim starts at once
	if open := awaitClosed(shards); open > 0 {
		t.Fatalf("%d of the dead engine's %d shards (shards %v, the split of %d) still open %v after the crash: a DestroyShard waits on the dead split's fence", open, len(shards), ids, parent, hangTimeout)
	}
}

// firstShard returns the first active shard of w's node and its id.
func firstShard(t *testing.T, w *world) (routing.ShardID, *storage.Shard) {
	t.Helper()
	id := w.n.Table().ActiveShards()[0]
	s, ok := w.n.Engine().Shard(id)
	if !ok {
		t.Fatalf("no shard %d in the engine", id)
	}
	return id, s
}

// splitShards returns the ids and shards of the engine's active shards and
// of the children of parent's split (three or more, or the test fails).
func splitShards(t *testing.T, w *world, parent routing.ShardID) ([]routing.ShardID, []*storage.Shard) {
	t.Helper()
	var shards []*storage.Shard
	rec, _ := w.n.Table().Split(parent)
	ids := append(w.n.Table().ActiveShards(), rec.Children[0].Shard, rec.Children[1].Shard)
	for _, id := range ids {
		if s, ok := w.n.Engine().Shard(id); ok {
			shards = append(shards, s)
		}
	}
	if len(shards) < 3 {
		t.Fatalf("found %d of the parent's and children's shards in the engine, want 3 or more", len(shards))
	}
	return ids, shards
}

// awaitClosed waits up to hangTimeout for every shard to close and returns
// how many are still open.
func awaitClosed(shards []*storage.Shard) int {
	for deadline := time.Now().Add(hangTimeout); ; time.Sleep(10 * time.Millisecond) {
		open := 0
		for _, s := range shards {
			if !shardClosed(s) {
				open++
			}
		}
		if open == 0 || time.Now().After(deadline) {
			return open
		}
	}
}
