package storage

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/shardsplit/shardsplit/internal/clock"
)

// turnsFS records which stores started writing a compaction's output, and
// holds the writes of the stores in gated until gate is closed.
type turnsFS struct {
	vfs.FS
	gate  chan struct{}
	gated map[string]bool // store directories whose compactions wait for gate

	mu      sync.Mutex
	started []string // store directories, in the order their first compaction write came
}

func (f *turnsFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.Create(name, category)
	if err != nil || category != compactionWriteCategory {
		return file, err
	}
	return &turnsFile{File: file, fs: f, dir: filepath.Dir(name)}, nil
}

// startedIn returns the stores that started a compaction so far.
func (f *turnsFS) startedIn() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.started)
}

// waitFor waits up to 10 s until n stores have started a compaction.
func (f *turnsFS) waitFor(n int) []string {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && len(f.startedIn()) < n {
		time.Sleep(5 * time.Millisecond)
	}
	return f.startedIn()
}

type turnsFile struct {
	vfs.File
	fs  *turnsFS
	dir string
}

func (f *turnsFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	if !slices.Contains(f.fs.started, f.dir) {
		f.fs.started = append(f.fs.started, f.dir)
	}
	f.fs.mu.Unlock()
	if f.fs.gated[f.dir] {
		<-f.fs.gate
	}
	return f.File.Write(p)
}

// openSiblings opens a store with seven L0 sublevels in each of dirs (an
// L0 compaction waiting, not urgent: Pebble's urgency is at 10), held as
// new children are, taking compaction turns together.
func openSiblings(t *testing.T, fs *turnsFS, dirs ...string) ([]*store, *compactionTurns) {
	t.Helper()
	turns := &compactionTurns{}
	var stores []*store
	for _, dir := range dirs {
		l0Store(t, fs.FS, dir, 6, true)
		st, err := openStore(dir, storeOptions{fs: fs, logger: zaptest.NewLogger(t), clock: clock.Real{}, sib: siblings{turns: turns}}, true)
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, st)
	}
	return stores, turns
}

