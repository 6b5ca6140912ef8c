package storage

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap/zaptest"

	"github.com/shardsplit/shardsplit/routing"
)

// TestSplitFlushesArePaced: the parent's flush before a child's checkpoint,
// and the child's flush of the WAL it copied, write at SplitFlushRate; the
// store's own flushes do not.
func TestSplitFlushesArePaced(t *testing.T) {
	const rate = 8 << 20
	e := openEngine(t, Options{Logger: zaptest.NewLogger(t), CacheBytes: 8 << 20, SplitFlushRate: rate})
	defer e.Close()
	parent := openShard(t, e, 2, 2, rootSpan(2))
	writeRandomDocs(t, parent, "own", 1000, 1024)
	if err := parent.st.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := parent.st.cfs.pacedBytes.Load(); n != 0 {
		t.Fatalf("the store's own flush wrote %d paced bytes, want 0", n)
	}

	writeRandomDocs(t, parent, "split", 4000, 1024) // ~4 MiB unflushed: CreateChild flushes the parent
	parent.HoldLog()
	_, stats, err := e.CreateChild(parent, 9, routing.Span{Start: 256, End: 320})
	if err != nil {
		t.Fatal(err)
	}
	paced := parent.st.cfs.pacedBytes.Load()
	if paced < 2<<20 {
		t.Fatalf("the split's flush of ~4 MiB wrote %d paced bytes, want > 2 MiB", paced)
	}
	if min := time.Duration(float64(paced) / rate * float64(time.Second)); stats.Flush < min*9/10 {
		t.Errorf("the split's flush took %v for %d bytes, want >= %v at %d B/s", stats.Flush, paced, min, rate)
	}
	if n := parent.st.cfs.paced.Load(); n != 0 {
		t.Errorf("the parent is still paced after the child's creation (%d)", n)
	}

	writeRandomDocs(t, parent, "late", 500, 1024) // ~1 MiB with the held log: copied with the WAL, flushed by the child's open
	child, stats, err := e.CreateChild(parent, 10, routing.Span{Start: 320, End: 384})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Flush != 0 || stats.Copied < 512<<10 {
		t.Fatalf("second child: flush %v, copied %d bytes; want no flush and the WAL copied", stats.Flush, stats.Copied)
	}
	if n := child.st.cfs.pacedBytes.Load(); n == 0 {
		t.Errorf("the child's open flushed its copied WAL unpaced")
	}
	if n := child.st.cfs.paced.Load(); n != 0 {
		t.Errorf("the child is still paced after its open (%d)", n)
	}
}

