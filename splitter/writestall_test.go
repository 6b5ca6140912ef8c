package splitter

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

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
	tab, err := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 1, RoutingShards: 16, PartitionSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := storage.Open(storage.Options{Dir: "/data", FS: g, Durability: storage.DurabilityRequest, CacheBytes: 1 << 20, Layout: layout})
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(node.Config{Engine: eng, Table: tab})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	r := node.NewRouter(n, tab, node.RouterConfig{})
	for i := range 40 {
		if _, err := r.Index(fmt.Sprintf("d%d", i), "", []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	return n, tab, g
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
// DrainTimeout. The split used to retry at once, and MaxHandoffs attempts
// ran out inside the stall: the split aborted though nothing was wrong but
// the moment. It waits for the stall to end before it tries again.
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
