package storage

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"
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
	parent, err := e.OpenShard(2, 2, []routing.Span{rootSpan(2)})
	if err != nil {
		t.Fatal(err)
	}
	writeRandomDocs(t, parent, "big", 4000, 1024)
	return e, parent
}

// alignWriter writes batches of eight docs of size bytes to parent every
// pause until stop is closed or a write fails; done gets the error (nil
// after stop).
func alignWriter(parent *Shard, size int, pause time.Duration) (stop chan struct{}, done chan error) {
	stop, done = make(chan struct{}), make(chan error, 1)
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
				op := opFor(fmt.Sprintf("fill-%d-%d", i, j), OpIndex, string(make([]byte, size)))
				op.Root, op.Key = 2, routing.Key(256+uint64(j)*8)
				ops = append(ops, op)
			}
			if _, err := parent.Write(ops, nil); err != nil {
				done <- err
				return
			}
			time.Sleep(pause)
		}
	}()
	return stop, done
}

// AwaitOwnFlush needs the caller's log hold, gives up at once on an idle
// store, and otherwise returns once the store has flushed on its own past
// the hold. Children made then force no flush of the parent (the log has
// every write its tables lack), and after the catch-up they hold exactly
// the parent's documents.
func TestAwaitOwnFlush(t *testing.T) {
	e, parent := alignParent(t, Options{})
	waited, ready, err := e.AwaitOwnFlush(parent, 10*time.Second)
	if err != nil || ready || waited > time.Second {
		t.Fatalf("idle store: waited %v, ready %v, err %v; want not ready within a poll or so", waited, ready, err)
	}
	if n := parent.LogHolds(); n != 1 {
		t.Fatalf("after the wait the log has %d holds; want the wait's one", n)
	}
	if parent.logCoversUnflushed() {
		t.Fatal("the ~4 MiB written before the hold are unflushed, yet the log is said to cover them")
	}
	if err := parent.ReleaseLog(); err != nil {
		t.Fatal(err)
	}

	// A writer fills the memtable at ~16 MiB/s (a memory filesystem
	// would take writes far faster than any disk): the store flushes on
	// its own, and the wait ends after that flush.
	flushesBefore, seqBefore := parent.st.db.Metrics().Flush.Count, parent.Seq()
	stop, done := alignWriter(parent, 4096, 2*time.Millisecond)
	waited, ready, err = e.AwaitOwnFlush(parent, 30*time.Second)
	defer func() { _ = parent.ReleaseLog() }()
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
	// The hold came late in the memtable's fill, not at the wait's start:
	// the writes before it are not doubled into the log.
	if from, held := parent.loggedAfter(); !held || from <= seqBefore {
		t.Errorf("the log is held (%v) from sequence number %d, and the wait began at %d: the hold came at the wait's start", held, from, seqBefore)
	}

	root := rootSpan(2)
	mid := root.Start + (root.End-root.Start)/2
	specs := []ChildSpec{{Shard: 3, Span: routing.Span{Start: root.Start, End: mid}}, {Shard: 4, Span: routing.Span{Start: mid, End: root.End}}}
	flushesBefore = parent.st.db.Metrics().Flush.Count
	children, stats, err := e.CreateChildren(parent, specs, ChildExcise, true)
	if err != nil {
		t.Fatal(err)
	}
	if n := parent.st.db.Metrics().Flush.Count; n != flushesBefore || stats[0].Flush != 0 {
		t.Errorf("children made after the parent's own flush past the hold: %d flushes of the parent (flush %v); want none", n-flushesBefore, stats[0].Flush)
	}
	for _, st := range stats {
		if !st.OwnFlush || !st.OmittedWAL || st.SkippedFlush {
			t.Errorf("child %d: own flush %v, omitted WAL %v, skipped flush %v; want true, true, false", st.Shard, st.OwnFlush, st.OmittedWAL, st.SkippedFlush)
		}
	}
	after := min(stats[0].Seq, stats[1].Seq)
	if _, _, err := e.CatchUp(parent, children, after); err != nil {
		t.Fatal(err)
	}
	got := scanState(t, children[0])
	maps.Copy(got, scanState(t, children[1]))
	if diff := cmp.Diff(scanState(t, parent), got); diff != "" {
		t.Errorf("the children after the catch-up against the parent (-parent +children):\n%s", diff)
	}
}

// A write in progress that applies nothing for longer than alignIdle (one
// held in a WAL fsync or Pebble's write stall) does not make the store
// idle: the wait goes on to its bound. (A 4 GiB probe's wait gave up
// behind a 160 ms writer stall when only applied writes counted.)
func TestAwaitOwnFlushIsNotIdleWhileAWriteIsInProgress(t *testing.T) {
	e, parent := alignParent(t, Options{})
	parent.writing.Add(1) // as Write does, for a write that has not applied yet
	defer parent.writing.Add(-1)
	const bound = 4 * alignIdle
	waited, ready, err := e.AwaitOwnFlush(parent, bound)
	if err != nil || ready || waited < bound {
		t.Errorf("with a write in progress: waited %v, ready %v, err %v; want the whole %v (not idle)", waited, ready, err, bound)
	}
}

