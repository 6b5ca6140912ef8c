package sim

import (
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/splitter"
)

// Review of 8771da1 (reclaim does not destroy a shard the dead split or
// merge holds fenced).

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
	d.fatal <- "review-s19b: a Fatalf on a background goroutine during the fence step"
	<-d.release
}

// Finding 1: the process dies during the step that takes the fence (or
// any step while fenced: the handoff window admits no client operation,
// so a death there is mostly found by a split step). stepSplit then clears
// w.sp before the crash captures it, so reclaim gets op == nil, destroys
// the fenced parent, and waits for ever on its apply lock: Engine.Close
// never runs and the children stay open, the leak 8771da1 fixed, on the
// path where it is likeliest.
func TestReviewS19bDeathDuringTheFenceStepClosesTheEngine(t *testing.T) {
	w := reviewWorld(t, 11)
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
