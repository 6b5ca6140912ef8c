package storage

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/routing"
)

// writeDocs writes n documents of size bytes into root 2 of s, in batches.
func writeDocs(t *testing.T, s *Shard, prefix string, n, size int) {
	t.Helper()
	src := strings.Repeat("x", size)
	writeDocsWith(t, s, prefix, n, func(int) string { return src })
}

// writeRandomDocs is writeDocs with incompressible sources of size bytes:
// their tables are as large as their memtable.
func writeRandomDocs(t *testing.T, s *Shard, prefix string, n, size int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(n), uint64(size)))
	buf := make([]byte, size)
	writeDocsWith(t, s, prefix, n, func(int) string {
		for i := range buf {
			buf[i] = 'a' + byte(rng.IntN(26))
		}
		return string(buf)
	})
}

func writeDocsWith(t *testing.T, s *Shard, prefix string, n int, source func(i int) string) {
	t.Helper()
	var ops []Op
	for i := range n {
		op := opFor(fmt.Sprintf("%s-%d", prefix, i), OpIndex, source(i))
		op.Root, op.Key = 2, routing.Key(256+uint64(i%128)) // root 2 owns [256, 384)
		ops = append(ops, op)
		if len(ops) == 100 {
			if _, err := s.Write(ops, nil); err != nil {
				t.Fatal(err)
			}
			ops = ops[:0]
		}
	}
	if _, err := s.Write(ops, nil); err != nil {
		t.Fatal(err)
	}
}

// A child must not copy and replay the parent's unflushed writes: opening
// it would flush them all (both halves of the keyspace), once per child
// (15.5 MB copied, open 223 ms to 3.25 s on a 4 GiB parent).
func TestChildCopiesNoParentWAL(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	parent := openShard(t, e, 2, 2, rootSpan(2))
	writeDocs(t, parent, "doc", 4000, 1024) // ~4 MiB, all in the memtable
	parent.HoldLog()
	for i, span := range []routing.Span{{Start: 256, End: 320}, {Start: 320, End: 384}} {
		child, stats, err := e.CreateChild(parent, routing.ShardID(9+i), span)
		if err != nil {
			t.Fatal(err)
		}
		if stats.Copied > 1<<20 {
			t.Errorf("child %d copied %d bytes of a parent holding ~4 MiB unflushed; want < 1 MiB (flush %v)", 9+i, stats.Copied, stats.Flush)
		}
		want := 0
		for d := range 4000 {
			if k := 256 + uint64(d%128); k >= span.Start && k < span.End {
				want++
			}
		}
		if got := len(scanState(t, child)); got != want {
			t.Errorf("child %d holds %d documents, want %d", 9+i, got, want)
		}
	}
}

// slowCompactionFS makes every write of a compaction output take delay,
// and once readDelay is set every read of a table.
type slowCompactionFS struct {
	vfs.FS
	delay     time.Duration
	readDelay *atomic.Int64 // nanoseconds
	written   *atomic.Int64 // if set: bytes written to compaction outputs
}

func (s slowCompactionFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := s.FS.Create(name, category)
	if err != nil || category != compactionWriteCategory {
		return f, err
	}
	return slowFile{File: f, delay: s.delay, written: s.written}, nil
}

func (s slowCompactionFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := s.FS.Open(name, opts...)
	if err != nil || s.readDelay == nil || !strings.HasSuffix(name, ".sst") {
		return f, err
	}
	return slowReadFile{File: f, delay: s.readDelay}, nil
}

type slowFile struct {
	vfs.File
	delay   time.Duration
	written *atomic.Int64
}

func (f slowFile) Write(p []byte) (int, error) {
	time.Sleep(f.delay)
	if f.written != nil {
		f.written.Add(int64(len(p)))
	}
	return f.File.Write(p)
}

type slowReadFile struct {
	vfs.File
	delay *atomic.Int64
}

