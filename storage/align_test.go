package storage

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap/zaptest"

	"github.com/shardsplit/shardsplit/routing"
)

// alignParent opens an engine with opts (directory, logger and cache
// filled in; a memory filesystem unless opts has one) and root 2's shard
// with ~4 MiB unflushed, far from a full 16 MiB memtable: a parent whose
// split would force a flush. The engine is closed at the test's end.
func alignParent(t *testing.T, opts Options) (*Engine, *Shard) {
	t.Helper()
	opts.Dir, opts.Logger, opts.CacheBytes = "/data", zaptest.NewLogger(t), 8<<20
	if opts.FS == nil {
		opts.FS = vfs.NewMem()
	}
	e, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	parent := openShard(t, e, 2, 2, rootSpan(2))
	writeRandomDocs(t, parent, "big", 4000, 1024)
	return e, parent
}

// AwaitOwnFlush does not return ready while the parent holds more than
// flushBeforeCheckpoint unflushed, says so past its bound, and returns
// once the store has flushed on its own; a child made then forces no
// flush of the parent.
func TestAwaitOwnFlush(t *testing.T) {
	e, parent := alignParent(t, Options{})
	const bound = 100 * time.Millisecond
	waited, ready, err := e.AwaitOwnFlush(parent, bound)
	if err != nil || ready || waited < bound {
		t.Fatalf("with ~4 MiB unflushed and no writes: waited %v, ready %v, err %v; want the whole %v, not ready", waited, ready, err, bound)
	}

	// A writer fills the memtable at ~16 MiB/s (a memory filesystem
	// would take writes far faster than any disk): the store flushes on
	// its own, and the wait ends after that flush, with little left
	// unflushed.
	flushesBefore := parent.st.db.Metrics().Flush.Count
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			var ops []Op
			for j := range 8 {
				op := opFor(fmt.Sprintf("fill-%d-%d", i, j), OpIndex, string(make([]byte, 4096)))
				op.Root, op.Key = 2, routing.Key(256+uint64(j))
				ops = append(ops, op)
			}
			if _, err := parent.Write(ops, nil); err != nil {
				done <- err
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	waited, ready, err = e.AwaitOwnFlush(parent, 30*time.Second)
	close(stop)
	if werr := <-done; werr != nil {
		t.Fatal(werr)
	}
	if err != nil || !ready {
		t.Fatalf("while a writer filled the memtable: waited %v, ready %v, err %v; want ready", waited, ready, err)
	}
	if n := parent.st.db.Metrics().Flush.Count; n <= flushesBefore {
		t.Fatalf("the wait ended with %d flushes, as many as before it: it did not wait for the store's own flush", n)
	}
	unflushed := parent.st.db.Metrics().WAL.Size
	parent.HoldLog()
	_, stats, err := e.CreateChild(parent, 9, routing.Span{Start: 256, End: 320})
	if err != nil {
		t.Fatal(err)
	}
	// The writer outpacing the flush (a race build) may leave more than
	// 2 MiB behind it; then, and only then, the split flushes that.
	if unflushed <= flushBeforeCheckpoint && (stats.Flush != 0 || stats.SkippedFlush || stats.Copied > 4<<20) {
		t.Errorf("the child made after the wait (%d bytes unflushed): flush %v, skipped %v, copied %d bytes; want no flush and a small WAL", unflushed, stats.Flush, stats.SkippedFlush, stats.Copied)
	}
}

// A flush that ended since the wait began ends it even if writes that
// came in meanwhile left more than 2 MiB unflushed: otherwise a wait
// could outlast every flush of a store whose writes outpace its flushes.
func TestAwaitOwnFlushEndsAfterAFlushEvenWithMoreBehindIt(t *testing.T) {
	e, parent := alignParent(t, Options{})
	deleted, flushed := parent.st.flushes.counts()
	if err := parent.st.db.Flush(); err != nil {
		t.Fatal(err)
	}
	writeRandomDocs(t, parent, "during", 3000, 1024) // ~3 MiB behind the flush
	for d, _ := parent.st.flushes.counts(); d == deleted; d, _ = parent.st.flushes.counts() {
		time.Sleep(time.Millisecond) // the flushed WAL's deletion, in Pebble's background
	}
	if size := parent.st.db.Metrics().WAL.Size; size <= flushBeforeCheckpoint {
		t.Fatalf("only %d bytes behind the flush; the test needs more than %d", size, flushBeforeCheckpoint)
	}
	if ready, err := parent.st.flushedJustNow(e.opts.Clock, flushed); err != nil || !ready {
		t.Errorf("a flush ended since the wait began: ready %v, err %v; want ready", ready, err)
	}
	if _, now := parent.st.flushes.counts(); now == flushed {
		t.Fatal("the flush was not counted")
	}
	if ready, err := parent.st.flushedJustNow(e.opts.Clock, flushed+1); err != nil || ready {
		t.Errorf("no flush since the wait began and over 2 MiB unflushed: ready %v, err %v; want not ready", ready, err)
	}
}

// A closed store is an error, not a wait; the shared layout has nothing
// to wait for.
func TestAwaitOwnFlushClosedAndShared(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	parent := openShard(t, e, 2, 2, rootSpan(2))
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ready, err := e.AwaitOwnFlush(parent, time.Second); err == nil || ready {
		t.Errorf("closed store: ready %v, err %v; want an error", ready, err)
	}

	shared := openTestEngine(t, vfs.NewMem(), LayoutShared)
	defer shared.Close()
	s := openShard(t, shared, 2, 2, rootSpan(2))
	writeRandomDocs(t, s, "big", 4000, 1024)
	if waited, ready, err := shared.AwaitOwnFlush(s, time.Second); err != nil || !ready || waited > 100*time.Millisecond {
		t.Errorf("shared layout: waited %v, ready %v, err %v; want at once", waited, ready, err)
	}
}