// The children of one split pay their inherited compaction debt one
// compaction at a time, not all at once the moment the split releases
// them (two children's L0 compactions, side by side with the
// writers' fsyncs, left 7–20 ms gaps after the handoff); the second's
// starts when the first's ends; and once their debt is paid they take no
// turns any more.
func TestChildrenTakeTurnsAtTheirDebt(t *testing.T) {
	a, b := "/data/shard-5", "/data/shard-6"
	fs := &turnsFS{FS: vfs.NewMem(), gate: make(chan struct{}), gated: map[string]bool{a: true, b: true}}
	stores, turns := openSiblings(t, fs, a, b)
	opened := true
	defer func() {
		if opened {
			close(fs.gate)
		}
		for _, st := range stores {
			if err := st.close(); err != nil {
				t.Error(err)
			}
		}
	}()
	for _, st := range stores {
		st.sched.release()
	}
	if got := fs.waitFor(1); len(got) == 0 {
		t.Fatal("no child compacted within 10 s of its release")
	}
	time.Sleep(350 * time.Millisecond) // the schedulers grant every 100 ms
	if got := fs.startedIn(); len(got) > 1 {
		t.Fatalf("children %v compacted at the same time: one of them should have waited for the other's compaction to end", got)
	}
	close(fs.gate)
	opened = false
	if got := fs.waitFor(2); len(got) < 2 {
		t.Fatalf("only %v compacted: the other child never got its turn", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		turns.mu.Lock()
		left := len(turns.members)
		turns.mu.Unlock()
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d children still take turns 10 s after their debt could be paid", left)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// behindAGatedSibling opens two siblings in turns, releases the first and
// waits until its compaction holds the turn (its writes gated until the
// test ends), then releases the second: its turn comes when the first's
// compaction ends, never while the test runs.
func behindAGatedSibling(t *testing.T) (*turnsFS, []*store) {
	t.Helper()
	a, b := "/data/shard-5", "/data/shard-6"
	fs := &turnsFS{FS: vfs.NewMem(), gate: make(chan struct{}), gated: map[string]bool{a: true}}
	stores, _ := openSiblings(t, fs, a, b)
	t.Cleanup(func() {
		close(fs.gate)
		for _, st := range stores {
			if err := st.close(); err != nil {
				t.Error(err)
			}
		}
	})
	stores[0].sched.release()
	if got := fs.waitFor(1); len(got) == 0 || got[0] != a {
		t.Fatalf("compactions started in %v, want %s's first", got, a)
	}
	stores[1].sched.release()
	return fs, stores
}

// A child whose writes stall does not wait for its sibling's compaction:
// it leaves the turns and compacts at once, so its writers are held no
// longer than its own compaction takes. (A deepening L0 makes it leave
// before its writes stop, TestAnUrgentChildIsNotMadeToStallByItsTurn; this
// is the stall that comes all the same, on L0 or on the memtable count,
// which Pebble reports with WriteStallBegin, whose listener calls unseal.)
func TestAStalledChildDoesNotWaitForItsTurn(t *testing.T) {
	fs, stores := behindAGatedSibling(t)
	b := stores[1].dir
	time.Sleep(350 * time.Millisecond)
	if got := fs.startedIn(); len(got) > 1 {
		t.Fatalf("compactions started in %v before any stall: %s should have waited for its turn", got, b)
	}
	stores[1].sched.unseal() // Pebble's WriteStallBegin
	if got := fs.waitFor(2); len(got) < 2 {
		t.Fatalf("%s's writes stalled and it still waits for its sibling's compaction (compactions started in %v)", b, got)
	}
}

// A child compacted by hand does not wait for its sibling's turn: its
// caller waits for the compaction (the keep-all children's foreign cleanup
// compacts both children at once, and question 2 measures it so).
func TestAManualCompactionDoesNotWaitForItsTurn(t *testing.T) {
	fs, stores := behindAGatedSibling(t)
	b := stores[1].dir
	done := make(chan error, 1)
	go func() { done <- stores[1].compact(context.Background(), []byte("a"), []byte("z"), true) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("a manual compaction of %s waited 10 s for its sibling's turn (compactions started in %v)", b, fs.startedIn())
	}
}

// openMember opens the store in dir held, as a new child is, in turns (nil:
// none), logging to logger (debug level: Pebble's events, write stalls
// among them).
func openMember(t *testing.T, fs vfs.FS, dir string, turns *compactionTurns, logger *zap.Logger) *store {
	t.Helper()
	st, err := openStore(dir, storeOptions{fs: fs, logger: logger, clock: clock.Real{}, sib: siblings{turns: turns}}, true)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// membersOf returns how many stores still take turns in t.
func membersOf(t *compactionTurns) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.members)
}

// A released child whose L0 Pebble calls urgent (read amplification 11:
// one flush from the stop-writes depth, which every child of a freshly
// loaded 4 GiB parent inherits, DESIGN.md) compacts at once, whatever its
// sibling is doing: the hold's own rule is that urgent work always runs
// (holdScheduler), so that a store never stalls its own writes. The turns
// override it: the child waits for its sibling's compaction until its
// writes stop (WriteStallBegin makes it leave), and its writers wait for a
// whole L0 compaction then. "no turns" is the control: the same stores,
// the same writes, no stall.
func TestAnUrgentChildIsNotMadeToStallByItsTurn(t *testing.T) {
	for _, withTurns := range []bool{false, true} {
		name := "no turns"
		if withTurns {
			name = "turns"
		}
		t.Run(name, func(t *testing.T) {
			a, b := "/data/shard-5", "/data/shard-6"
			fs := &turnsFS{FS: vfs.NewMem(), gate: make(chan struct{}), gated: map[string]bool{a: true}}
			l0Store(t, fs.FS, a, 10, true)
			l0Store(t, fs.FS, b, 10, true)
			var turns *compactionTurns
			if withTurns {
				turns = &compactionTurns{}
			}
			core, logs := observer.New(zap.DebugLevel)
			sa := openMember(t, fs, a, turns, zap.NewNop())
			sb := openMember(t, fs, b, turns, zap.New(core))
			var gateOnce sync.Once
			openGate := func() { gateOnce.Do(func() { close(fs.gate) }) }
			defer func() {
				openGate()
				for _, st := range []*store{sa, sb} {
					if err := st.close(); err != nil {
						t.Error(err)
					}
				}
			}()
			// The split releases its children; a's compaction (long, or
			// paused: gated here) starts first.
			sa.sched.release()
			if got := fs.waitFor(1); len(got) == 0 || got[0] != a {
				t.Fatalf("compactions started in %v, want %s's first", got, a)
			}
			sb.sched.release()
			time.Sleep(500 * time.Millisecond) // the writers come at their pace
			// Two memtables' worth, each ended as a full one is: the first
			// flush takes L0 to the stop-writes depth, the second rotation
			// meets it. The keys span the inherited tables' range, so each
			// flush adds an L0 sublevel.
			v := make([]byte, 4<<10)
			for round := range 2 {
				for i := range 1_000 {
					if err := sb.db.Set(fmt.Appendf(nil, "k%03d-%d-%06d", i%64, round, i), v, pebble.NoSync); err != nil {
						t.Fatal(err)
					}
				}
				if err := sb.db.Flush(); err != nil {
					t.Fatal(err)
				}
			}
			var began time.Time
			var stalled time.Duration
			for _, e := range logs.FilterMessageSnippet("write stall").All() {
				if strings.Contains(e.Message, "beginning") {
					began = e.Time
				} else if !began.IsZero() {
					stalled += e.Time.Sub(began)
				}
				t.Logf("%s: %s", b, e.Message)
			}
			t.Logf("%s: L0 sublevels %d after the writes", b, sb.db.Metrics().Levels[0].Sublevels)
			if n := logs.FilterMessageSnippet("write stall beginning: L0").Len(); n > 0 {
				t.Fatalf("%s's writes stalled on L0 (%d stall(s), %v) while its urgent compaction waited for %s's turn", b, n, stalled, a)
			}
		})
	}
}

// A child that holds the turn while its own split pauses its compaction
// (HoldCompactions: the child is now a parent) keeps its sibling waiting no
// longer than the pause, and not at all once it is retired: the retire
// cancels the compaction (Done gives the turn back) and the close leaves.
func TestAPausedTurnHolderReleasesTheTurn(t *testing.T) {
	for _, retire := range []bool{false, true} {
		t.Run(fmt.Sprintf("retire=%v", retire), func(t *testing.T) {
			a, b := "/data/shard-5", "/data/shard-6"
			fs := &turnsFS{FS: vfs.NewMem(), gate: make(chan struct{}), gated: map[string]bool{}}
			close(fs.gate)
			// Debt, not urgent: an urgent L0 does not wait for its turn.
			l0Store(t, fs.FS, a, 6, true)
			l0Store(t, fs.FS, b, 6, true)
			turns := &compactionTurns{}
			sa := openMember(t, fs, a, turns, zap.NewNop())
			sb := openMember(t, fs, b, turns, zap.NewNop())
			closed := false
			defer func() {
				if !closed {
					if err := sa.close(); err != nil {
						t.Error(err)
					}
				}
				if err := sb.close(); err != nil {
					t.Error(err)
				}
			}()
			const pause = 1500 * time.Millisecond
			sa.cfs.maxPause = pause
			sa.cfs.pause() // a's split begins: its compaction parks at its first write
			sa.sched.release()
			deadline := time.Now().Add(10 * time.Second)
			for {
				sa.sched.mu.Lock()
				running := sa.sched.running
				sa.sched.mu.Unlock()
				if running > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("a's compaction did not start")
				}
				time.Sleep(time.Millisecond)
			}
			start := time.Now()
			sb.sched.release()
			time.Sleep(300 * time.Millisecond)
			if got := fs.startedIn(); len(got) != 0 {
				t.Fatalf("compactions wrote in %v while a held the turn, paused", got)
			}
			if retire {
				if err := sa.retireAndClose(); err != nil {
					t.Fatal(err)
				}
				closed = true
			}
			var got []string
			for time.Now().Before(deadline) {
				if got = fs.startedIn(); slices.Contains(got, b) {
					break
				}
				time.Sleep(time.Millisecond)
			}
			took := time.Since(start)
			if !slices.Contains(got, b) {
				t.Fatalf("b never compacted (started: %v)", got)
			}
			limit := pause + time.Second
			if retire {
				limit = 300*time.Millisecond + time.Second
			}
			if took > limit {
				t.Fatalf("b compacted %v after its release, want within %v", took, limit)
			}
			t.Logf("b compacted %v after its release", took)
		})
	}
}

// A child whose store fails to open leaves the turns (abandon), so it can
// never be the member its siblings wait for.
func TestAChildThatFailsToOpenLeavesTheTurns(t *testing.T) {
	a, b := "/data/shard-5", "/data/shard-6"
	inj := &failOnce{match: func(op errorfs.Op) bool {
		return op.Kind == errorfs.OpCreate && strings.HasPrefix(op.Path, b+"/") && strings.HasSuffix(op.Path, ".dbtmp") // the OPTIONS file's temporary, written after Register
	}}
	fs := errorfs.Wrap(vfs.NewMem(), inj)
	deepL0Store(t, fs, a)
	deepL0Store(t, fs, b)
	turns := &compactionTurns{}
	sa := openMember(t, fs, a, turns, zap.NewNop())
	defer func() {
		if err := sa.close(); err != nil {
			t.Error(err)
		}
	}()
	inj.armed.Store(true)
	if _, err := openStore(b, storeOptions{fs: fs, logger: zap.NewNop(), clock: clock.Real{}, sib: siblings{turns: turns}}, true); !errors.Is(err, errInjected) {
		t.Fatalf("open of %s = %v, want the injected error", b, err)
	}
	if n := membersOf(turns); n != 1 {
		t.Fatalf("%d members after the failed open, want 1 (a)", n)
	}
}

// Siblings written, compacted by hand and closed all at the same time: no
// deadlock across their DBs' mutexes and the turns (run it with -race),
// and every member leaves.
func TestTurnsUnderConcurrentWritesCompactionsAndCloses(t *testing.T) {
	dirs := []string{"/data/shard-5", "/data/shard-6", "/data/shard-7"}
	fs := vfs.NewMem()
	turns := &compactionTurns{}
	var stores []*store
	for _, dir := range dirs {
		deepL0Store(t, fs, dir)
		stores = append(stores, openMember(t, fs, dir, turns, zap.NewNop()))
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for i, st := range stores {
			wg.Add(2)
			go func() { // a writer: several memtables, flushes, L0 compactions
				defer wg.Done()
				v := make([]byte, 1<<10)
				for k := range 40_000 {
					if err := st.db.Set(fmt.Appendf(nil, "k%03d-%06d", k%64, k), v, pebble.NoSync); err != nil {
						t.Error(err)
						return
					}
					if k == 1_000*(i+1) {
						st.sched.release()
					}
				}
			}()
			go func() { // manual compactions, the foreign cleanup's way
				defer wg.Done()
				for range 5 {
					if err := st.compact(t.Context(), []byte("k"), []byte("l"), false); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		var cwg sync.WaitGroup
		for _, st := range stores {
			cwg.Add(1)
			go func() {
				defer cwg.Done()
				if err := st.close(); err != nil {
					t.Error(err)
				}
			}()
		}
		cwg.Wait()
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("writes, manual compactions and closes of siblings did not finish within 60 s")
	}
	if n := membersOf(turns); n != 0 {
		t.Fatalf("%d members left after every store closed", n)
	}
}
