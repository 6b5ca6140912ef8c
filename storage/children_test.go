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
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/shardsplit/shardsplit/routing"
)

// childrenParent opens shard 2 on e with n documents, the first half
// flushed and the rest in the WAL, and holds its log, as a split does
// before it makes children. It returns the parent and the two halves of
// its span.
func childrenParent(t *testing.T, e *Engine, n int) (*Shard, []ChildSpec) {
	t.Helper()
	parent := openShard(t, e, 2, 2, rootSpan(2))
	value := strings.Repeat("v", 1024)
	for i, id := range idsInRoot(2, n) {
		if _, err := parent.Write([]Op{opFor(id, OpIndex, value)}, nil); err != nil {
			t.Fatal(err)
		}
		if i == n/2 {
			if err := parent.st.db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	parent.HoldLog()
	root := rootSpan(2)
	mid := root.Start + (root.End-root.Start)/2
	return parent, []ChildSpec{{Shard: 3, Span: routing.Span{Start: root.Start, End: mid}}, {Shard: 4, Span: routing.Span{Start: mid, End: root.End}}}
}

// Children made at the same time hold what children made one after
// another hold, and the parent is flushed once for both: two goroutines
// each deciding on their own would both see the unflushed WAL and flush
// it twice.
func TestCreateChildrenConcurrentlyMatchesSerial(t *testing.T) {
	for _, concurrent := range []bool{false, true} {
		t.Run(fmt.Sprintf("concurrent=%v", concurrent), func(t *testing.T) {
			// FlushChildren: the path of a parent whose retained history
			// cannot stand in for its memtables.
			e := openEngine(t, Options{FS: vfs.NewMem(), Logger: zap.NewNop(), CacheBytes: 8 << 20, FlushChildren: true})
			defer e.Close()
			// 2×flushBeforeCheckpoint of 1 KiB documents: the WAL holds
			// more than flushBeforeCheckpoint when the children are made.
			parent, specs := childrenParent(t, e, 2*(flushBeforeCheckpoint>>10)*2)
			flushesBefore := parent.st.db.Metrics().Flush.Count
			children, stats, err := e.CreateChildren(parent, specs, ChildExcise, concurrent)
			if err != nil {
				t.Fatal(err)
			}
			if n := parent.st.db.Metrics().Flush.Count - flushesBefore; n != 1 {
				t.Errorf("the parent was flushed %d times for its children, want once", n)
			}
			if stats[0].Flush == 0 || stats[1].Flush != 0 {
				t.Errorf("flush times %v, %v: want the one flush counted in the first child's stats", stats[0].Flush, stats[1].Flush)
			}
			for i, c := range children {
				if c == nil || c.ID() != specs[i].Shard {
					t.Fatalf("child %d is %v, want shard %d", i, c, specs[i].Shard)
				}
				want, err := parent.CountKeys(specs[i].Span)
				if err != nil {
					t.Fatal(err)
				}
				if got, err := c.CountKeys(specs[i].Span); err != nil || got != want {
					t.Errorf("child %d holds %d documents of its span (%v), the parent %d", c.ID(), got, err, want)
				}
				other := specs[1-i].Span
				if got, err := c.CountKeys(other); err != nil || got != 0 {
					t.Errorf("child %d holds %d documents of its sibling's span (%v), want none", c.ID(), got, err)
				}
				if stats[i].Seq != parent.Seq() {
					t.Errorf("child %d starts from sequence number %d, the parent is at %d (no write ran meanwhile)", c.ID(), stats[i].Seq, parent.Seq())
				}
			}
		})
	}
}

// rendezvous blocks the lock of each store directory it names until every
// one of them has reached its lock, or until a bound passes, which it
// records: Pebble's Open locks its directory first, so the stores' opens
// overlap only if every one of them gets there while the others wait.
type rendezvous struct {
	dirs    []string
	bound   time.Duration
	mu      sync.Mutex
	arrived int
	all     chan struct{}
	missed  []string
}

func (r *rendezvous) String() string { return "rendezvous" }

// lockIn reports which of dirs op locks (Pebble's Open locks its
// directory first), if any.
func lockIn(op errorfs.Op, dirs []string) (string, bool) {
	if op.Kind != errorfs.OpLock {
		return "", false
	}
	for _, d := range dirs {
		if strings.HasPrefix(op.Path, d+"/") {
			return d, true
		}
	}
	return "", false
}

func (r *rendezvous) MaybeError(op errorfs.Op) error {
	d, ok := lockIn(op, r.dirs)
	if !ok {
		return nil
	}
	r.mu.Lock()
	r.arrived++
	if r.arrived == len(r.dirs) {
		close(r.all)
	}
	r.mu.Unlock()
	select {
	case <-r.all:
	case <-time.After(r.bound):
		r.mu.Lock()
		r.missed = append(r.missed, d)
		r.mu.Unlock()
	}
	return nil
}

// The children's stores open at the same time: the engine's lock is not
// held across Pebble's Open. With the lock held, the first child's open
// waits at the rendezvous for a sibling that waits for the lock.
func TestCreateChildrenOpensOverlap(t *testing.T) {
	r := &rendezvous{dirs: []string{"/data/shard-3", "/data/shard-4"}, bound: 3 * time.Second, all: make(chan struct{})}
	e := openTestEngine(t, errorfs.Wrap(vfs.NewMem(), r), LayoutPerShard)
	defer e.Close()
	parent, specs := childrenParent(t, e, 200)
	if _, _, err := e.CreateChildren(parent, specs, ChildExcise, true); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.missed) > 0 {
		t.Fatalf("the open of %v waited %s for its sibling's and gave up: the children's stores did not open at the same time", r.missed, r.bound)
	}
}

// A child that fails leaves no directory, and its sibling, made at the
// same time, is returned for the caller to clean up with the rest of the
// cancelled split. Made one after another, a failure stops the rest.
func TestCreateChildrenReturnsTheChildrenMadeWhenOneFails(t *testing.T) {
	for _, tc := range []struct {
		concurrent bool
		fail       string // the child whose store's lock fails
		made       []bool // which children come back
		dirs       []string
	}{
		{concurrent: true, fail: "/data/shard-3/", made: []bool{false, true}, dirs: []string{"/data/shard-4"}},
		{concurrent: true, fail: "/data/shard-4/", made: []bool{true, false}, dirs: []string{"/data/shard-3"}},
		{concurrent: false, fail: "/data/shard-3/", made: []bool{false, false}, dirs: nil},
		{concurrent: false, fail: "/data/shard-4/", made: []bool{true, false}, dirs: []string{"/data/shard-3"}},
	} {
		t.Run(fmt.Sprintf("concurrent=%v/fail=%s", tc.concurrent, tc.fail), func(t *testing.T) {
			inj := &failOnce{match: func(op errorfs.Op) bool { return op.Kind == errorfs.OpLock && strings.HasPrefix(op.Path, tc.fail) }}
			fs := errorfs.Wrap(vfs.NewMem(), inj)
			e := openTestEngine(t, fs, LayoutPerShard)
			defer e.Close()
			parent, specs := childrenParent(t, e, 200)
			inj.armed.Store(true)
			children, _, err := e.CreateChildren(parent, specs, ChildExcise, tc.concurrent)
			if !errors.Is(err, errInjected) {
				t.Fatalf("CreateChildren = %v, want the injected error", err)
			}
			for i, c := range children {
				if (c != nil) != tc.made[i] {
					t.Errorf("child %d returned: %v, want %v", specs[i].Shard, c != nil, tc.made[i])
				}
			}
			var dirs []string
			for _, s := range specs {
				if _, err := fs.Stat(e.ShardDir(s.Shard)); err == nil {
					dirs = append(dirs, e.ShardDir(s.Shard))
				}
			}
			if strings.Join(dirs, ",") != strings.Join(tc.dirs, ",") {
				t.Errorf("store directories left: %v, want %v (the made children's only)", dirs, tc.dirs)
			}
			for _, c := range children {
				if c != nil {
					if err := e.DestroyShard(c.ID()); err != nil {
						t.Fatal(err)
					}
				}
			}
			if _, err := parent.Write([]Op{opFor(idsInRoot(2, 201)[200], OpIndex, "after")}, nil); err != nil {
				t.Fatalf("the parent no longer takes writes: %v", err)
			}
		})
	}
}

// panicOn panics, once, with value in the operation match accepts.
type panicOn struct {
	match func(errorfs.Op) bool
	value any
	done  sync.Once
}

func (p *panicOn) String() string { return "panicOn" }

func (p *panicOn) MaybeError(op errorfs.Op) error {
	if p.match(op) {
		p.done.Do(func() { panic(p.value) })
	}
	return nil
}

// A panic in one child's creation (Pebble panics on an fsync error it
// cannot recover from) reaches CreateChildren's caller with its value, as
// it would if the children were made on the caller's goroutine, and only
// after the sibling is done: without the hand-back it would kill the
// process from a goroutine no caller can recover on.
func TestCreateChildrenHandsAPanicBack(t *testing.T) {
	boom := errors.New("injected panic")
	inj := &panicOn{value: boom, match: func(op errorfs.Op) bool {
		return op.Kind == errorfs.OpLock && strings.HasPrefix(op.Path, "/data/shard-4/")
	}}
	core, logs := observer.New(zap.ErrorLevel)
	e := openEngine(t, Options{FS: errorfs.Wrap(vfs.NewMem(), inj), Logger: zap.New(core), CacheBytes: 8 << 20})
	defer e.Close()
	parent, specs := childrenParent(t, e, 200)
	defer func() {
		r := recover()
		if r != boom {
			t.Fatalf("CreateChildren's caller recovered %v, want the child's panic %v", r, boom)
		}
		if _, ok := e.Shard(3); !ok {
			t.Errorf("the sibling (shard 3) was not finished when the panic reached the caller")
		}
		// The re-panic's stack is CreateChildren's: where it happened is
		// logged.
		var stack string
		for _, entry := range logs.All() {
			if v, ok := entry.ContextMap()["stack"].(string); ok {
				stack = v
			}
		}
		if !strings.Contains(stack, "makeChild") {
			t.Errorf("no logged stack names the child's creation (makeChild); logged: %v", logs.All())
		}
	}()
	_, _, _ = e.CreateChildren(parent, specs, ChildExcise, true)
	t.Fatal("CreateChildren returned; want the child's panic")
}

// The forced flush's stats say how much of it was the memtable rotation,
// the part during which Pebble admits no write of the parent.
func TestCreateChildrenReportsTheRotation(t *testing.T) {
	e := openEngine(t, Options{FS: vfs.NewMem(), Logger: zap.NewNop(), CacheBytes: 8 << 20, FlushChildren: true})
	defer e.Close()
	parent, specs := childrenParent(t, e, 400)
	_, stats, err := e.CreateChildren(parent, specs, ChildExcise, true)
	if err != nil {
		t.Fatal(err)
	}
	if f, r := stats[0].Flush, stats[0].Rotate; f == 0 || r <= 0 || r > f {
		t.Errorf("first child: flush %v, rotation %v; want a flush and a rotation within it", f, r)
	}
	if r := stats[1].Rotate; r != 0 {
		t.Errorf("second child: rotation %v; want 0 (the flush is counted in the first child's stats)", r)
	}
}

// loadedParent opens shard 0 of root 0 with documents in tables and in
// its memtable, its log held (as a split holds it before its children).
func loadedParent(t *testing.T, e *Engine) *Shard {
	t.Helper()
	s := openShard(t, e, 0, 0, rootSpan(0))
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
// checkpoint passes the parent's gate, so the close does not close the
// parent under it (it holds a version of the parent's tables).
func TestChildCheckpointRacingCloseFailsCleanly(t *testing.T) {
	fs := &createHookFS{FS: vfs.NewMem()}
	childCreationRacingClose(t, fs, "a checkpoint", func(childDir string, block func()) {
		fs.onCreate = func(name string) {
			if strings.HasPrefix(name, childDir+"/") {
				block() // the checkpoint is writing the child's files
			}
		}
	})
}

// childCreationRacingClose makes a child of loadedParent's parent on an
// engine over fs while the engine closes, at the instant arm's hook calls
// block, and checks that neither panics, the close succeeds, the creation
// fails, and the child's directory is removed.
func childCreationRacingClose(t *testing.T, fs vfs.FS, what string, arm func(childDir string, block func())) {
	t.Helper()
	e := openEngine(t, Options{FS: fs})
	parent := loadedParent(t, e)
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

// A child made of a parent on a closed engine fails with ErrShardClosed
// without reaching the parent's closed Pebble, which panics.
func TestCreateChildrenAfterCloseIsShardClosed(t *testing.T) {
	for _, copyWAL := range []bool{false, true} {
		t.Run(fmt.Sprintf("copyWAL=%v", copyWAL), func(t *testing.T) {
			fs := vfs.NewMem()
			e := openEngine(t, Options{FS: fs, CopyChildWAL: copyWAL})
			parent := loadedParent(t, e)
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			err := func() (err error) {
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
// store is registered with the engine only once trimmed
// (openChildStore's prepare), so the close cannot close it under the
// excise.
//
// The close comes at the first read of one of the child's tables. The
// excise reads the table it cuts, unless Pebble's table-stats loader,
// which starts when the child's store opens, read it first (about 2 runs
// in 100); then the excise waits in the file cache for that read, so the
// close still lands while the trim is unfinished.
func TestChildTrimRacingCloseFailsCleanly(t *testing.T) {
	fs := &openHookFS{FS: vfs.NewMem()}
	childCreationRacingClose(t, fs, "a child's trim", func(childDir string, block func()) {
		fs.onOpen = func(name string) {
			if strings.HasPrefix(name, childDir+"/") && strings.HasSuffix(name, ".sst") {
				block()
			}
		}
	})
}

// A split's flush decision (flushForCheckpoint) reads the parent's Pebble
// metrics inside the store's gate: outside it, beside a close, they read
// the engine's file cache while Engine.Close releases it (a data race the
// race detector reports: CI runs -race). Run with -race.
func TestSplitFlushDecisionRacingClose(t *testing.T) {
	for i := range 20 {
		e := openEngine(t, Options{})
		s := openShard(t, e, 0, 0, rootSpan(0))
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

// A catch-up replays the parent's writes after S from its operation log,
// and the log has them only while a hold taken at or before S lasts
// (INV-8). CatchUp checks: with the log not held, or held again only
// after S (a hold released and retaken), it would replay nothing of the
// gap and return success, and the child would silently lack acknowledged
// writes.
func TestCatchUpRefusesAGapInTheLog(t *testing.T) {
	for _, c := range []string{"never held", "held again after S"} {
		t.Run(c, func(t *testing.T) {
			e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
			defer e.Close()
			parent := openShard(t, e, 0, 0, rootSpan(0))
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
func TestCatchUpOfAFencedParent(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	parent := openShard(t, e, 0, 0, rootSpan(0))
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

// TestAdoptCheckpointKeepsTheChildsSpanAndTheParentsSequenceNumber: a
// checkpoint of a parent's store, opened on another engine as a child,
// holds the child's documents only, no history, and the parent's
// sequence number, from which the child goes on.
func TestAdoptCheckpointKeepsTheChildsSpanAndTheParentsSequenceNumber(t *testing.T) {
	fs := vfs.NewMem()
	pe := openEngine(t, Options{FS: fs, Dir: "/parent", Layout: LayoutPerShard, Logger: zap.NewNop()})
	defer pe.Close()
	p := openShard(t, pe, 0, 0, routing.Span{Start: 0, End: 100})
	p.HoldLog()
	var ops []Op
	for k := range 10 {
		ops = append(ops, Op{Kind: OpIndex, Key: routing.Key(k * 10), ID: fmt.Sprint("d", k), Source: []byte("v")})
	}
	if _, err := p.Write(ops, nil); err != nil {
		t.Fatal(err)
	}
	ce := openEngine(t, Options{FS: fs, Dir: "/child", Layout: LayoutPerShard, Logger: zap.NewNop()})
	defer ce.Close()
	seq, err := p.Checkpoint(ce.ShardDir(2))
	if err != nil {
		t.Fatal(err)
	}
	c, got, err := ce.AdoptCheckpoint(0, 2, 0, routing.Span{Start: 50, End: 100})
	if err != nil {
		t.Fatal(err)
	}
	if got != seq || c.Seq() != 10 {
		t.Fatalf("child sequence number %d (shard %d), want the parent's %d", got, c.Seq(), seq)
	}
	var ids []string
	_ = c.Scan(func(d Doc) error { ids = append(ids, d.ID); return nil })
	if fmt.Sprint(ids) != "[d5 d6 d7 d8 d9]" {
		t.Fatalf("child holds %v, want d5..d9", ids)
	}
	n := 0
	_ = c.LogSince(0, c.Seq(), nil, func(LogEntry) error { n++; return nil })
	if n != 0 {
		t.Fatalf("child holds %d history entries of its parent", n)
	}
	if err := c.ApplyReplicated([]LogEntry{{Seq: 11, Op: Op{Kind: OpIndex, Key: 60, ID: "d10", Source: []byte("v")}}}, true); err != nil {
		t.Fatalf("the child does not go on from the parent's sequence number: %v", err)
	}
}

// TestAnAdoptedChildNeverUndoesWithItsParentsUndoRecords: a checkpoint of
// a parent replica's store carries the parent's undo records (outside the
// history the adoption excises), some of them for documents of the other
// child. The child's Undo reads only its own: it takes back its own
// operations, refuses to go below the sequence number it adopted, and no
// foreign document comes back.
func TestAnAdoptedChildNeverUndoesWithItsParentsUndoRecords(t *testing.T) {
	fs := vfs.NewMem()
	pe := openEngine(t, Options{FS: fs, Dir: "/parent", Layout: LayoutPerShard, Logger: zap.NewNop()})
	defer pe.Close()
	p := openShard(t, pe, 0, 0, routing.Span{Start: 0, End: 100})
	put := func(seq uint64, key routing.Key, id string) LogEntry {
		return LogEntry{Seq: seq, Op: Op{Kind: OpIndex, Key: key, ID: id, Source: []byte(id)}}
	}
	// A replica: every operation above the global checkpoint (none yet)
	// keeps an undo record, foreign ones (keys below 50) included.
	if err := p.ApplyReplicated([]LogEntry{put(1, 10, "f1"), put(2, 60, "m1"), {Seq: 3, Op: Op{Kind: OpDelete, Key: 10, ID: "f1"}}, put(4, 20, "f2")}, true); err != nil {
		t.Fatal(err)
	}
	ce := openEngine(t, Options{FS: fs, Dir: "/child", Layout: LayoutPerShard, Logger: zap.NewNop()})
	defer ce.Close()
	if _, err := p.Checkpoint(ce.ShardDir(2)); err != nil {
		t.Fatal(err)
	}
	c, seq, err := ce.AdoptCheckpoint(0, 2, 0, routing.Span{Start: 50, End: 100})
	if err != nil || seq != 4 {
		t.Fatalf("adopt: seq %d, %v", seq, err)
	}
	if err := c.ApplyReplicated([]LogEntry{put(5, 70, "m2"), {Seq: 6, Op: Op{Kind: OpNoop}}}, true); err != nil {
		t.Fatal(err)
	}
	if err := c.Undo(4); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := c.Get(0, 70, "m2"); found || c.Seq() != 4 {
		t.Fatalf("after Undo(4): m2 found %v, seq %d", found, c.Seq())
	}
	if err := c.Undo(0); err == nil {
		t.Fatal("the child undid operations of its parent's, below the sequence number it adopted")
	}
	var ids []string
	_ = c.Scan(func(d Doc) error { ids = append(ids, d.ID); return nil })
	if fmt.Sprint(ids) != "[m1]" || c.Seq() != 4 {
		t.Fatalf("child holds %v at %d, want [m1] at 4", ids, c.Seq())
	}
}
