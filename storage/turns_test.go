package storage

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap/zaptest"

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
// them (issue 15: two children's L0 compactions, side by side with the
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
