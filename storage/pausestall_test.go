package storage

import (
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/shardsplit/shardsplit/internal/clock"
)

// A split that begins while its parent's writes are already stalled (L0
// at Pebble's stop-writes depth, the compaction that ends the stall
// running) must not prolong the stall. Pebble reports a stall once, when
// it begins (maybeInduceWriteStall), and the other writers wait behind the
// stalled one on the commit pipeline, so no WriteStallBegin comes after
// the pause to resume the compaction: the writers stayed stalled until the
// pause's bound (2 s). A freshly bulk-loaded parent (design/findings.md,
// question 11) is the store this happens to.
func TestPauseDuringAWriteStallDoesNotProlongIt(t *testing.T) {
	g := gatedCompactionFS{FS: vfs.NewMem(), gate: make(chan struct{}), started: make(chan struct{}), once: &sync.Once{}}
	deepL0Store(t, g.FS, "/data/shard-5")
	core, logs := observer.New(zap.DebugLevel) // Pebble's events, WriteStallBegin among them
	st, err := openStore("/data/shard-5", storeOptions{fs: g, logger: zap.New(core), clock: clock.Real{}}, false)
	if err != nil {
		t.Fatal(err)
	}
	var openGate sync.Once
	release := func() { openGate.Do(func() { close(g.gate) }) }
	defer func() {
		release()
		if err := st.close(); err != nil {
			t.Error(err)
		}
	}()
	// The store's urgent L0 compaction starts and waits at its first write.
	select {
	case <-g.started:
	case <-time.After(10 * time.Second):
		t.Fatal("no compaction started on a store at the stop-writes depth")
	}
	// A write that needs a new memtable stalls now: a forced flush does.
	if err := st.db.Set([]byte("k000"), []byte("w"), nil); err != nil {
		t.Fatal(err)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- st.db.Flush() }()
	for deadline := time.Now().Add(10 * time.Second); logs.FilterMessageSnippet("write stall beginning").Len() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the flush did not stall: the store is not at the stop-writes depth")
		}
	}
	// The split begins: its parent's compactions are held and paused.
	st.cfs.maxPause = 5 * time.Second
	holdCompactions(st.sched, st.cfs)
	start := time.Now()
	release() // the compaction may write its output now
	select {
	case err := <-flushed:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the stall ended %v after the compaction could write", time.Since(start))
	case <-time.After(3 * time.Second):
		st.cfs.resume() // let the stall end, so the store can close
		<-flushed
		t.Fatalf("the write stall still held the store's writers 3 s after its compaction could write: the split's pause parked the compaction that ends the stall, and nothing resumes it before the pause's bound (%v)", st.cfs.maxPause)
	}
}
