package storage

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/shardsplit/shardsplit/routing"
)

var errInjected = errors.New("injected i/o error")

// failOnce is an error injector that, once armed, fails the next operation
// match accepts, then disarms.
type failOnce struct {
	armed atomic.Bool
	match func(errorfs.Op) bool
	hits  atomic.Int32
}

func (f *failOnce) String() string { return "failOnce" }

func (f *failOnce) MaybeError(op errorfs.Op) error {
	if f.match(op) && f.armed.CompareAndSwap(true, false) {
		f.hits.Add(1)
		return errInjected
	}
	return nil
}

// failAlways is an error injector that, once armed, fails every operation
// match accepts with the error fail makes of it.
type failAlways struct {
	armed atomic.Bool
	match func(errorfs.Op) bool
	fail  func(errorfs.Op) error
	hits  atomic.Int64
}

func (f *failAlways) String() string { return "failAlways" }

func (f *failAlways) MaybeError(op errorfs.Op) error {
	if f.armed.Load() && f.match(op) {
		f.hits.Add(1)
		return f.fail(op)
	}
	return nil
}

func isWALSync(op errorfs.Op) bool {
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		return strings.HasSuffix(op.Path, ".log")
	}
	return false
}

// A failed trim of the operation log must leave the hold in place: a hold
// dropped before the trim would fail every retry with "release of an
// operation log nobody holds", hiding the I/O error.
//
// NB: Pebble makes a failed WAL fsync sticky (the store refuses every later
// synced write until it is reopened, as it must: the kernel may have dropped
// the dirty pages), so the retry in the same process fails with the same
// I/O error; after a reopen the log is trimmed (recovery's TrimLog).
func TestReleaseLogKeepsTheHoldOnAFailedTrim(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout Layout) {
		inj := &failOnce{match: isWALSync}
		mem := vfs.NewMem()
		e := openTestEngine(t, errorfs.Wrap(mem, inj), layout)
		s := openShard(t, e, 2, 2, rootSpan(2))
		s.HoldLog()
		for _, id := range idsInRoot(2, 10) {
			if _, err := s.Write([]Op{opFor(id, OpIndex, "v")}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if n := countLog(t, s); n != 10 {
			t.Fatalf("log holds %d entries, want 10", n)
		}
		inj.armed.Store(true)
		if err := s.ReleaseLog(); !errors.Is(err, errInjected) {
			t.Fatalf("ReleaseLog with a failing WAL sync = %v, want the injected error", err)
		}
		if err := s.ReleaseLog(); !errors.Is(err, errInjected) {
			t.Fatalf("ReleaseLog retried after a failed trim = %v, want the trim's I/O error again", err)
		}
		if inj.hits.Load() != 1 {
			t.Fatalf("injected %d errors, want 1", inj.hits.Load())
		}
		_ = e.Close()

		e = openTestEngine(t, mem, layout)
		defer e.Close()
		s = openShard(t, e, 2, 2, rootSpan(2))
		if err := s.TrimLog(); err != nil {
			t.Fatalf("TrimLog after reopen: %v", err)
		}
		if n := countLog(t, s); n != 0 {
			t.Fatalf("log holds %d entries after TrimLog, want 0", n)
		}
	})
}

