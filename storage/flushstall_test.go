package storage

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/shardsplit/shardsplit/routing"
)

// The forced flush must fail, not wait, also once the parent's memtables
// have filled while its flushes fail: that is where a store whose table
// writes fail for good ends up as soon as it keeps taking writes (after a
// first split aborted on the failed flush, say), and a later split of it
// must fail as the first did.
//
// store.flush counts failures only after DB.AsyncFlush returns, and
// AsyncFlush rotates the memtable through makeRoomForWrite, which first
// waits (maybeInduceWriteStall, holding the commit pipeline's mutex) until
// the queued memtables are below MemTableStopWritesThreshold x
// MemTableSize: with every flush failing, for good. A split waiting there
// would hold the parent's log and compactions for good, and its Cancel
// would wait behind it. No writer is stalled here (the last write made
// room in a fresh memtable): only the split's own flush waits.
func TestAFailedForcedFlushFailsTheSplitAtTheMemtableLimit(t *testing.T) {
	inj := noNewTables()
	e, parent := openParentOn(t, "/data", errorfs.Wrap(vfs.NewMem(), inj), Options{FlushChildren: true}) // the forced flush's path
	writeDocs(t, parent, "d", 3000, 1024)
	inj.armed.Store(true)
	defer inj.armed.Store(false) // let Pebble's retry succeed, so the close can end

	// Write while the flushes fail until the memtables reach Pebble's
	// stop-writes size (pebbleOptions: MemTableSize 16 MiB; Pebble's
	// default MemTableStopWritesThreshold, 2). The write that crosses it
	// rotated into a fresh memtable and did not stall; the next write
	// that needs a rotation would.
	const limit = 2 * (16 << 20)
	src := strings.Repeat("x", 1024)
	filled := make(chan error, 1)
	go func() {
		for b := 0; b < 1000; b++ { // 100,000 KiB at most
			if parent.st.db.Metrics().MemTable.Size >= limit {
				filled <- nil
				return
			}
			var ops []Op
			for i := range 100 {
				op := opFor(fmt.Sprintf("w%d-%d", b, i), OpIndex, src)
				op.Root, op.Key = 2, routing.Key(256+uint64(i%128))
				ops = append(ops, op)
			}
			if _, err := parent.Write(ops, nil); err != nil {
				filled <- err
				return
			}
		}
		filled <- fmt.Errorf("memtables still below %d bytes", limit)
	}()
	select {
	case err := <-filled:
		if err != nil {
			t.Fatalf("setup: %v", err)
		}
	case <-time.After(60 * time.Second):
		inj.armed.Store(false)
		t.Fatalf("setup: a write stalled before the memtables reached the limit")
	}
	m := parent.st.db.Metrics()
	t.Logf("the parent's memtables: %d of them, %d bytes; flushes failing (%d failed table creations so far)", m.MemTable.Count, m.MemTable.Size, inj.hits.Load())

	parent.HoldLog()
	type result struct {
		children []*Shard
		err      error
	}
	done := make(chan result, 1)
	go func() {
		children, _, err := e.CreateChildren(parent, halves(), ChildExcise, true)
		done <- result{children, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		inj.armed.Store(false)
		r = <-done
		made := 0
		for _, c := range r.children {
			if c != nil {
				made++
			}
		}
		t.Fatalf("CreateChildren still waiting 20 s after it began, the parent's table writes failing and its memtables at the stop-writes size (%d failed creations); once the disk recovered it made %d children and returned %v", inj.hits.Load(), made, r.err)
	}
	for _, c := range r.children {
		if c != nil {
			t.Errorf("child %d made while the parent could not write a table", c.ID())
		}
	}
	if r.err == nil || !strings.Contains(r.err.Error(), "injected") {
		t.Errorf("CreateChildren: %v; want the failed flush's error", r.err)
	}
	inj.armed.Store(false)
	if err := parent.ReleaseLog(); err != nil {
		t.Fatal(err)
	}
}

// A failed flush long past must not refuse a later one: the last flush to
// end failed, but the store's memtables are far below the stop-writes
// size, so AsyncFlush cannot wait in Pebble's write stall and the flush
// must simply run. Refusing on any past failure, the simulation's liveness
// phase refuses splits with no fault injected (seeds 2212, 2973, 2989 of
// 3000).
func TestAStaleFlushFailureDoesNotRefuseTheNextFlush(t *testing.T) {
	_, parent := openParentOn(t, "/data", vfs.NewMem(), Options{})
	writeDocs(t, parent, "d", 100, 1024)
	parent.st.flushes.flushFailed(fmt.Errorf("injected: an old flush failure"))
	if err := parent.st.flush(); err != nil {
		t.Fatalf("flush of a healthy store whose last flush once failed: %v", err)
	}
	if n := parent.st.db.Metrics().Flush.Count; n == 0 {
		t.Fatal("no flush ran")
	}
}
