package splitter

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// flushGateFS blocks the writes of the memtable flushes of the stores
// under dir while its gate is shut: the parent's memtables fill and Pebble
// stops its writes (MemTableStopWritesThreshold), as it does on a disk
// that cannot keep up.
type flushGateFS struct {
	vfs.FS
	dir  string
	mu   sync.Mutex
	shut chan struct{} // nil: open
}

func (g *flushGateFS) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut == nil {
		g.shut = make(chan struct{})
	}
}

func (g *flushGateFS) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut != nil {
		close(g.shut)
		g.shut = nil
	}
}

func (g *flushGateFS) wait() {
	g.mu.Lock()
	shut := g.shut
	g.mu.Unlock()
	if shut != nil {
		<-shut
	}
}

// gate makes the gate stop the flushes of the store in /data/dir.
func (g *flushGateFS) gate(dir string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.dir = "/data/" + dir + "/"
}

func (g *flushGateFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := g.FS.Create(name, category)
	g.mu.Lock()
	dir := g.dir
	g.mu.Unlock()
	if err != nil || category != "pebble-memtable-flush" || !strings.HasPrefix(name, dir) {
		return f, err
	}
	return &gatedFlushFile{File: f, g: g}, nil
}

type gatedFlushFile struct {
	vfs.File
	g *flushGateFS
}

func (f *gatedFlushFile) Write(p []byte) (int, error) {
	f.g.wait()
	return f.File.Write(p)
}

// stallNode opens a node of one root in layout, on an FS whose gate stops
// the flushes of the store in /data/dir, with some documents.
func stallNode(t *testing.T, dir string, layout storage.Layout) (*node.Node, *routing.Table, *flushGateFS) {
	t.Helper()
	g := &flushGateFS{FS: vfs.NewMem()}
	g.gate(dir)
	t.Cleanup(g.open)
	n := openNode(t, storage.Options{FS: g, Layout: layout}, nil, 40)
	return n, n.Table(), g
}

// stallWrites shuts the gate and writes docs documents of 256 KiB through
// a router of tab on its own goroutine until the memtables (16 MiB each)
// of shard id, the gated one, are full and Pebble stalls a write, in
// flight under the apply lock: it returns once the shard reports the
// stall. The returned wait joins the writer (after the gate opens) and
// returns its error.
func stallWrites(t *testing.T, n *node.Node, tab *routing.Table, g *flushGateFS, id routing.ShardID, docs int) (wait func() error) {
	t.Helper()
	g.close()
	body := []byte(strings.Repeat("x", 256<<10))
	var acked atomic.Int64
	errc := make(chan error, 1)
	go func() {
		w := node.NewRouter(n, tab, node.RouterConfig{})
		for i := range docs {
			if _, err := w.Index(fmt.Sprintf("big%d", i), "", body); err != nil {
				errc <- err
				return
			}
			acked.Add(1)
		}
		errc <- nil
	}()
	s, ok := n.ShardStore(id)
	if !ok {
		t.Fatalf("no shard %d", id)
	}
	for deadline := time.Now().Add(time.Minute); !s.WriteStalled(); time.Sleep(time.Millisecond) {
		if acked.Load() == int64(docs) || time.Now().After(deadline) {
			t.Fatalf("%d of %d writes of 256 KiB went through: shard %d never stalled", acked.Load(), docs, id)
		}
	}
	return func() error { return <-errc }
}

// allReadable checks that the documents big0 … big(docs-1) stallWrites
// wrote are found where the node's current table routes them.
func allReadable(t *testing.T, n *node.Node, docs int) {
	t.Helper()
	r := node.NewRouter(n, n.Table(), node.RouterConfig{})
	for i := range docs {
		id := fmt.Sprintf("big%d", i)
		if _, ok, err := r.Get(id, ""); err != nil || !ok {
			t.Errorf("get %s: found %v, %v", id, ok, err)
		}
	}
}

// drainInTests is the handoff's drain bound in these tests: long enough for
// a 256 KiB write under -race, far shorter than the stall.
const drainInTests = 200 * time.Millisecond

