package storage

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/routing"
)

// Closing the engine while writes are in flight: each write either
// completes or answers ErrShardClosed; none may reach a closed Pebble (it
// panicked with "pebble/record: closed LogWriter", killing the simulation's
// test binary once in 3000 seeds).
func TestCloseWhileWriting(t *testing.T) {
	for round := range 30 {
		e := openEngine(t, Options{})
		s := openShard(t, e, 0, 0, routing.Span{Start: 0, End: 64})
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					_, err := s.Write([]Op{{Kind: OpIndex, Key: routing.Key(i % 64), ID: fmt.Sprintf("w%d-%d", w, i), Source: []byte("v")}}, nil)
					if errors.Is(err, ErrShardClosed) {
						return
					}
					if err != nil {
						t.Errorf("round %d: write: %v", round, err)
						return
					}
				}
			}()
		}
		time.Sleep(2 * time.Millisecond)
		if err := e.Close(); err != nil {
			t.Fatalf("round %d: close: %v", round, err)
		}
		wg.Wait()
	}
}

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
// LogSince's iterator is registered with its store, so the close waits for
// it or stops it. Close must return nil and the read must either finish or
// stop with ErrShardClosed, never read a closed Pebble.
func TestLogSinceRacingCloseFinishesOrStops(t *testing.T) {
	e := openEngine(t, Options{})
	s := openShard(t, e, 0, 0, routing.Span{Start: 0, End: 64})
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

// LogSince on a closed engine answers ErrShardClosed without reaching
// Pebble, which panics on a closed DB.
func TestLogSinceAfterCloseIsShardClosed(t *testing.T) {
	e := openEngine(t, Options{})
	s := openShard(t, e, 0, 0, routing.Span{Start: 0, End: 64})
	s.HoldLog()
	if _, err := s.Write([]Op{{Kind: OpIndex, Key: 1, ID: "a", Source: []byte("v")}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	err := func() (err error) {
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

// A catch-up applying log entries to a child while the engine closes:
// Engine.Close sets the shard's closed flag without the apply lock, so a
// closed check under that lock is not enough; ApplyLog enters the store's
// gate, which Close waits for. Holding the span lock stands in for the
// scheduler pausing ApplyLog after its check (a handoff's SetOwned holds
// it the same way).
func TestApplyLogRacingCloseFinishesOrStops(t *testing.T) {
	e := openEngine(t, Options{})
	s := openShard(t, e, 0, 0, routing.Span{Start: 0, End: 64})
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

// Every operation of a shard whose store is gone (the engine closed, or
// the shard destroyed) answers an error or nothing; none reaches a closed
// Pebble, which panics. A caller holding a stale *Shard (a split driver
// beside a node's close, a statistics tick beside a retirement) must not
// kill the process.
func TestEveryOperationOfAClosedShardAnswersAnError(t *testing.T) {
	for _, how := range []string{"close", "destroy"} {
		forLayouts(t, func(t *testing.T, layout Layout) {
			t.Run(how, func(t *testing.T) {
				fs := vfs.NewMem()
				e := openTestEngine(t, fs, layout)
				defer e.Close()
				s := openShard(t, e, 0, 0, rootSpan(0))
				other := openShard(t, e, 1, 1, rootSpan(1))
				s.HoldLog()
				s.HoldLog()
				id := idsInRoot(0, 1)[0]
				if _, err := s.Write([]Op{opFor(id, OpIndex, "v")}, nil); err != nil {
					t.Fatal(err)
				}
				var err error
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
// flushed, and store.flush must stop at the close too, not wait only for
// its flush or a failure (a split's goroutine would be stuck beside a
// node's close).
func TestAFlushQueuedAtCloseEnds(t *testing.T) {
	fs := &categoryHookFS{FS: vfs.NewMem()}
	e := openEngine(t, Options{FS: fs})
	s := openShard(t, e, 0, 0, rootSpan(0))
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

// In the shared layout a shard's destruction (a split's cleanup retiring
// its parent, a cancel destroying its children) and a roll-back's
// sequence-number raise write to the node's one store, and must use it
// inside its gate: looked up and then used outside it, an Engine.Close
// beside them closes it in between, and Pebble panics ("pebble: closed",
// "pebble/record: closed LogWriter"). A race, so many rounds.
func TestSharedDestroyRacingCloseDoesNotPanic(t *testing.T) {
	for round := range 500 {
		e := openEngine(t, Options{Layout: LayoutShared})
		for i := range 4 {
			s := openShard(t, e, routing.ShardID(i), 0, rootSpan(0))
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
// Coverage for the gates the tests above check one by one (it is how the
// metrics race of TestSplitFlushDecisionRacingClose shows up).
func TestCloseBesideEveryKindOfWork(t *testing.T) {
	for round := range 16 {
		for _, layout := range []Layout{LayoutPerShard, LayoutShared} {
			retire := round%2 == 1
			e := openEngine(t, Options{Layout: layout})
			p := openShard(t, e, 0, 0, rootSpan(0))
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
