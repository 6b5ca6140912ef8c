package storage

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/routing"
)

// Review s21: storage/ as an adversary sees it.

// closeDuring runs op on a goroutine; op calls block() at the point the
// race is wanted. Once op is there the engine is closed; op is let go
// after Close returned or 100 ms passed (Close may wait for it). It
// returns Close's error, op's error and whatever op panicked with.
func closeDuring(t *testing.T, e *Engine, op func(block func()) error) (closeErr, opErr error, panicked any) {
	t.Helper()
	at, release := make(chan struct{}), make(chan struct{})
	blocked := false
	block := func() {
		if !blocked {
			blocked = true
			close(at)
			<-release
		}
	}
	type result struct {
		err error
		p   any
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{nil, p}
			}
		}()
		err := op(block)
		done <- result{err, nil}
	}()
	select {
	case <-at:
	case r := <-done:
		t.Fatalf("op ended (%v, panic %v) before reaching its blocking point", r.err, r.p)
	}
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	waited := false
	select {
	case closeErr = <-closed:
	case <-time.After(100 * time.Millisecond):
		waited = true // Close waits for op: allowed
	}
	close(release)
	r := <-done
	if waited {
		closeErr = <-closed
	}
	return closeErr, r.err, r.p
}

// A catch-up reading the parent's operation log while the engine closes:
// LogSince's iterator was not registered with its store, so the close did
// not wait for it. Close must return nil and the read must either finish
// or stop with ErrShardClosed, never read a closed Pebble.
func TestReviewS21LogSinceRacingClose(t *testing.T) {
	e, err := Open(Options{Dir: "/data", FS: vfs.NewMem(), CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.OpenShard(0, 0, []routing.Span{{Start: 0, End: 64}})
	if err != nil {
		t.Fatal(err)
	}
	s.HoldLog()
	const n = 200
	for i := range n {
		if _, err := s.Write([]Op{{Kind: OpIndex, Key: routing.Key(i % 64), ID: fmt.Sprintf("d%d", i), Source: []byte("v")}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.st.db.Flush(); err != nil { // the log in a table: its reader is the file cache's
		t.Fatal(err)
	}
	seen := 0
	closeErr, opErr, p := closeDuring(t, e, func(block func()) error {
		return s.LogSince(0, s.Seq(), nil, func(LogEntry) error {
			block()
			seen++
			return nil
		})
	})
	if p != nil {
		t.Fatalf("LogSince racing Close panicked: %v", p)
	}
	if closeErr != nil {
		t.Errorf("Close while the log is read = %v, want nil", closeErr)
	}
	if opErr != nil && !errors.Is(opErr, ErrShardClosed) {
		t.Errorf("LogSince racing Close = %v, want nil or ErrShardClosed", opErr)
	}
	if opErr == nil && seen != n {
		t.Errorf("LogSince racing Close read %d entries and no error, want %d", seen, n)
	}
}

// LogSince on a closed engine answers ErrShardClosed; it reached Pebble,
// which panics on a closed DB.
func TestReviewS21LogSinceAfterClose(t *testing.T) {
	e, err := Open(Options{Dir: "/data", FS: vfs.NewMem(), CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.OpenShard(0, 0, []routing.Span{{Start: 0, End: 64}})
	if err != nil {
		t.Fatal(err)
	}
	s.HoldLog()
	if _, err := s.Write([]Op{{Kind: OpIndex, Key: 1, ID: "a", Source: []byte("v")}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	err = func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
			}
		}()
		return s.LogSince(0, s.Seq(), nil, func(LogEntry) error { return nil })
	}()
	if !errors.Is(err, ErrShardClosed) {
		t.Errorf("LogSince after Close = %v, want ErrShardClosed", err)
	}
}

// createHookFS calls onCreate (if set) before every file it creates.
type createHookFS struct {
	vfs.FS
	onCreate func(name string)
}

func (f *createHookFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if f.onCreate != nil {
		f.onCreate(name)
	}
	return f.FS.Create(name, category)
}

// reviewMergeSources opens two adjacent sources of root 2 on e, the first the
// larger (so the second is copied by buildSource), flushed and holding
// their logs.
func reviewMergeSources(t *testing.T, e *Engine) (a, b *Shard) {
	t.Helper()
	lo, hi := routing.Span{Start: 256, End: 320}, routing.Span{Start: 320, End: 384}
	a, _ = e.OpenShard(9, 2, []routing.Span{lo})
	b, _ = e.OpenShard(10, 2, []routing.Span{hi})
	nb := 0
	for i, id := range idsInRoot(2, 600) {
		op := opFor(id, OpIndex, fmt.Sprintf("v-%d", i))
		s := a
		if hi.Contains(op.Key) {
			if nb++; nb > 50 {
				continue
			}
			s = b
		}
		if _, err := s.Write([]Op{op}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []*Shard{a, b} {
		if err := s.st.db.Flush(); err != nil {
			t.Fatal(err)
		}
		s.HoldLog()
	}
	return a, b
}

// A merge target's copied side is read from a snapshot of each source
// (buildSource) that was not registered with the source's store: an
// engine closing meanwhile closed the source under it. Close must return
// nil, and the merge must fail with ErrShardClosed or succeed, without a
// panic.
func TestReviewS21MergeCopyRacingClose(t *testing.T) {
	fs := &createHookFS{FS: vfs.NewMem()}
	e, err := Open(Options{Dir: "/data", FS: fs, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	a, b := reviewMergeSources(t, e)
	closeErr, opErr, p := closeDuring(t, e, func(block func()) error {
		fs.onCreate = func(name string) {
			if strings.Contains(name, mergeTableDir) {
				block() // buildSource is writing a table, its snapshot and iterator open
			}
		}
		_, _, err := e.CreateMergeTarget([]*Shard{a, b}, 11, routing.Span{Start: 256, End: 384})
		return err
	})
	if p != nil {
		t.Fatalf("a merge target's copy racing Close panicked: %v", p)
	}
	if closeErr != nil {
		t.Errorf("Close while a merge copies a source = %v, want nil", closeErr)
	}
	if opErr != nil && !errors.Is(opErr, ErrShardClosed) {
		t.Errorf("CreateMergeTarget racing Close = %v, want nil or ErrShardClosed", opErr)
	}
}

// A catch-up applying log entries to a child while the engine closes:
// ApplyLog checked the shard's closed flag under its apply lock, but
// Engine.Close sets that flag without the lock and closes the store
// without waiting for the apply, which had not entered the store's gate.
// Holding the span lock stands in for the scheduler pausing ApplyLog
// after its check (a handoff's SetOwned holds it the same way).
func TestReviewS21ApplyLogRacingClose(t *testing.T) {
	e, err := Open(Options{Dir: "/data", FS: vfs.NewMem(), CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.OpenShard(0, 0, []routing.Span{{Start: 0, End: 64}})
	if err != nil {
		t.Fatal(err)
	}
	s.ownMu.Lock()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("panic: %v", p)
			}
		}()
		done <- s.ApplyLog([]LogEntry{{Seq: 7, Op: Op{Kind: OpIndex, Key: 1, ID: "a", Source: []byte("v")}}})
	}()
	time.Sleep(20 * time.Millisecond) // ApplyLog is past its closed check, waiting for the span lock
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close = %v", err)
		}
		s.ownMu.Unlock()
	case <-time.After(100 * time.Millisecond): // Close waits for the apply: allowed
		s.ownMu.Unlock()
		if err := <-closed; err != nil {
			t.Errorf("Close = %v", err)
		}
	}
	if err := <-done; err != nil && !errors.Is(err, ErrShardClosed) {
		t.Errorf("ApplyLog racing Close = %v, want nil or ErrShardClosed", err)
	}
}

// reviewParent opens shard 0 of root 0 with documents in tables and in
// its memtable, its log held (as a split holds it before its children).
func reviewParent(t *testing.T, e *Engine) *Shard {
	t.Helper()
	s, err := e.OpenShard(0, 0, []routing.Span{rootSpan(0)})
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range idsInRoot(0, 300) {
		if _, err := s.Write([]Op{opFor(id, OpIndex, "v")}, nil); err != nil {
			t.Fatal(err)
		}
		if i == 200 {
			if err := s.st.db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.HoldLog()
	return s
}

// A child's checkpoint of its parent while the engine closes: the
// checkpoint did not pass the parent's gate, so the close closed the
// parent under it (it holds a version of the parent's tables).
func TestReviewS21CheckpointRacingClose(t *testing.T) {
	fs := &createHookFS{FS: vfs.NewMem()}
	childCreationRacingClose(t, fs, "a checkpoint", func(childDir string, block func()) {
		fs.onCreate = func(name string) {
			if strings.HasPrefix(name, childDir+"/") {
				block() // the checkpoint is writing the child's files
			}
		}
	})
}

// childCreationRacingClose makes a child of reviewParent's parent on an
// engine over fs while the engine closes, at the instant arm's hook calls
// block, and checks that neither panics, the close succeeds, the creation
// fails, and the child's directory is removed.
func childCreationRacingClose(t *testing.T, fs vfs.FS, what string, arm func(childDir string, block func())) {
	t.Helper()
	e, err := Open(Options{Dir: "/data", FS: fs, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	parent := reviewParent(t, e)
	childDir := e.ShardDir(1)
	closeErr, opErr, p := closeDuring(t, e, func(block func()) error {
		arm(childDir, block)
		_, _, err := e.CreateChildren(parent, []ChildSpec{{Shard: 1, Span: routing.Span{Start: 0, End: 64}}}, ChildExcise, false)
		return err
	})
	if p != nil {
		t.Fatalf("%s racing Close panicked: %v", what, p)
	}
	if closeErr != nil {
		t.Errorf("Close during %s = %v, want nil", what, closeErr)
	}
	if opErr == nil {
		t.Errorf("CreateChildren racing Close succeeded on a closed engine")
	}
	if _, err := fs.Stat(childDir); err == nil {
		t.Errorf("the failed child's directory %s is left", childDir)
	}
}

// A child made of a parent on a closed engine fails with an error; it
// reached the parent's closed Pebble, which panics.
func TestReviewS21CreateChildAfterClose(t *testing.T) {
	for _, copyWAL := range []bool{false, true} {
		t.Run(fmt.Sprintf("copyWAL=%v", copyWAL), func(t *testing.T) {
			fs := vfs.NewMem()
			e, err := Open(Options{Dir: "/data", FS: fs, CacheBytes: 1 << 20, CopyChildWAL: copyWAL})
			if err != nil {
				t.Fatal(err)
			}
			parent := reviewParent(t, e)
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			err = func() (err error) {
				defer func() {
					if p := recover(); p != nil {
						err = fmt.Errorf("panic: %v", p)
					}
				}()
				_, _, err = e.CreateChildren(parent, []ChildSpec{{Shard: 1, Span: routing.Span{Start: 0, End: 64}}}, ChildExcise, false)
				return err
			}()
			if !errors.Is(err, ErrShardClosed) {
				t.Errorf("CreateChildren after Close = %v, want ErrShardClosed", err)
			}
			if _, err := fs.Stat(e.ShardDir(1)); err == nil {
				t.Errorf("the failed child's directory is left")
			}
		})
	}
}

// openHookFS calls onOpen (if set) before every file it opens for reading.
type openHookFS struct {
	vfs.FS
	onOpen func(name string)
}

func (f *openHookFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	if f.onOpen != nil {
		f.onOpen(name)
	}
	return f.FS.Open(name, opts...)
}

// onStack reports whether the calling goroutine is inside fn.
func onStack(fn string) bool {
	buf := make([]byte, 64<<10)
	return strings.Contains(string(buf[:runtime.Stack(buf, false)]), fn)
}

// A child's store being trimmed to its span while the engine closes: the
// store was registered with the engine as soon as it opened, so the close
// closed it under the excise.
func TestReviewS21ChildTrimRacingClose(t *testing.T) {
	fs := &openHookFS{FS: vfs.NewMem()}
	childCreationRacingClose(t, fs, "a child's trim", func(childDir string, block func()) {
		fs.onOpen = func(name string) {
			if strings.HasPrefix(name, childDir+"/") && onStack("storage.trimChildStore") {
				block() // the excise reads a table it cuts
			}
		}
	})
}

// Every operation of a shard whose store is gone (the engine closed, or
// the shard destroyed) answers an error or nothing; none reaches a closed
// Pebble, which panics. A caller holding a stale *Shard (a split driver
// beside a node's close, a statistics tick beside a retirement) must not
// kill the process.
func TestReviewS21EveryOperationAfterClose(t *testing.T) {
	for _, how := range []string{"close", "destroy"} {
		forLayouts(t, func(t *testing.T, layout Layout) {
			t.Run(how, func(t *testing.T) {
				fs := vfs.NewMem()
				e := openTestEngine(t, fs, layout)
				defer e.Close()
				s, err := e.OpenShard(0, 0, []routing.Span{rootSpan(0)})
				if err != nil {
					t.Fatal(err)
				}
				other, err := e.OpenShard(1, 1, []routing.Span{rootSpan(1)})
				if err != nil {
					t.Fatal(err)
				}
				s.HoldLog()
				s.HoldLog()
				id := idsInRoot(0, 1)[0]
				if _, err := s.Write([]Op{opFor(id, OpIndex, "v")}, nil); err != nil {
					t.Fatal(err)
				}
				if how == "close" {
					err = e.Close()
				} else {
					err = e.DestroyShard(0)
				}
				if err != nil {
					t.Fatal(err)
				}
				op := opFor(id, OpIndex, "w")
				nop := func(Doc) error { return nil }
				calls := []struct {
					name string
					fn   func() error
				}{
					{"Write", func() error { _, err := s.Write([]Op{op}, nil); return err }},
					{"Get", func() error { _, _, err := s.Get(op.Root, op.Key, id); return err }},
					{"Scan", func() error { return s.Scan(nop) }},
					{"ScanSpan", func() error { return s.ScanSpan(rootSpan(0), nop) }},
					{"CountKeys", func() error { _, err := s.CountKeys(rootSpan(0)); return err }},
					{"ReleaseLog", func() error { return s.ReleaseLog() }},
					{"LogSince", func() error { return s.LogSince(0, s.Seq(), nil, func(LogEntry) error { return nil }) }},
					{"ApplyLog", func() error { return s.ApplyLog([]LogEntry{{Seq: s.Seq() + 1, Op: op}}) }},
					{"RaiseSeq", func() error { return s.RaiseSeq(s.Seq() + 10) }},
					{"Backlog", func() error { _, err := s.Backlog(); return err }},
					{"Sync", func() error { return s.Sync() }},
					{"TrimLog", func() error { return s.TrimLog() }},
					{"ForeignPending", func() error { _, err := s.ForeignPending(); return err }},
					{"ForeignDocs", func() error { _, err := s.ForeignDocs(); return err }},
					{"EstimateSize", func() error { _, err := s.EstimateSize(); return err }},
					{"DeleteForeign", func() error { _, err := s.DeleteForeign(func(Doc) bool { return true }); return err }},
					{"TrimToOwned", func() error { _, err := s.TrimToOwned(); return err }},
					{"CopyFrom", func() error { _, err := other.CopyFrom(s); return err }},
					{"CatchUp", func() error { _, _, err := e.CatchUp(s, []*Shard{other}, 0); return err }},
					{"DropSpans", func() error { return e.DropSpans(s, []routing.Span{{Start: 0, End: 1}}, DropExcise) }},
					{"AwaitOwnFlush", func() error { _, _, err := e.AwaitOwnFlush(s, time.Millisecond); return err }},
					{"StartForeignCleanup", func() error { _, err := e.StartForeignCleanup(s); return err }},
					{"CreateChild", func() error { _, _, err := e.CreateChild(s, 5, routing.Span{Start: 0, End: 64}); return err }},
					{"CreateMergeTarget", func() error {
						_, _, err := e.CreateMergeTarget([]*Shard{s, s}, 6, rootSpan(0))
						return err
					}},
					{"ReleaseCompactions", func() error { s.ReleaseCompactions(); return nil }},
					{"HoldCompactions", func() error { e.HoldCompactions(s); return nil }},
				}
				for _, c := range calls {
					func() {
						defer func() {
							if p := recover(); p != nil {
								t.Errorf("%s after %s panicked: %v", c.name, how, p)
							}
						}()
						_ = c.fn()
					}()
				}
			})
		})
	}
}

// categoryHookFS calls onCreate (if set) before every file it creates,
// with the file's write category.
type categoryHookFS struct {
	vfs.FS
	onCreate func(name string, category vfs.DiskWriteCategory)
}

func (f *categoryHookFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if h := f.onCreate; h != nil {
		h(name, category)
	}
	return f.FS.Create(name, category)
}

// A forced flush (a split's, before its checkpoints) queued behind the
// store's own flush when the store closes: Pebble's close waits for the
// running flush but schedules no other, so the queued memtable is never
// flushed and store.flush, which waited only for its flush or a failure,
// waited for good (a split's goroutine stuck beside a node's close).
func TestReviewS21FlushQueuedAtCloseEnds(t *testing.T) {
	fs := &categoryHookFS{FS: vfs.NewMem()}
	e, err := Open(Options{Dir: "/data", FS: fs, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.OpenShard(0, 0, []routing.Span{rootSpan(0)})
	if err != nil {
		t.Fatal(err)
	}
	ids := idsInRoot(0, 200)
	for _, id := range ids[:100] {
		if _, err := s.Write([]Op{opFor(id, OpIndex, "v")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	at, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fs.onCreate = func(name string, category vfs.DiskWriteCategory) {
		if category == flushWriteCategory {
			once.Do(func() { close(at); <-release })
		}
	}
	if _, err := s.st.db.AsyncFlush(); err != nil { // the store's own flush
		t.Fatal(err)
	}
	<-at
	for _, id := range ids[100:] {
		if _, err := s.Write([]Op{opFor(id, OpIndex, "v")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	flushed := make(chan error, 1)
	go func() { flushed <- s.st.flush() }()
	for s.st.db.Metrics().MemTable.Count < 3 { // rotated: queued behind the running flush
		time.Sleep(time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	time.Sleep(20 * time.Millisecond) // Close waits for the running flush
	close(release)
	if err := <-closed; err != nil {
		t.Errorf("Close = %v", err)
	}
	select {
	case err := <-flushed:
		if err != nil && !errors.Is(err, ErrShardClosed) {
			t.Errorf("flush queued at close = %v, want nil or ErrShardClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("a flush queued when the store closed still waits 5 s after the close")
	}
}

// A shard owning several spans given out of order (OpenShard and SetOwned
// take them as given; buildSource sorts them, foreignRanges assumed them
// sorted): trimming it to what it owns excised the documents it owns.
func TestReviewS21TrimToOwnedWithSpansOutOfOrder(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	owned := []routing.Span{{Start: 64, End: 96}, {Start: 0, End: 32}} // of root 0
	s, err := e.OpenShard(0, 0, []routing.Span{rootSpan(0)})
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, id := range idsInRoot(0, 400) {
		op := opFor(id, OpIndex, "v")
		if inSpans(owned, op.Key) {
			want++
		}
		if _, err := s.Write([]Op{op}, nil); err != nil {
			t.Fatal(err)
		}
	}
	s.SetOwned(owned)
	if _, err := s.TrimToOwned(); err != nil {
		t.Fatal(err)
	}
	got := 0
	if err := s.Scan(func(Doc) error { got++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n, err := s.ForeignDocs(); err != nil || n != 0 || got != want {
		t.Errorf("after TrimToOwned: %d owned documents (want %d), %d foreign (%v; want 0)", got, want, n, err)
	}
}

// A split's flush decision (flushForCheckpoint) read the parent's Pebble
// metrics outside the store's gate: beside a close they read the engine's
// file cache while Engine.Close released it (a data race the race
// detector reports: CI runs -race). Run with -race.
func TestReviewS21SplitFlushDecisionRacingClose(t *testing.T) {
	for i := range 20 {
		e, err := Open(Options{Dir: "/data", FS: vfs.NewMem(), CacheBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		s, err := e.OpenShard(0, 0, []routing.Span{rootSpan(0)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write([]Op{opFor(idsInRoot(0, 1)[0], OpIndex, "v")}, nil); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			time.Sleep(time.Duration(i%4) * 100 * time.Microsecond) // no synchronisation with the close: it races
			_, _, _, err := e.flushForCheckpoint(s, true)
			done <- err
		}()
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil && !errors.Is(err, ErrShardClosed) {
			t.Errorf("a split's flush after close = %v, want nil or ErrShardClosed", err)
		}
	}
}

// reviewMergeShard opens shard id of keyspace 7 owning sp, with n
// documents per routing key (ids "a", "b", …), flushed and holding its log.
func reviewMergeShard(t *testing.T, e *Engine, id routing.ShardID, sp routing.Span, n int) *Shard {
	t.Helper()
	s, err := e.OpenShard(id, 7, []routing.Span{sp})
	if err != nil {
		t.Fatal(err)
	}
	for k := sp.Start; k < sp.End; k++ {
		for j := range n {
			if _, err := s.Write([]Op{{Kind: OpIndex, Root: 7, Key: routing.Key(k), ID: string(rune('a' + j)), Source: make([]byte, 100)}}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.st.db.Flush(); err != nil {
		t.Fatal(err)
	}
	s.HoldLog()
	return s
}

// A merge target takes its sources' documents by checkpoint and ingest,
// past the span check every write passes (INV-6): given a span that does
// not hold a source's span, or sources that overlap, it was made anyway,
// holding documents it does not own (no marker excuses them, INV-10) or
// two sources' versions of one document, one of them silently dropped.
func TestReviewS21MergeTargetRefusesSourcesItCannotHold(t *testing.T) {
	for _, c := range []struct {
		name    string
		sources []routing.Span
		target  routing.Span
	}{
		{"a source outside the target", []routing.Span{{Start: 0, End: 10}, {Start: 10, End: 20}}, routing.Span{Start: 0, End: 15}},
		{"the largest overlapping another", []routing.Span{{Start: 0, End: 10}, {Start: 5, End: 15}}, routing.Span{Start: 0, End: 15}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
			defer e.Close()
			var sources []*Shard
			for i, sp := range c.sources {
				n := 1
				if i == 0 {
					n = 5 // the largest: its checkpoint is the target's base
				}
				sources = append(sources, reviewMergeShard(t, e, routing.ShardID(10+i), sp, n))
			}
			tg, _, err := e.CreateMergeTarget(sources, 99, c.target)
			if err == nil {
				n, _ := tg.ForeignDocs()
				t.Fatalf("CreateMergeTarget(%v into %s) made a target (%d documents outside its span), want an error", c.sources, c.target, n)
			}
			if _, statErr := e.opts.FS.Stat(e.ShardDir(99)); statErr == nil {
				t.Errorf("the refused target's directory is left")
			}
		})
	}
}

// A catch-up replays the parent's writes after S from its operation log,
// and the log has them only while a hold taken at or before S lasts
// (INV-8). CatchUp did not check: with the log not held, or held again
// only after S (a hold released and retaken), it replayed nothing of the
// gap and returned success, and the child silently lacked acknowledged
// writes.
func TestReviewS21CatchUpRefusesAGapInTheLog(t *testing.T) {
	for _, c := range []string{"never held", "held again after S"} {
		t.Run(c, func(t *testing.T) {
			e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
			defer e.Close()
			parent, err := e.OpenShard(0, 0, []routing.Span{rootSpan(0)})
			if err != nil {
				t.Fatal(err)
			}
			ids := idsInRoot(0, 60)
			for _, id := range ids[:20] {
				if _, err := parent.Write([]Op{opFor(id, OpIndex, "v")}, nil); err != nil {
					t.Fatal(err)
				}
			}
			if c != "never held" {
				parent.HoldLog()
			}
			child, stats, err := e.CreateChild(parent, 1, rootSpan(0))
			if err != nil {
				t.Fatal(err)
			}
			if c != "never held" {
				if err := parent.ReleaseLog(); err != nil {
					t.Fatal(err)
				}
			}
			for _, id := range ids[20:40] { // logged by no one
				if _, err := parent.Write([]Op{opFor(id, OpIndex, "v")}, nil); err != nil {
					t.Fatal(err)
				}
			}
			if c != "never held" {
				parent.HoldLog()
			}
			for _, id := range ids[40:] {
				if _, err := parent.Write([]Op{opFor(id, OpIndex, "v")}, nil); err != nil {
					t.Fatal(err)
				}
			}
			_, n, err := e.CatchUp(parent, []*Shard{child}, stats.Seq)
			if err == nil {
				got, _ := child.CountKeys(rootSpan(0))
				t.Fatalf("CatchUp from S=%d with the log %s = %d applied, no error; the child holds %d of %d documents", stats.Seq, c, n, got, len(ids))
			}
		})
	}
}

// The handoff replays the tail with the parent fenced (its apply lock
// held by the driver): CatchUp's check of the log must not take that lock.
func TestReviewS21CatchUpOfAFencedParent(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	parent, err := e.OpenShard(0, 0, []routing.Span{rootSpan(0)})
	if err != nil {
		t.Fatal(err)
	}
	ids := idsInRoot(0, 40)
	parent.HoldLog()
	child, stats, err := e.CreateChild(parent, 1, rootSpan(0))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := parent.Write([]Op{opFor(id, OpIndex, "v")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := parent.Fence(time.Second); err != nil {
		t.Fatal(err)
	}
	defer parent.Unfence()
	done := make(chan error, 1)
	go func() { _, _, err := e.CatchUp(parent, []*Shard{child}, stats.Seq); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("CatchUp of a fenced parent still runs after 5 s")
	}
	if n, err := child.CountKeys(rootSpan(0)); err != nil || n != len(ids) {
		t.Errorf("child holds %d documents (%v), want %d", n, err, len(ids))
	}
}

// In the shared layout a shard's destruction (a split's cleanup retiring
// its parent, a cancel destroying its children) and a roll-back's
// sequence-number raise write to the node's one store, which they looked
// up and then used outside its gate: an Engine.Close beside them closed
// it in between, and Pebble panicked ("pebble: closed", "pebble/record:
// closed LogWriter"). A race, so many rounds.
func TestReviewS21SharedDestroyRacingClose(t *testing.T) {
	for round := range 500 {
		e, err := Open(Options{Dir: "/data", FS: vfs.NewMem(), CacheBytes: 1 << 20, Layout: LayoutShared})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 4 {
			s, err := e.OpenShard(routing.ShardID(i), 0, []routing.Span{rootSpan(0)})
			if err != nil {
				t.Fatal(err)
			}
			s.HoldLog()
			if _, err := s.Write([]Op{opFor(idsInRoot(0, 1)[0], OpIndex, "v")}, nil); err != nil {
				t.Fatal(err)
			}
		}
		done := make(chan any, 4)
		for i := range 4 {
			go func() {
				defer func() { done <- recover() }()
				time.Sleep(time.Duration(round%5) * 20 * time.Microsecond)
				_ = e.DestroyShard(routing.ShardID(i))
				_ = e.RaiseSeqTo(routing.ShardID(i), []routing.ShardID{9})
			}()
		}
		if err := e.Close(); err != nil {
			t.Errorf("round %d: close: %v", round, err)
		}
		for range 4 {
			if p := <-done; p != nil {
				t.Fatalf("round %d: a destruction racing Close panicked: %v", round, p)
			}
		}
	}
}

// A close (or the parent's destruction, then the close) at a random
// instant beside every kind of work on a parent: writes, reads, scans, log
// reads, size and backlog reads, syncs, flush waits, splits with catch-up
// (both builds), merges. Nothing may panic and Close must return nil.
// Coverage for the gates above; it found the metrics race
// (TestReviewS21SplitFlushDecisionRacingClose).
func TestReviewS21CloseStorm(t *testing.T) {
	for round := range 16 {
		for _, layout := range []Layout{LayoutPerShard, LayoutShared} {
			retire := round%2 == 1
			e, err := Open(Options{Dir: "/data", FS: vfs.NewMem(), CacheBytes: 1 << 20, Layout: layout})
			if err != nil {
				t.Fatal(err)
			}
			p, err := e.OpenShard(0, 0, []routing.Span{rootSpan(0)})
			if err != nil {
				t.Fatal(err)
			}
			ids := idsInRoot(0, 300)
			for _, id := range ids[:150] {
				if _, err := p.Write([]Op{opFor(id, OpIndex, "v")}, nil); err != nil {
					t.Fatal(err)
				}
			}
			p.HoldLog()
			var wg sync.WaitGroup
			stop := make(chan struct{})
			run := func(name string, fn func(i int) error) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() {
						if r := recover(); r != nil {
							t.Errorf("round %d %v: %s panicked: %v", round, layout, name, r)
						}
					}()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						if err := fn(i); err != nil {
							if errors.Is(err, ErrShardClosed) {
								return
							}
							_ = err
						}
					}
				}()
			}
			run("write", func(i int) error {
				_, err := p.Write([]Op{opFor(ids[i%len(ids)], OpIndex, "w")}, nil)
				return err
			})
			run("scan", func(int) error { return p.Scan(func(Doc) error { return nil }) })
			run("logsince", func(int) error {
				return p.LogSince(0, p.Seq(), nil, func(LogEntry) error { return nil })
			})
			run("estimate", func(int) error { _, err := p.EstimateSize(); return err })
			run("backlog", func(int) error { _, err := p.Backlog(); return err })
			run("sync", func(int) error { return p.Sync() })
			run("align", func(int) error { _, _, err := e.AwaitOwnFlush(p, time.Millisecond); return err })
			run("get", func(i int) error {
				op := opFor(ids[i%len(ids)], OpIndex, "")
				_, _, err := p.Get(op.Root, op.Key, op.ID)
				return err
			})
			run("merge", func(i int) error {
				a, err := e.OpenShard(routing.ShardID(5000+2*i), 7, []routing.Span{{Start: 0, End: 10}})
				if err != nil {
					return err
				}
				b, err := e.OpenShard(routing.ShardID(5001+2*i), 7, []routing.Span{{Start: 10, End: 20}})
				if err != nil {
					return err
				}
				_, _ = a.Write([]Op{{Kind: OpIndex, Root: 7, Key: 1, ID: "x", Source: []byte("v")}}, nil)
				_, _ = b.Write([]Op{{Kind: OpIndex, Root: 7, Key: 11, ID: "y", Source: []byte("v")}}, nil)
				a.HoldLog()
				b.HoldLog()
				tg, _, err := e.CreateMergeTarget([]*Shard{a, b}, routing.ShardID(9000+i), routing.Span{Start: 0, End: 20})
				if tg != nil {
					_ = e.DestroyShard(tg.ID())
				}
				_ = e.DestroyShard(a.ID())
				_ = e.DestroyShard(b.ID())
				if err != nil && e.isClosed() {
					return ErrShardClosed
				}
				return nil
			})
			run("keepall", func(i int) error {
				id := routing.ShardID(20000 + i)
				cs, _, err := e.CreateChildren(p, []ChildSpec{{Shard: id, Span: routing.Span{Start: 0, End: 64}}}, ChildKeepAll, false)
				for _, c := range cs {
					if c != nil {
						_, _ = e.StartForeignCleanup(c)
						_, _ = c.ForeignDocs()
						_ = e.DestroyShard(c.ID())
					}
				}
				if err != nil && (e.isClosed() || errors.Is(err, ErrShardClosed)) {
					return ErrShardClosed
				}
				return nil
			})
			run("split", func(i int) error {
				id := routing.ShardID(100 + i)
				cs, _, err := e.CreateChildren(p, []ChildSpec{{Shard: id, Span: routing.Span{Start: 0, End: 64}}, {Shard: id + 1000, Span: routing.Span{Start: 64, End: 128}}}, ChildExcise, i%2 == 0)
				for _, c := range cs {
					if c != nil {
						if _, _, err := e.CatchUp(p, []*Shard{c}, 0); err != nil && !errors.Is(err, ErrShardClosed) {
							_ = err
						}
						_ = c.RaiseSeq(p.Seq())
						_ = e.DestroyShard(c.ID())
					}
				}
				if err != nil && errors.Is(err, ErrShardClosed) {
					return err
				}
				if err != nil && e.isClosed() {
					return ErrShardClosed
				}
				return nil
			})
			time.Sleep(time.Duration(round%7+1) * time.Millisecond)
			if retire {
				if err := e.DestroyShard(0); err != nil {
					t.Errorf("round %d %v: destroy: %v", round, layout, err)
				}
				time.Sleep(2 * time.Millisecond)
			}
			if err := e.Close(); err != nil {
				t.Errorf("round %d %v: close: %v", round, layout, err)
			}
			close(stop)
			wg.Wait()
		}
	}
}

func (e *Engine) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}