// In the shared layout DestroyShard of a shard that was never opened since
// the engine opened (recovery's case) removes its sequence number and its
// operation log, and leaves the documents of its span, which belong to the
// shards that own the span now.
func TestDestroyUnopenedSharedShard(t *testing.T) {
	mem := vfs.NewMem()
	e := openTestEngine(t, mem, LayoutShared)
	parent := openShard(t, e, 2, 2, rootSpan(2))
	// A rolled-forward parent: it held its log for the split; its child 9
	// owns part of its span.
	parent.HoldLog()
	for _, id := range idsInRoot(2, 20) {
		if _, err := parent.Write([]Op{opFor(id, OpIndex, "v")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	child, _, err := e.CreateChild(parent, 9, rootSpan(2))
	if err != nil {
		t.Fatal(err)
	}
	if parent.Seq() != 20 || child.Seq() != 20 || countLog(t, parent) != 20 {
		t.Fatalf("before: parent seq %d, child seq %d, parent log %d; want 20, 20, 20", parent.Seq(), child.Seq(), countLog(t, parent))
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	e = openTestEngine(t, mem, LayoutShared)
	defer e.Close()
	for _, id := range []routing.ShardID{2, 9} {
		if err := e.DestroyShard(id); err != nil {
			t.Fatalf("DestroyShard(%d) of an unopened shard: %v", id, err)
		}
	}
	for _, id := range []routing.ShardID{2, 9} {
		s := openShard(t, e, id, 2, rootSpan(2))
		if s.Seq() != 0 || countLog(t, s) != 0 {
			t.Errorf("after DestroyShard(%d): seq %d, log %d entries; want 0, 0", id, s.Seq(), countLog(t, s))
		}
		if n, err := s.CountKeys(rootSpan(2)); err != nil || n != 20 {
			t.Errorf("after DestroyShard(%d): %d documents in the span (%v), want the 20 the span's owner holds", id, n, err)
		}
	}
	// A shard of an engine with no store at all: nothing to remove.
	empty := openTestEngine(t, vfs.NewMem(), LayoutShared)
	defer empty.Close()
	if err := empty.DestroyShard(3); err != nil {
		t.Fatalf("DestroyShard on an engine without a store: %v", err)
	}
}

// ReadFile says "no file" only when the file does not exist: an I/O error
// opening it, even one whose stat fails too, is an error, so an unreadable
// TABLE never makes recovery start a new index.
func TestReadFileIOErrorIsNotAbsence(t *testing.T) {
	var fail atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if fail.Load() && op.Path == "/data/TABLE" && (op.Kind == errorfs.OpOpen || op.Kind == errorfs.OpStat) {
			return errInjected
		}
		return nil
	})
	e := openTestEngine(t, errorfs.Wrap(vfs.NewMem(), inj), LayoutPerShard)
	defer e.Close()
	if _, ok, err := e.ReadFile("TABLE"); ok || err != nil {
		t.Fatalf("ReadFile of a missing file = ok %v, %v; want false, nil", ok, err)
	}
	if err := e.WriteFileAtomic("TABLE", []byte("t")); err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	if _, ok, err := e.ReadFile("TABLE"); ok || !errors.Is(err, errInjected) {
		t.Fatalf("ReadFile with an I/O error on open = ok %v, %v; want false, the injected error", ok, err)
	}
	fail.Store(false)
	if data, ok, err := e.ReadFile("TABLE"); !ok || err != nil || string(data) != "t" {
		t.Fatalf("ReadFile = %q, %v, %v; want \"t\", true, nil", data, ok, err)
	}
}

// countingFail fails the k-th operation (1-based) that match accepts once
// armed, and counts how many it saw.
type countingFail struct {
	armed atomic.Bool
	k     int64
	seen  atomic.Int64
	hit   atomic.Bool
	match func(errorfs.Op) bool
}

func (c *countingFail) String() string { return "countingFail" }

func (c *countingFail) MaybeError(op errorfs.Op) error {
	if !c.armed.Load() || !c.match(op) {
		return nil
	}
	if c.seen.Add(1) == c.k {
		c.hit.Store(true)
		return errInjected
	}
	return nil
}

// A child whose creation fails after the checkpoint (opening its store,
// trimming it, reading its sequence number) leaves no directory and no open
// store behind, so the next CreateChild with the same id succeeds. A
// directory left behind would poison the id: every later split would fail
// with "already exists".
//
// The test fails, in turn, the k-th read-side operation (open, stat, list,
// read, lock) on the child's directory from the moment its store is locked,
// for k = 1, 2, … until a creation runs through without reaching the k-th.
// Write-side failures are left out: Pebble treats a failed MANIFEST or WAL
// write as fatal.
func TestCreateChildCleansUpAfterAFailure(t *testing.T) {
	const child = 9
	childDir := "/data/shard-9"
	inj := &countingFail{}
	locked := atomic.Bool{}
	inj.match = func(op errorfs.Op) bool {
		if !strings.HasPrefix(op.Path, childDir+"/") {
			return false
		}
		if op.Kind == errorfs.OpLock {
			locked.Store(true)
			return true
		}
		return locked.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsRead
	}
	fs := errorfs.Wrap(vfs.NewMem(), inj)
	e := openTestEngine(t, fs, LayoutPerShard)
	defer e.Close()
	parent := openShard(t, e, 2, 2, rootSpan(2))
	ids := idsInRoot(2, 400)
	for i, id := range ids {
		if _, err := parent.Write([]Op{opFor(id, OpIndex, "v")}, nil); err != nil {
			t.Fatal(err)
		}
		if i == 199 { // half in tables, half in the WAL
			if err := parent.st.db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	parent.HoldLog()
	span := routing.Span{Start: rootSpan(2).Start + 64, End: rootSpan(2).End}
	want, err := parent.CountKeys(span)
	if err != nil {
		t.Fatal(err)
	}

	failures := 0
	for k := int64(1); k <= 1000; k++ {
		inj.k = k
		inj.seen.Store(0)
		inj.hit.Store(false)
		locked.Store(false)
		inj.armed.Store(true)
		c, _, err := e.CreateChild(parent, child, span)
		inj.armed.Store(false)
		if err == nil {
			if inj.hit.Load() {
				// The injected read failed in a background goroutine and
				// Pebble coped. The child must still be whole.
				t.Logf("k=%d: injected, creation succeeded", k)
			}
		} else {
			if !errors.Is(err, errInjected) {
				t.Fatalf("k=%d: CreateChild = %v, want the injected error", k, err)
			}
			failures++
			if errors.Is(err, ErrExciseUnverified) {
				// A read failed while the trim's excise ran: the child is
				// thrown away and the retry below must be whole.
				t.Logf("k=%d: the excise was refused: %v", k, err)
			}
			if _, statErr := fs.Stat(childDir); statErr == nil {
				t.Fatalf("k=%d: CreateChild failed (%v) and left %s behind", k, err, childDir)
			}
			if _, ok := e.Shard(child); ok {
				t.Fatalf("k=%d: CreateChild failed (%v) and left shard %d registered", k, err, child)
			}
			if c, _, err = e.CreateChild(parent, child, span); err != nil {
				t.Fatalf("k=%d: CreateChild after a failed one: %v", k, err)
			}
		}
		if n, err := c.CountKeys(span); err != nil || n != want {
			t.Fatalf("k=%d: child holds %d documents (%v), want %d", k, n, err, want)
		}
		if err := e.DestroyShard(child); err != nil {
			t.Fatal(err)
		}
		if !inj.hit.Load() {
			t.Logf("%d operations counted; %d injected failures failed the creation", inj.seen.Load(), failures)
			if failures == 0 {
				t.Fatal("no injected failure failed a creation: the test tests nothing")
			}
			return
		}
	}
	t.Fatal("the creation never ran through without reaching the injected operation")
}
