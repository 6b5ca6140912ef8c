package splitter

import (
	"fmt"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// The commit says a handoff waiting out the parent's write stall holds
// nothing ("Nothing is held while it waits"). But the wait runs inside
// Split.Next, under sp.mu, so every other reader of the split (Phase,
// Report, Done: a monitor, a REST handler calling them, a test harness)
// blocks for the whole wait, up to Config.StallWait (10 s by default),
// where it used to block at most DrainTimeout. Only Cancel is exempt
// (it raises cancelSignal before taking the mutex).
func TestReviewS14PhaseDuringTheStallWaitDoesNotBlock(t *testing.T) {
	n, tab, g := stallNode(t, "shard-0", storage.LayoutPerShard)
	sp := NewDriver(n, Config{DrainTimeout: drainInTests, StallWait: time.Minute}).Start(SplitPlan(0, 2))
	for !sp.Done() && sp.Phase() != PhaseHandoff {
		if _, _, err := sp.Next(); err != nil {
			t.Fatal(err)
		}
	}
	wait := stallWrites(t, n, tab, g, 0, 200)
	stallEnds := time.AfterFunc(3*time.Second, g.open)
	defer stallEnds.Stop()
	stepped := make(chan error, 1)
	go func() { // the driver, stepping to the end
		for !sp.Done() {
			if _, _, err := sp.Next(); err != nil {
				stepped <- err
				return
			}
		}
		stepped <- nil
	}()
	time.Sleep(300*time.Millisecond + drainInTests) // the drain timed out; the wait is on
	start := time.Now()
	_ = sp.Phase()
	_ = sp.Report()
	took := time.Since(start)
	if err := <-stepped; err != nil {
		t.Fatal(err)
	}
	rep := sp.Report()
	t.Logf("split ended %s after %d handoffs, %d stall waits (%v)", rep.Phase, rep.Handoffs, rep.StallWaits, rep.StallWaited)
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if rep.StallWaits == 0 {
		t.Fatal("the split never waited for the stall: the probe measured nothing")
	}
	if took > 500*time.Millisecond {
		t.Errorf("Phase()+Report() from another goroutine blocked %v while the handoff waited out the parent's write stall (StallWait bounds it, not DrainTimeout=%v)", took, drainInTests)
	}
}

// Probe (expected to pass): a merge whose higher source is in a write stall
// times out draining it after fencing the lower one. While it waits out the
// stall, the lower source takes writes (its fence was released before the
// wait); a cancel then ends the wait, the merge aborts, no source keeps a
// log hold, and every write is readable.
func TestReviewS14MergeCancelDuringAStallWait(t *testing.T) {
	n, _, g := stallNode(t, "none", storage.LayoutPerShard)
	d := NewDriver(n, Config{DrainTimeout: drainInTests, StallWait: time.Minute})
	split, err := d.Run(SplitPlan(0, 2))
	if err != nil || split.Phase != PhaseDone {
		t.Fatalf("split: %s, %v, %v", split.Phase, split.Err, err)
	}
	lo, hi := split.Targets[0], split.Targets[1]
	if lo > hi {
		lo, hi = hi, lo
	}
	g.gate(fmt.Sprintf("shard-%d", hi))
	mg := d.Start(MergePlan(split.Targets...))
	for !mg.Done() && mg.Phase() != PhaseHandoff {
		if _, _, err := mg.Next(); err != nil {
			t.Fatal(err)
		}
	}
	tab := n.Table()
	wait := stallWrites(t, n, tab, g, hi, 300)
	var loID string
	for i := 0; ; i++ {
		id := fmt.Sprintf("small%d", i)
		if _, s := tab.Route(id, ""); s == lo {
			loID = id
			break
		}
	}
	type res struct {
		took time.Duration
		err  error
	}
	wrote := make(chan res, 1)
	cancelled := make(chan error, 1)
	go func() {
		time.Sleep(300*time.Millisecond + 2*drainInTests) // both fences tried; the wait is on
		start := time.Now()
		_, err := node.NewRouter(n, tab, node.RouterConfig{}).Index(loID, "", []byte("v"))
		wrote <- res{time.Since(start), err}
		time.AfterFunc(time.Second, g.open)
		cancelled <- mg.Cancel()
	}()
	if in, _, err := mg.Next(); err != nil || in.Kind != IntentFence {
		t.Fatalf("step %s: %v; want the fence", in.Kind, err)
	}
	// The next step waits out source hi's stall, until the cancel.
	for !mg.Done() {
		if _, _, err := mg.Next(); err != nil {
			t.Fatal(err)
		}
	}
	w := <-wrote
	if err := <-cancelled; err != nil {
		t.Fatal(err)
	}
	rep := mg.Report()
	t.Logf("merge ended %s, %d handoffs, %d stall waits (%v); write to source %d took %v", rep.Phase, rep.Handoffs, rep.StallWaits, rep.StallWaited, lo, w.took)
	if w.err != nil || w.took > 300*time.Millisecond {
		t.Errorf("a write to source %d during the wait for source %d's stall: %v after %v", lo, hi, w.err, w.took)
	}
	if rep.Phase != PhaseAborted || rep.StallWaits != 1 || rep.StallWaited > 900*time.Millisecond {
		t.Errorf("ended %s after %d stall waits (%v); want aborted after one, ended by the cancel", rep.Phase, rep.StallWaits, rep.StallWaited)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []routing.ShardID{lo, hi} {
		if s, ok := n.ShardStore(id); !ok || s.LogHolds() != 0 || s.WriteStalled() {
			t.Errorf("source %d after the abort: present %v, log holds %d, stalled %v", id, ok, s.LogHolds(), s.WriteStalled())
		}
	}
	allReadable(t, n, 300)
	if _, ok, err := node.NewRouter(n, n.Table(), node.RouterConfig{}).Get(loID, ""); err != nil || !ok {
		t.Errorf("get %s: found %v, %v", loID, ok, err)
	}
}

// Probe (expected to pass): in the shared layout (one store for every
// shard, HoldCompactions a no-op) a handoff also waits out the store's
// write stall, and the split completes with every write readable.
func TestReviewS14SharedLayoutHandoffWaitsOutTheStall(t *testing.T) {
	n, tab, g := stallNode(t, "node", storage.LayoutShared)
	sp := NewDriver(n, Config{DrainTimeout: drainInTests}).Start(Plan{Sources: []routing.ShardID{0}, Ways: 2, MaxHandoffs: 2})
	for !sp.Done() && sp.Phase() != PhaseHandoff {
		if _, _, err := sp.Next(); err != nil {
			t.Fatal(err)
		}
	}
	wait := stallWrites(t, n, tab, g, 0, 200)
	stallEnds := time.AfterFunc(2*time.Second, g.open)
	defer stallEnds.Stop()
	for !sp.Done() {
		if _, _, err := sp.Next(); err != nil {
			t.Fatal(err)
		}
	}
	rep := sp.Report()
	t.Logf("split ended %s after %d handoffs, %d stall waits (%v)", rep.Phase, rep.Handoffs, rep.StallWaits, rep.StallWaited)
	if rep.Phase != PhaseDone || rep.StallWaits == 0 {
		t.Fatalf("the split ended %s after %d handoffs, %d stall waits: %v", rep.Phase, rep.Handoffs, rep.StallWaits, rep.Err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	allReadable(t, n, 200)
}

// Probe (expected to pass): a store closed in the middle of a write stall
// does not leave its stall counter above zero. The node's close waits for
// the stalled write (store.closeThen takes ops), the stall ends when the
// flush gate opens, and WriteStalled is false afterwards.
func TestReviewS14CloseMidStallLeavesNoStallCount(t *testing.T) {
	n, tab, g := stallNode(t, "shard-0", storage.LayoutPerShard)
	s, _ := n.ShardStore(0)
	wait := stallWrites(t, n, tab, g, 0, 200)
	closed := make(chan error, 1)
	start := time.Now()
	go func() { closed <- n.Close() }()
	time.AfterFunc(time.Second, g.open)
	err := <-closed
	t.Logf("close took %v: %v; writer: %v", time.Since(start), err, wait())
	if s.WriteStalled() {
		t.Errorf("the closed store still reports a write stall")
	}
}
