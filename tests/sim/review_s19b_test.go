package sim

import (
	"testing"

	"github.com/shardsplit/shardsplit/splitter"
)

// Review of 8771da1 (reclaim does not destroy a shard the dead split or
// merge holds fenced).

// dyingStep is a split whose next step takes the fence and, while it
// runs, the process dies on another goroutine (a background flush or
// compaction calling Fatalf): the step goes on and returns after the
// simulator has noticed the death.
type dyingStep struct {
	simOp
	fatal   chan string
	release chan struct{}
	done    chan struct{}
}

func (d dyingStep) Next() (splitter.Intent, splitter.Event, error) {
	defer close(d.done)
	in, ev, err := d.simOp.Next()
	d.fatal <- "review-s19b: a Fatalf on a background goroutine during the fence step"
	<-d.release
	return in, ev, err
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
	plan := splitter.Plan{Parent: parent, Ways: 2}
	var sp *splitter.Split
	if !w.do(func() { sp = w.drv.Start(plan) }) {
		t.Fatal("died starting the split")
	}
	for sp.Machine().Ready().Intent.Kind != splitter.IntentFence {
		var err error
		if !w.do(func() { _, _, err = sp.Next() }) || err != nil || sp.Done() {
			t.Fatalf("the split did not reach its fence intent (%v)", err)
		}
	}
	ids, shards := splitShards(t, w, parent)
	d := dyingStep{fatal: w.fatal, release: make(chan struct{}), done: make(chan struct{})}
	w.sp = newSimSplit(sp, plan)
	d.simOp = w.sp.sp
	w.sp.sp = d
	w.stepSplit("step") // the death is noticed while the step runs
	if w.fatalMsg == "" {
		t.Fatal("the death was not noticed during the step")
	}
	close(d.release)
	<-d.done
	if !sp.Machine().Fenced() {
		t.Fatal("the step did not take the fence")
	}
	w.crashDead()
	if open := awaitClosed(shards); open > 0 {
		t.Fatalf("%d of the dead engine's %d shards (%v, the split of %d) still open %v after the crash: reclaim was not told of the split that died fenced", open, len(shards), ids, parent, hangTimeout)
	}
}