// A handoff whose parent is in Pebble's write stop (its memtables full, the
// flush that frees one slow) cannot drain the stalled writes in
// DrainTimeout. Retried at once, its MaxHandoffs attempts would run out
// inside the stall and the split abort though nothing is wrong but the
// moment: it waits for the stall to end before it tries again.
func TestHandoffWaitsOutTheParentsWriteStall(t *testing.T) {
	n, tab, g := stallNode(t, "shard-0", storage.LayoutPerShard)
	sp := NewDriver(n, Config{DrainTimeout: drainInTests}).Start(Plan{Sources: []routing.ShardID{0}, Ways: 2, MaxHandoffs: 2})
	for !sp.Done() && sp.Phase() != PhaseHandoff {
		if _, _, err := sp.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if sp.Done() {
		t.Fatalf("split ended before its handoff: %v", sp.Report().Err)
	}
	const docs = 200
	wait := stallWrites(t, n, tab, g, 0, docs)
	stallEnds := time.AfterFunc(2*time.Second, g.open)
	defer stallEnds.Stop()

	for !sp.Done() {
		if _, _, err := sp.Next(); err != nil {
			t.Fatal(err)
		}
	}
	rep := sp.Report()
	if rep.Phase != PhaseDone {
		t.Fatalf("the split ended %s after %d handoff attempts: %v", rep.Phase, rep.Handoffs, rep.Err)
	}
	if rep.StallWaits == 0 || rep.StallWaited < time.Second {
		t.Errorf("the split waited %d times, %v in all, for the parent's write stall; want at least once, ≥ 1 s", rep.StallWaits, rep.StallWaited)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	// Every write is where the new table says.
	allReadable(t, n, docs)
}

// A cancel asked for while the split waits out the parent's write stall
// is taken at once (the wait holds no lock) and ends the wait (it does not
// sit out Config.StallWait); the split aborts. The abort itself releases
// the parent's log hold with a synced write, which Pebble stalls like any
// other: it ends with the stall (the gate opens 1 s after the cancel).
func TestCancelEndsTheStallWait(t *testing.T) {
	n, tab, g := stallNode(t, "shard-0", storage.LayoutPerShard)
	sp := NewDriver(n, Config{DrainTimeout: drainInTests, StallWait: time.Minute}).Start(SplitPlan(0, 2))
	for !sp.Done() && sp.Phase() != PhaseHandoff {
		if _, _, err := sp.Next(); err != nil {
			t.Fatal(err)
		}
	}
	wait := stallWrites(t, n, tab, g, 0, 200)
	if in, _, err := sp.Next(); err != nil || in.Kind != IntentFence {
		t.Fatalf("step %s: %v; want the fence", in.Kind, err)
	}
	type answer struct {
		err  error
		took time.Duration
	}
	cancelled := make(chan answer, 1)
	go func() {
		time.Sleep(300 * time.Millisecond) // the next step is waiting by now
		time.AfterFunc(time.Second, g.open)
		start := time.Now()
		err := sp.Cancel()
		cancelled <- answer{err, time.Since(start)}
	}()
	for !sp.Done() {
		if _, _, err := sp.Next(); err != nil {
			t.Fatal(err)
		}
	}
	c := <-cancelled
	if c.err != nil {
		t.Fatal(c.err)
	}
	if c.took > 100*time.Millisecond {
		t.Errorf("Cancel took %v during the stall wait", c.took)
	}
	rep := sp.Report()
	if rep.Phase != PhaseAborted || rep.StallWaits != 1 {
		t.Fatalf("ended %s after %d stall waits (%v): %v; want aborted after one", rep.Phase, rep.StallWaits, rep.StallWaited, rep.Err)
	}
	// The stall lasted until 1 s after the cancel; the wait ended at it.
	if rep.StallWaited > 800*time.Millisecond {
		t.Errorf("waited %v for the stall, which the cancel should have ended ~300 ms in", rep.StallWaited)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	allReadable(t, n, 200)
}

// A merge's handoff waits out a source's write stall as a split's does.
func TestMergeHandoffWaitsOutASourcesWriteStall(t *testing.T) {
	n, _, g := stallNode(t, "none", storage.LayoutPerShard)
	d := NewDriver(n, Config{DrainTimeout: drainInTests})
	split, err := d.Run(SplitPlan(0, 2))
	if err != nil || split.Phase != PhaseDone {
		t.Fatalf("split: %s, %v, %v", split.Phase, split.Err, err)
	}
	stalled := split.Targets[0]
	g.gate(fmt.Sprintf("shard-%d", stalled))
	mg := d.Start(Plan{Kind: KindMerge, Sources: split.Targets, MaxHandoffs: 2})
	for !mg.Done() && mg.Phase() != PhaseHandoff {
		if _, _, err := mg.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if mg.Done() {
		t.Fatalf("merge ended before its handoff: %v", mg.Report().Err)
	}
	const docs = 300 // about half of them, 37 MiB, to the stalled source
	wait := stallWrites(t, n, n.Table(), g, stalled, docs)
	stallEnds := time.AfterFunc(2*time.Second, g.open)
	defer stallEnds.Stop()
	for !mg.Done() {
		if _, _, err := mg.Next(); err != nil {
			t.Fatal(err)
		}
	}
	rep := mg.Report()
	if rep.Phase != PhaseDone {
		t.Fatalf("the merge ended %s after %d handoff attempts: %v", rep.Phase, rep.Handoffs, rep.Err)
	}
	if rep.StallWaits == 0 || rep.StallWaited < time.Second {
		t.Errorf("the merge waited %d times, %v in all, for source %d's write stall; want at least once, ≥ 1 s", rep.StallWaits, rep.StallWaited, stalled)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	allReadable(t, n, docs)
}

// A handoff waiting out the parent's write stall holds nothing: the wait
// runs in Operation.Next before it takes the operation's lock, so every
// other reader of the operation (Phase, Report, Done: a monitor, a REST
// handler, a test harness) answers during it, instead of blocking up to
// Config.StallWait (10 s by default).
func TestPhaseAndReportAnswerDuringTheStallWait(t *testing.T) {
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

// A merge whose higher source is in a write stall times out draining it
// after fencing the lower one. While it waits out the stall, the lower
// source takes writes (its fence was released before the wait); a cancel
// then ends the wait, the merge aborts, no source keeps a log hold, and
// every write is readable.
func TestMergeStallWaitLeavesTheOtherSourceWritableAndACancelEndsIt(t *testing.T) {
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

// In the shared layout (one store for every shard, HoldCompactions a
// no-op) a handoff also waits out the store's write stall, and the split
// completes with every write readable.
func TestSharedLayoutHandoffWaitsOutTheStall(t *testing.T) {
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

// A store closed in the middle of a write stall does not leave its stall
// counter above zero. The node's close waits for the stalled write
// (store.closeThen takes ops), the stall ends when the flush gate opens,
// and WriteStalled is false afterwards.
func TestCloseDuringAWriteStallLeavesNoStallCount(t *testing.T) {
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

// stallGate.wait keeps Operation.waitOutStall's contract. It clears the
// recorded shard under the operation's lock whatever happens; it waits,
// and counts the wait in the report, only when a shard was recorded, the
// next intent is the retry's catch-up, no interrupt was raised before, and
// the shard is still stalled; it never holds the operation's lock while it
// waits; an interrupt during the wait ends it (and that wait is counted).
func TestStallGateCountsOnlyAWaitThatHappened(t *testing.T) {
	n, tab, g := stallNode(t, "shard-0", storage.LayoutPerShard)
	s, _ := n.ShardStore(0)
	d := NewDriver(n, Config{StallWait: time.Minute})
	log := zap.NewNop()
	var mu sync.Mutex
	var r Report
	retry := func() bool { return true }
	noRetry := func() bool { return false }
	check := func(what string, gate *stallGate, waits int) {
		t.Helper()
		if gate.on != nil {
			t.Errorf("%s: the recorded shard was not cleared", what)
		}
		if r.StallWaits != waits {
			t.Errorf("%s: %d stall waits counted, want %d", what, r.StallWaits, waits)
		}
		if !mu.TryLock() {
			t.Fatalf("%s: the operation's lock is held after the wait", what)
		}
		mu.Unlock()
	}

	var none stallGate
	none.wait(d, log, &mu, retry, &r)
	check("nothing recorded", &none, 0)

	wait := stallWrites(t, n, tab, g, 0, 200)
	notRetrying := stallGate{on: s}
	notRetrying.wait(d, log, &mu, noRetry, &r)
	check("next intent not the retry's catch-up", &notRetrying, 0)

	early := stallGate{on: s}
	early.interrupted.raise()
	start := time.Now()
	early.wait(d, log, &mu, retry, &r)
	check("interrupted before the wait", &early, 0)
	if took := time.Since(start); took > time.Second {
		t.Errorf("an interrupted gate waited %v", took)
	}

	during := stallGate{on: s}
	free := make(chan bool, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		ok := mu.TryLock()
		if ok {
			mu.Unlock()
		}
		free <- ok
		during.interrupted.raise()
	}()
	during.wait(d, log, &mu, retry, &r)
	check("interrupted during the wait", &during, 1)
	if !<-free {
		t.Errorf("the operation's lock was held during the stall wait")
	}
	if r.StallWaited < 200*time.Millisecond || r.StallWaited > 10*time.Second {
		t.Errorf("StallWaited %v, want about the 300 ms to the interrupt", r.StallWaited)
	}

	g.open()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	over := stallGate{on: s}
	over.wait(d, log, &mu, retry, &r)
	check("stall over", &over, 1)
}