// A hold that began after the parent's last flush does not cover what that
// flush left in the memtable: the children force a flush, as before.
// (Were the hold's WAL taken as the last one deleted rather than the
// newest created, the log would be said to cover writes it lacks, and the
// children's check that the log begins at or before S would fail them.)
func TestAHoldAfterTheLastFlushStillFlushes(t *testing.T) {
	e, parent, specs := func() (*Engine, *Shard, []ChildSpec) {
		e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
		t.Cleanup(func() { _ = e.Close() })
		parent, specs := childrenParent(t, e, 2000) // flushed halfway, then held
		return e, parent, specs
	}()
	if _, obsolete := parent.st.flushes.wals(); obsolete == 0 {
		t.Fatal("no WAL deleted after the parent's flush: the test needs one")
	}
	if parent.logCoversUnflushed() {
		t.Fatal("the log is said to cover the writes after the last flush, which came before the hold")
	}
	flushesBefore := parent.st.db.Metrics().Flush.Count
	_, stats, err := e.CreateChildren(parent, specs, ChildExcise, true)
	if err != nil {
		t.Fatal(err)
	}
	if n := parent.st.db.Metrics().Flush.Count; n == flushesBefore || stats[0].OwnFlush {
		t.Errorf("children of a parent with writes from before the hold unflushed: %d flushes, own flush %v; want one forced flush", n-flushesBefore, stats[0].OwnFlush)
	}
}

// A closed store is an error, not a wait; the shared layout has nothing
// to wait for.
func TestAwaitOwnFlushClosedAndShared(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	parent, err := e.OpenShard(2, 2, []routing.Span{rootSpan(2)})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ready, err := e.AwaitOwnFlush(parent, time.Second); err == nil || ready {
		t.Errorf("closed store: ready %v, err %v; want an error", ready, err)
	}

	shared := openTestEngine(t, vfs.NewMem(), LayoutShared)
	defer shared.Close()
	s, err := shared.OpenShard(2, 2, []routing.Span{rootSpan(2)})
	if err != nil {
		t.Fatal(err)
	}
	writeRandomDocs(t, s, "big", 4000, 1024)
	if waited, ready, err := shared.AwaitOwnFlush(s, time.Second); err != nil || !ready || waited > 100*time.Millisecond {
		t.Errorf("shared layout: waited %v, ready %v, err %v; want at once", waited, ready, err)
	}
}

// A child that cannot take the catch-up fails it with an error naming the
// child; its sibling, replayed on a goroutine of its own, still gets every
// entry of its span.
func TestCatchUpFailsForAClosedChildAndStillReplaysItsSibling(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	parent, specs := childrenParent(t, e, 200) // held
	children, stats, err := e.CreateChildren(parent, specs, ChildExcise, true)
	if err != nil {
		t.Fatal(err)
	}
	after := min(stats[0].Seq, stats[1].Seq)
	root := rootSpan(2)
	for i := range 400 {
		op := opFor(fmt.Sprintf("late-%d", i), OpIndex, "v")
		op.Root, op.Key = 2, routing.Key(root.Start+uint64(i)%(root.End-root.Start))
		if _, err := parent.Write([]Op{op}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.DestroyShard(children[0].ID()); err != nil {
		t.Fatal(err)
	}
	_, _, err = e.CatchUp(parent, children, after)
	if !errors.Is(err, ErrShardClosed) || !strings.Contains(err.Error(), fmt.Sprintf("child %d", children[0].ID())) {
		t.Fatalf("catch-up into a destroyed child: %v; want ErrShardClosed naming child %d", err, children[0].ID())
	}
	want := state{}
	if err := parent.Scan(func(d Doc) error {
		if inSpans(children[1].Owned(), d.Key) {
			want[d.ID] = string(d.Source)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, scanState(t, children[1])); diff != "" {
		t.Errorf("child %d after the catch-up against the parent's documents of its span (-parent +child):\n%s", children[1].ID(), diff)
	}
}

// FlushOwn is the own flush of a store that never fills its memtable (the
// simulation's hook): taken before the log hold it does not make the wait
// ready (the writes it left are not logged), taken after the hold it does,
// and on a closed shard it is an error.
func TestFlushOwn(t *testing.T) {
	e, parent := alignParent(t, Options{})
	if err := e.FlushOwn(parent); err != nil {
		t.Fatal(err)
	}
	writeRandomDocs(t, parent, "more", 100, 1024)
	parent.HoldLog()
	defer func() { _ = parent.ReleaseLog() }()
	// The log is held already: each wait nests a hold of its own on it
	// and waits for the flush past the first.
	if _, ready, err := e.AwaitOwnFlush(parent, time.Second); err != nil || ready {
		t.Fatalf("own flush before the hold: ready %v, err %v; want not ready", ready, err)
	}
	if err := parent.ReleaseLog(); err != nil {
		t.Fatal(err)
	}
	if err := e.FlushOwn(parent); err != nil {
		t.Fatal(err)
	}
	if _, ready, err := e.AwaitOwnFlush(parent, 10*time.Second); err != nil || !ready {
		t.Fatalf("own flush after the hold: ready %v, err %v; want ready", ready, err)
	}
	if n := parent.LogHolds(); n != 2 {
		t.Errorf("%d log holds after the test's and the wait's; want 2", n)
	}
	if err := parent.ReleaseLog(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.FlushOwn(parent); !errors.Is(err, ErrShardClosed) {
		t.Errorf("own flush of a closed shard: %v; want ErrShardClosed", err)
	}
}
