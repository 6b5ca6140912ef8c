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

// Teardown and reclaim: every seed ends with teardown (after a finding
// too), and every crash reclaims the old process's engine. Neither may
// close a store under a call of the process that still runs (a
// use-after-free in Pebble, which takes the whole test binary), wait on a
// dead process's stores, or leave the dead engine open.

// aliveWorld is an alive world (per-shard layout) with some documents.
func aliveWorld(t *testing.T, seed uint64) *world {
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

// Teardown waits up to hangTimeout for each held reader and for the node's
// close, but not on a dead process: a reader released on one blocks in its
// snapshot's close on the dead store's mutex (see finishReader), and so
// does the node's close. A seed whose finding comes while its process is
// dead would spend 20 s per reader and 20 s for the close before it
// reports, and leak the dead engine that crash reclaims. Both ways: the
// death known (the step's finding comes before afterStep's crash), or
// still pending on w.fatal (a background flush died after the step's last
// call).
func TestTeardownOfADeadProcessDoesNotWait(t *testing.T) {
	for _, known := range []bool{true, false} {
		w := dyingWorld(t, known) // a reader parked on it when the death is known
		if known {
			w.fatalMsg = <-w.fatal
		}
		start := time.Now()
		w.teardown()
		if took := time.Since(start); took > hangTimeout/4 {
			t.Errorf("teardown of a dead process (death known: %v) took %v: it waited on the dead store", known, took)
		}
	}
}

// Teardown of a process still alive must neither close its node under a
// call of the process that still runs (the one that hung: every hang
// finding ends so, with runSeed's deferred teardown) nor wait for it (the
// hang cost hangTimeout already); the engine is closed once the call
// returns.
func TestTeardownOfALiveProcessWaitsForItsCalls(t *testing.T) {
	w := aliveWorld(t, 7)
	id, old := firstShard(t, w)
	release := make(chan struct{})
	w.spawn(func() { <-release }) // the call that hung
	_ = catch(func() { w.hang("the step did not return") })
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
func TestTeardownUnderAScanInPebble(t *testing.T) {
	w := aliveWorld(t, 7)
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
	_ = catch(func() { w.hang("the scan did not return") })
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

// shardClosed, the probe the reclaim tests poll, reads the store through
// Scan, which checks the closed flag and then takes a snapshot outside the
// store's gate: beside the reclaim's close, a probe that passes the flag
// just before DestroyShard sets it would take a snapshot of a closed DB
// (Pebble panics, "pebble: closed", killing the test binary) or iterate
// one being closed. Spinning probes make the window visible; the probe
// must not panic however often it runs.
func TestShardClosedProbeBesideTheReclaimDoesNotPanic(t *testing.T) {
	var panics, probes atomic.Int64
	var first atomic.Value
	for i := range 30 {
		func() {
			w := aliveWorld(t, uint64(100+i))
			defer w.teardown()
			var shards []*storage.Shard
			for _, id := range w.n.Table().ActiveShards() {
				if s, ok := w.n.Engine().Shard(id); ok {
					shards = append(shards, s)
				}
			}
			release := make(chan struct{})
			w.spawn(func() { <-release })
			w.fatalMsg = "a Fatalf on another goroutine"
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

// A dead split that fenced its parent (the fence is the parent's apply
// lock, held from one step to a later one) must not pin the dead engine:
// a DestroyShard of the parent would take that lock before closing
// anything and wait for ever, so Engine.Close would never run and the
// children would stay open with the engine's caches. reclaim destroys no
// shard the dead operation holds fenced; the engine's Close closes it.
func TestReclaimOfAFencedSplitClosesTheEngine(t *testing.T) {
	w := aliveWorld(t, 11)
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
	w.fatalMsg = "a Fatalf while the parent is fenced"
	w.crashDead() // no call of the process runs: reclaim starts at once
	if open := awaitClosed(shards); open > 0 {
		t.Fatalf("%d of the dead engine's %d shards (shards %v, the split of %d) still open %v after the crash: a DestroyShard waits on the dead split's fence", open, len(shards), ids, parent, hangTimeout)
	}
}

// dyingFence is the hook of a driver whose split's fence step, once armed,
// lets the process die on another goroutine (a background flush or
// compaction calling Fatalf) while the step runs: the step goes on and
// takes the fence after the simulator has noticed the death.
type dyingFence struct {
	armed   bool
	fatal   chan string
	release chan struct{}
}

func (d *dyingFence) hook(_ splitter.Phase, next splitter.Intent) {
	if !d.armed || next.Kind != splitter.IntentFence {
		return
	}
	d.armed = false
	d.fatal <- "a Fatalf on a background goroutine during the fence step"
	<-d.release
}

// The same when the process dies during the step that takes the fence (or
// any step while fenced: the handoff window admits no client operation, so
// a death there is mostly found by a split step): stepSplit clears w.sp,
// and the crash must still tell reclaim of the operation that died fenced
// (dyingOp), or reclaim destroys the fenced parent and waits for ever on
// its apply lock.
func TestDeathDuringTheFenceStepClosesTheEngine(t *testing.T) {
	w := aliveWorld(t, 11)
	defer w.teardown()
	parent := w.n.Table().ActiveShards()[0]
	plan := splitter.SplitPlan(parent, 2)
	d := &dyingFence{fatal: w.fatal, release: make(chan struct{})}
	drv := splitter.NewDriver(w.n, splitter.Config{Clock: w.clk, Journal: w.j, Hook: d.hook})
	var sp *splitter.Operation
	if !w.do(func() { sp = drv.Start(plan) }) {
		t.Fatal("died starting the split")
	}
	for sp.Machine().Ready().Intent.Kind != splitter.IntentFence {
		var err error
		if !w.do(func() { _, _, err = sp.Next() }) || err != nil || sp.Done() {
			t.Fatalf("the split did not reach its fence intent (%v)", err)
		}
	}
	ids, shards := splitShards(t, w, parent)
	w.sp = newSimSplit(sp, plan)
	d.armed = true
	w.stepSplit("step") // the death is noticed while the step runs
	if w.fatalMsg == "" {
		t.Fatal("the death was not noticed during the step")
	}
	close(d.release)
	// The step takes the fence once released; Fenced waits for a step
	// that holds the operation.
	for deadline := time.Now().Add(hangTimeout); !sp.Fenced(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the step did not take the fence")
		}
	}
	w.crashDead()
	if open := awaitClosed(shards); open > 0 {
		t.Fatalf("%d of the dead engine's %d shards (%v, the split of %d) still open %v after the crash: reclaim was not told of the split that died fenced", open, len(shards), ids, parent, hangTimeout)
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