func (f slowReadFile) ReadAt(p []byte, off int64) (int, error) {
	time.Sleep(time.Duration(f.delay.Load()))
	return f.File.ReadAt(p, off)
}

// startSlowCompaction fills s's L0 until a compaction runs.
func startSlowCompaction(t *testing.T, s *Shard) {
	t.Helper()
	for i := 0; ; i++ {
		if s.st.db.Metrics().Compact.NumInProgress > 0 {
			return
		}
		if i > 50 {
			t.Fatal("no compaction started")
		}
		writeDocs(t, s, fmt.Sprintf("f%d", i), 1000, 1024)
		if err := s.st.db.Flush(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Destroying a store must not wait for its running compaction: the data is
// going (the 4 GiB parent's close waited 3.3 s for a 778 MB
// compaction after the handoff).
//
// Slow writes: the compaction is writing when the store is destroyed. Slow
// reads: it is reading (and compressing) the rest of its output table,
// which a failed write alone does not stop.
func TestDestroyShardAbandonsItsCompaction(t *testing.T) {
	for _, c := range []struct {
		name             string
		write, readAfter time.Duration
	}{
		{name: "slow writes", write: 100 * time.Millisecond},
		{name: "slow reads", write: time.Millisecond, readAfter: 50 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := slowCompactionFS{FS: vfs.NewMem(), delay: c.write, readDelay: &atomic.Int64{}}
			e := openTestEngine(t, fs, LayoutPerShard)
			defer e.Close()
			s := openShard(t, e, 2, 2, rootSpan(2))
			startSlowCompaction(t, s)
			fs.readDelay.Store(int64(c.readAfter))
			start := time.Now()
			if err := e.DestroyShard(2); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("DestroyShard took %v: it waited for the running compaction", took)
			}
			rs, ok := e.TakeRetireStats(2)
			if !ok {
				t.Fatal("no retire stats for the destroyed shard")
			}
			t.Logf("close %v, remove %v", rs.Close, rs.Remove)
		})
	}
}

// A held parent's running compaction is paused, not abandoned: it stays in
// progress and writes nothing while held; releasing the hold (a cancelled
// split) lets it finish where it stopped. On the old code (cancel at the
// hold) the compaction was gone within the first wait.
func TestHoldCompactionsPausesTheRunningOne(t *testing.T) {
	var written atomic.Int64
	fs := slowCompactionFS{FS: vfs.NewMem(), delay: 20 * time.Millisecond, written: &written}
	e := openTestEngine(t, fs, LayoutPerShard)
	defer e.Close()
	s := openShard(t, e, 2, 2, rootSpan(2))
	startSlowCompaction(t, s)
	e.HoldCompactions(s)
	if !s.CompactionsHeld() {
		t.Fatal("HoldCompactions: store not held")
	}
	time.Sleep(100 * time.Millisecond) // a write in flight when the pause began ends
	m := s.st.db.Metrics()
	if m.Compact.NumInProgress == 0 || s.st.cfs.epoch.Load() != 0 {
		t.Fatalf("held: %d compactions in progress (%d done), cancel epoch %d: want the running one kept, paused",
			m.Compact.NumInProgress, m.Compact.Count, s.st.cfs.epoch.Load())
	}
	before := written.Load()
	done := m.Compact.Count
	time.Sleep(300 * time.Millisecond) // ~15 slow writes if it were not paused
	if m := s.st.db.Metrics(); m.Compact.Count != done || m.Compact.NumInProgress == 0 {
		t.Fatalf("held: the compaction went on: %d done (was %d), %d in progress", m.Compact.Count, done, m.Compact.NumInProgress)
	}
	if got := written.Load(); got != before {
		t.Fatalf("held: the paused compaction wrote %d bytes in 300 ms", got-before)
	}
	s.ReleaseCompactions()
	if s.CompactionsHeld() {
		t.Fatal("ReleaseCompactions: store still held")
	}
	// It writes again at once, not at the pause's 2 s bound (~1.6 s away).
	deadline := time.Now().Add(500 * time.Millisecond)
	for written.Load() == before {
		if time.Now().After(deadline) {
			t.Fatal("the paused compaction wrote nothing within 500 ms of the release")
		}
		time.Sleep(5 * time.Millisecond)
	}
	deadline = time.Now().Add(10 * time.Second)
	for s.st.db.Metrics().Compact.Count == done {
		if time.Now().After(deadline) {
			t.Fatal("the paused compaction did not finish within 10 s of the release")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A pause parks compaction writes until resume, cancel or its bound, and
// leaves flushes alone.
func TestCancelFSPause(t *testing.T) {
	for _, c := range []struct {
		name string
		end  func(*cancelFS)
		want error
	}{
		{"resume", (*cancelFS).resume, nil},
		{"cancel", (*cancelFS).cancel, errCompactionCancelled},
		{"bound", func(*cancelFS) {}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfs := &cancelFS{FS: vfs.NewMem(), maxPause: 200 * time.Millisecond}
			out, err := cfs.Create("000001.sst", compactionWriteCategory)
			if err != nil {
				t.Fatal(err)
			}
			flush, err := cfs.Create("000002.sst", flushWriteCategory)
			if err != nil {
				t.Fatal(err)
			}
			cfs.pause()
			if _, err := flush.Write([]byte("x")); err != nil {
				t.Fatalf("a flush write while paused: %v", err)
			}
			done := make(chan error, 1)
			start := time.Now()
			go func() { _, err := out.Write([]byte("x")); done <- err }()
			select {
			case err := <-done:
				t.Fatalf("a compaction write returned while paused (err %v)", err)
			case <-time.After(50 * time.Millisecond):
			}
			c.end(cfs)
			select {
			case err := <-done:
				if !errors.Is(err, c.want) && err != c.want {
					t.Fatalf("write after %s: err %v, want %v", c.name, err, c.want)
				}
				if c.name == "bound" && time.Since(start) < 150*time.Millisecond {
					t.Fatalf("write returned after %v, before the 200 ms bound", time.Since(start))
				}
			case <-time.After(2 * time.Second):
				t.Fatalf("the compaction write still waits 2 s after %s", c.name)
			}
			if _, err := out.Write([]byte("y")); !errors.Is(err, c.want) && err != c.want {
				t.Fatalf("a later write: err %v, want %v", err, c.want)
			}
			// A new pause pauses again, even after one that ended at its
			// bound without a resume.
			cfs.pause()
			out2, err := cfs.Create("000003.sst", compactionWriteCategory)
			if err != nil {
				t.Fatal(err)
			}
			go func() { _, err := out2.Write([]byte("z")); done <- err }()
			select {
			case err := <-done:
				t.Fatalf("after %s, a new pause did not pause (write returned, err %v)", c.name, err)
			case <-time.After(50 * time.Millisecond):
			}
			cfs.resume()
			if err := <-done; err != nil {
				t.Fatalf("the write after the second pause: %v", err)
			}
		})
	}
}

// A write stall ends a pause: a parent whose L0 fills during its split
// compacts at once. The store's listener is what Pebble calls.
func TestWriteStallResumesPausedCompactions(t *testing.T) {
	sched := newHoldScheduler(false, clock.Real{})
	cfs := &cancelFS{FS: vfs.NewMem()}
	opts := storeOptions{fs: cfs, logger: zap.NewNop()}.pebbleOptions(sched, cfs)
	cfs.pause()
	opts.EventListener.WriteStallBegin(pebble.WriteStallBeginInfo{Reason: "L0 file count limit exceeded"})
	if g := cfs.paused.Load(); g != nil {
		t.Fatal("a write stall left the compactions paused")
	}
}

// A parent held (its compaction paused) is destroyed without waiting for
// the compaction, and so is one whose split was cancelled (released: the
// compaction runs again).
func TestDestroyShardAbandonsAPausedCompaction(t *testing.T) {
	for _, cancelled := range []bool{false, true} {
		t.Run(fmt.Sprintf("cancelled=%v", cancelled), func(t *testing.T) {
			fs := slowCompactionFS{FS: vfs.NewMem(), delay: 100 * time.Millisecond}
			e := openTestEngine(t, fs, LayoutPerShard)
			defer e.Close()
			s := openShard(t, e, 2, 2, rootSpan(2))
			startSlowCompaction(t, s)
			e.HoldCompactions(s)
			if !s.CompactionsHeld() {
				t.Fatal("HoldCompactions: store not held")
			}
			if cancelled {
				s.ReleaseCompactions()
				if s.CompactionsHeld() {
					t.Fatal("ReleaseCompactions: store still held")
				}
			}
			time.Sleep(50 * time.Millisecond)
			if n := s.st.db.Metrics().Compact.NumInProgress; n == 0 || s.st.cfs.epoch.Load() != 0 {
				t.Fatalf("the running compaction was not kept: %d in progress, cancel epoch %d", n, s.st.cfs.epoch.Load())
			}
			start := time.Now()
			if err := e.DestroyShard(2); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > time.Second {
				t.Errorf("DestroyShard took %v: it waited for the compaction (or the pause's 2 s bound)", took)
			}
		})
	}
}

// gatedCompactionFS blocks every write to a compaction's output until gate
// is closed: a compaction that starts cannot finish.
type gatedCompactionFS struct {
	vfs.FS
	gate    chan struct{}
	started chan struct{} // closed at the first blocked write
	once    *sync.Once
}

func (g gatedCompactionFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := g.FS.Create(name, category)
	if err != nil || category != compactionWriteCategory {
		return f, err
	}
	return gatedFile{File: f, fs: g}, nil
}

type gatedFile struct {
	vfs.File
	fs gatedCompactionFS
}

func (f gatedFile) Write(p []byte) (int, error) {
	f.fs.once.Do(func() { close(f.fs.started) })
	<-f.fs.gate
	return f.File.Write(p)
}

// l0Store leaves in dir a store with tables overlapping L0 tables, and
// with unflushed writes in its WAL if unflushed (its open then flushes).
// Pebble allows an urgent second compaction from an L0 read amplification
// of 10, and stops writes at 12.
func l0Store(t *testing.T, fs vfs.FS, dir string, tables int, unflushed bool) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{FS: fs, FormatMajorVersion: pebble.FormatNewest, DisableAutomaticCompactions: true, Logger: zapPebbleLogger{zap.NewNop().Sugar()}})
	if err != nil {
		t.Fatal(err)
	}
	rounds := tables
	if unflushed {
		rounds++
	}
	for round := range rounds {
		for k := range 64 {
			if err := db.Set(fmt.Appendf(nil, "k%03d", k), fmt.Appendf(nil, "v%d", round), nil); err != nil {
				t.Fatal(err)
			}
		}
		if round < tables {
			if err := db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := int(db.Metrics().Levels[0].Sublevels); n != tables {
		t.Fatalf("built %d L0 sublevels, want %d", n, tables)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// deepL0Store is what a child of a freshly loaded parent inherits: twelve
// overlapping L0 tables (urgent debt, at the stop-writes depth) and
// unflushed writes.
func deepL0Store(t *testing.T, fs vfs.FS, dir string) { l0Store(t, fs, dir, 12, true) }

// Opening a store never waits for a compaction. Pebble's Open flushes the
// replayed WAL, and the flush's end may start a compaction that Open's
// obsolete-file scan then waits for (a child of a freshly loaded
// 4 GiB parent inherits an L0 deep enough for an urgent compaction, and
// its open took 1.4 and 6.7 s). Held (a new child) and unheld (any store).
func TestOpenDoesNotWaitForACompaction(t *testing.T) {
	for _, held := range []bool{true, false} {
		t.Run(fmt.Sprintf("held=%v", held), func(t *testing.T) {
			g := gatedCompactionFS{FS: vfs.NewMem(), gate: make(chan struct{}), started: make(chan struct{}), once: &sync.Once{}}
			deepL0Store(t, g.FS, "/data/shard-5")
			o := storeOptions{fs: g, logger: zaptest.NewLogger(t), clock: clock.Real{}}
			opened := make(chan *store, 1)
			go func() {
				st, err := openStore("/data/shard-5", o, held)
				if err != nil {
					t.Error(err)
				}
				opened <- st
			}()
			var st *store
			select {
			case st = <-opened:
			case <-time.After(10 * time.Second):
				close(g.gate) // let the compaction, and the open, finish
				<-opened
				t.Fatal("open did not return within 10 s: it waited for a compaction that cannot finish")
			}
			if st == nil {
				close(g.gate)
				return
			}
			// The debt is still there, and the compaction starts after the
			// open (a new child's once it is released).
			if held {
				st.sched.release()
			}
			select {
			case <-g.started:
			case <-time.After(10 * time.Second):
				t.Error("no compaction started after the open")
			}
			close(g.gate)
			if err := st.close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A new child compacts nothing until it is released, though it inherits
// debt Pebble calls urgent (a 4 GiB parent's children compacted beside the
// split's own I/O). That a manual compaction of a sealed child
// still runs is TestManualCompactionOfAHeldStoreStartsAtOnce's
// unsealed=false case: on this store's urgent debt, any compaction the
// manual one's unseal let through would pass for it.
func TestNewChildCompactsNothingUntilReleased(t *testing.T) {
	g := gatedCompactionFS{FS: vfs.NewMem(), gate: make(chan struct{}), started: make(chan struct{}), once: &sync.Once{}}
	deepL0Store(t, g.FS, "/data/shard-5")
	st, err := openStore("/data/shard-5", storeOptions{fs: g, logger: zaptest.NewLogger(t), clock: clock.Real{}}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(g.gate) // a gated compaction finishes, then the close
		if err := st.close(); err != nil {
			t.Error(err)
		}
	}()
	time.Sleep(350 * time.Millisecond) // the scheduler grants every 100 ms
	select {
	case <-g.started:
		t.Fatal("a held new child started a compaction before its release")
	default:
	}
	st.sched.release()
	select {
	case <-g.started:
	case <-time.After(10 * time.Second):
		t.Fatal("no compaction after the release")
	}
}

// A sealed child whose writes stall (its memtable fills over an L0 at
// Pebble's stop-writes depth) is unsealed, so the stall ends without a
// release: a split never waits on its own child.
func TestSealedChildUnsealsOnAWriteStall(t *testing.T) {
	fs := vfs.NewMem()
	deepL0Store(t, fs, "/data/shard-5")
	st, err := openStore("/data/shard-5", storeOptions{fs: fs, logger: zaptest.NewLogger(t), clock: clock.Real{}}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	done := make(chan error, 1)
	go func() { // two memtables' worth: the second rotation meets L0 at its limit
		v := make([]byte, 4<<10)
		for i := range 10_000 {
			if err := st.db.Set(fmt.Appendf(nil, "w%06d", i), v, pebble.NoSync); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		st.sched.release() // end the stall, so the close can finish
		<-done
		t.Fatal("writes to a sealed child stalled for good")
	}
	st.sched.mu.Lock()
	sealed, held := st.sched.sealed, st.sched.held
	st.sched.mu.Unlock()
	if sealed || !held {
		t.Errorf("after a stall: sealed %v, held %v; want unsealed and still held", sealed, held)
	}
}

// A failed open leaves no scheduler running. Pebble registers the scheduler
// in Open before its last steps (the replayed WAL's flush, the OPTIONS
// file, the obsolete-file scan) and never unregisters it when one of them
// fails, so the scheduler's ticker, and the half-opened DB it points to,
// outlived every open that failed there.
func TestFailedOpenStopsItsScheduler(t *testing.T) {
	for _, held := range []bool{true, false} {
		t.Run(fmt.Sprintf("held=%v", held), func(t *testing.T) {
			mem := vfs.NewMem()
			deepL0Store(t, mem, "/data/shard-5")
			// The OPTIONS file is written through a temporary file after
			// Register: fail its creation.
			fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
				if op.Kind == errorfs.OpCreate && strings.HasSuffix(op.Path, ".dbtmp") {
					return errorfs.ErrInjected
				}
				return nil
			}))
			clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			st, err := openStore("/data/shard-5", storeOptions{fs: fs, logger: zaptest.NewLogger(t), clock: clk}, held)
			if err == nil {
				_ = st.close()
				t.Fatal("open succeeded though its OPTIONS file could not be created")
			}
			if !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("open failed with %v, want the injected error", err)
			}
			if n := clk.Waiters(); n != 0 {
				t.Fatalf("a failed open left %d ticker(s) running: its scheduler was never unregistered", n)
			}
		})
	}
}

// shallowL0Store has nine overlapping L0 tables: L0 wants a compaction,
// but not urgently, so a held store starts none on its own.
func shallowL0Store(t *testing.T, fs vfs.FS, dir string) { l0Store(t, fs, dir, 9, false) }

// A manual compaction of a held store starts at once, not at the
// scheduler's next tick. Pebble does not ask a scheduler that already has a
// compaction waiting (one it refused) about the manual compaction it
// enqueues, and a held store refuses whatever is not urgent: only the
// 100 ms ticker granted it, and under a manual clock (the simulation)
// nothing did until the clock moved. Held and sealed (a new child), and
// held after an earlier unseal (a write stall, an earlier manual
// compaction), where compact's own unseal grants nothing.
func TestManualCompactionOfAHeldStoreStartsAtOnce(t *testing.T) {
	for _, unsealed := range []bool{false, true} {
		t.Run(fmt.Sprintf("unsealed=%v", unsealed), func(t *testing.T) {
			g := gatedCompactionFS{FS: vfs.NewMem(), gate: make(chan struct{}), started: make(chan struct{}), once: &sync.Once{}}
			shallowL0Store(t, g.FS, "/data/shard-5")
			clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) // the ticker never fires
			st, err := openStore("/data/shard-5", storeOptions{fs: g, logger: zaptest.NewLogger(t), clock: clk}, true)
			if err != nil {
				t.Fatal(err)
			}
			if a := st.db.GetAllowedWithoutPermission(); a != normalConcurrency {
				t.Fatalf("allowed concurrency %d, want %d: the store's debt is urgent and proves nothing", a, normalConcurrency)
			}
			if unsealed {
				st.sched.unseal()
			}
			// Let the grants that the open's flush, opened() and unseal()
			// started run out: a late one would find the manual compaction
			// and hide the missing grant.
			time.Sleep(200 * time.Millisecond)
			select {
			case <-g.started:
				t.Fatal("a held store started a compaction nobody asked for")
			default:
			}
			done := make(chan error, 1)
			go func() { done <- st.compact(context.Background(), []byte("k"), []byte("l"), false) }()
			select {
			case <-g.started:
			case err := <-done:
				t.Errorf("manual compaction ended before writing: %v", err)
			case <-time.After(5 * time.Second):
				t.Error("a manual compaction of a held store did not start without a tick of the scheduler's clock")
				st.sched.release() // let it run, so the test ends instead of hanging
			}
			close(g.gate)
			clk.Advance(time.Second) // the old code's only way out
			if err := <-done; err != nil {
				t.Error(err)
			}
			if err := st.close(); err != nil {
				t.Error(err)
			}
		})
	}
}