// A split does not flush a parent whose L0 is at Pebble's stop-writes
// depth: Pebble stalls a forced flush there like a write, with the commit
// pipeline held, so every writer of the parent would wait for its L0
// compaction (0.8-1.6 s stalls in a set of 4 GiB splits). The
// children copy the parent's WAL instead.
func TestSplitDoesNotFlushAParentAtTheStopWritesDepth(t *testing.T) {
	e, parent, release := parentAtStopDepth(t)
	writeRandomDocs(t, parent, "split", 2500, 1024) // > 2 MiB unflushed
	parent.HoldLog()
	type result struct {
		child *Shard
		stats ChildStats
		err   error
	}
	done := make(chan result, 1)
	go func() {
		c, st, err := e.CreateChild(parent, 9, routing.Span{Start: 256, End: 320})
		done <- result{c, st, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		release()
		<-done
		t.Fatalf("CreateChild did not return within 10 s with the parent's L0 at %d sublevels: its flush waited for the L0 compaction",
			parent.st.db.Metrics().Levels[0].Sublevels)
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.stats.Flush != 0 || !r.stats.SkippedFlush || r.stats.Copied < 2<<20 {
		t.Errorf("flush %v, skipped %v, copied %d bytes: want no flush and the WAL copied", r.stats.Flush, r.stats.SkippedFlush, r.stats.Copied)
	}
	want := 0
	for d := range 2500 {
		if k := 256 + uint64(d%128); k < 320 {
			want++
		}
	}
	got := 0
	for id := range scanState(t, r.child) {
		if strings.HasPrefix(id, "split-") {
			got++
		}
	}
	if got != want {
		t.Errorf("child holds %d of the split's documents, want %d", got, want)
	}
}

// A split that skips the parent's flush (its L0 at the stop-writes depth)
// while writers keep writing: the child holds every write acknowledged up
// to its S, none after, and no key outside its span. The skipped flush
// leaves the child to the checkpoint's copy of the WAL (WithFlushedWAL)
// and the excise after its open.
func TestSplitSkippingTheFlushUnderWritesKeepsExactlyS(t *testing.T) {
	e, parent, release := parentAtStopDepth(t)
	writeRandomDocs(t, parent, "split", 2500, 1024) // > 2 MiB unflushed
	parent.HoldLog()

	// One writer, one document a write, across the whole root span
	// [256, 384): the child owns [256, 320). Bounded, so the memtable does
	// not fill over the gated L0.
	type acked struct {
		key routing.Key
		seq uint64
	}
	stop, started := make(chan struct{}), make(chan struct{})
	writerDone := make(chan map[string]acked, 1)
	go func() {
		got := map[string]acked{}
		defer func() { writerDone <- got }()
		for i := 0; i < 20000; i++ {
			if i == 100 {
				close(started)
			}
			select {
			case <-stop:
				return
			default:
			}
			id := fmt.Sprintf("c-%d", i)
			op := opFor(id, OpIndex, "concurrent")
			op.Root, op.Key = 2, routing.Key(256+uint64(i%128))
			seq, err := parent.Write([]Op{op}, nil)
			if err != nil {
				t.Errorf("write %s: %v", id, err)
				return
			}
			got[id] = acked{op.Key, seq}
		}
	}()
	type result struct {
		child *Shard
		stats ChildStats
		err   error
	}
	done := make(chan result, 1)
	go func() {
		<-started
		c, st, err := e.CreateChild(parent, 9, routing.Span{Start: 256, End: 320})
		done <- result{c, st, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		close(stop)
		release()
		<-done
		t.Fatalf("CreateChild did not return within 20 s")
	}
	close(stop)
	var writes map[string]acked
	select {
	case writes = <-writerDone:
	case <-time.After(20 * time.Second):
		release()
		<-writerDone
		t.Fatalf("the writer did not stop within 20 s")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !r.stats.SkippedFlush {
		t.Fatalf("the split flushed the parent (%v): the test needs the skipped flush", r.stats.Flush)
	}
	S := r.stats.Seq
	var before, after int
	for _, w := range writes {
		if w.seq <= S {
			before++
		} else {
			after++
		}
	}
	t.Logf("S %d: %d concurrent writes at or before S, %d after", S, before, after)
	inChild := scanState(t, r.child)
	for id, w := range writes {
		_, ok := inChild[id]
		switch want := w.seq <= S && w.key < 320; {
		case want && !ok:
			t.Errorf("%s (key %d, seq %d <= S %d) is missing from the child", id, w.key, w.seq, S)
		case !want && ok:
			t.Errorf("%s (key %d, seq %d, S %d) is in the child", id, w.key, w.seq, S)
		}
	}
	for id := range inChild {
		if !strings.HasPrefix(id, "c-") && !strings.HasPrefix(id, "split-") && !strings.HasPrefix(id, "warm-") && !strings.HasPrefix(id, "r") {
			t.Errorf("unexpected document %s in the child", id)
		}
	}
	if err := r.child.Scan(func(d Doc) error {
		if d.Key < 256 || d.Key >= 320 {
			t.Errorf("foreign document %s (key %d) in the child", d.ID, d.Key)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// parentAtStopDepth opens an engine whose shard 2 has its L0 at Pebble's
// stop-writes depth (L0StopWritesThreshold overlapping sublevels) and a
// memtable grown large enough for a few MiB of writes without a rotation.
// Its L0 compaction cannot finish until release is called; the test's
// cleanup releases it, then closes the engine (the close waits for it).
func parentAtStopDepth(t *testing.T) (*Engine, *Shard, func()) {
	t.Helper()
	g := gatedCompactionFS{FS: vfs.NewMem(), gate: make(chan struct{}), started: make(chan struct{}), once: &sync.Once{}}
	var once sync.Once
	release := func() { once.Do(func() { close(g.gate) }) }
	e := openEngine(t, Options{FS: g, Logger: zaptest.NewLogger(t), CacheBytes: 8 << 20})
	t.Cleanup(func() {
		release()
		if err := e.Close(); err != nil {
			t.Error(err)
		}
	})
	parent := openShard(t, e, 2, 2, rootSpan(2))
	// Pebble grows its memtables from 256 KiB as they fill (a forced flush
	// of a small one does not).
	writeRandomDocs(t, parent, "warm", 12000, 1024)
	// Overlapping flushes: each is a new L0 sublevel, and the L0
	// compaction they start cannot finish.
	for i := 0; int(parent.st.db.Metrics().Levels[0].Sublevels) < parent.st.l0StopWrites; i++ {
		writeDocs(t, parent, fmt.Sprintf("r%d", i), 128, 64)
		if err := parent.st.db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	return e, parent, release
}
