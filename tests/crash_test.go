package tests

// Crash-point enumeration (after Pebble's TestDBWALRotationCrash): a split,
// a nested split and a merge of the nested split's children run under concurrent acknowledged writes on Pebble's
// crashable in-memory filesystem, wrapped in an error-injecting filesystem
// whose injector takes a crash clone — the filesystem as it would be after
// a power loss, unsynced data dropped — at every operation that can change
// durable state. Every clone is then recovered and checked: the table is
// valid, no split or merge is left unfinished, every document is on the shard the
// table names exactly once, no store holds a key outside its span
// (recovery.Check), and every id is in a state the write model allows at the
// crash: its last write acknowledged before the clone, or one attempted
// before the clone and not hidden by it (model.Model's rule).

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/shardsplit/shardsplit/internal/model"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/recovery"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

type crashClone struct {
	fs    *vfs.MemFS
	at    model.Cut // the model's clock read before and after the clone
	index int
}

// isDurableOp reports whether an operation can change what survives a
// crash (with unsynced data dropped, plain writes and closes cannot).
func isDurableOp(k errorfs.OpKind) bool {
	switch k {
	case errorfs.OpCreate, errorfs.OpLink, errorfs.OpRemove, errorfs.OpRemoveAll, errorfs.OpRename,
		errorfs.OpReuseForWrite, errorfs.OpMkdirAll, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		return true
	}
	return false
}

func crashSeeds() []uint64 {
	if s := os.Getenv("SHARDSPLIT_CRASH_SEEDS"); s != "" {
		n, _ := strconv.Atoi(s)
		seeds := make([]uint64, n)
		for i := range seeds {
			seeds[i] = uint64(i + 1)
		}
		return seeds
	}
	return []uint64{1, 2}
}

func TestCrashPointEnumeration(t *testing.T) {
	total := 0
	for _, mode := range []routing.Mode{routing.ModePartition, routing.ModeOpenSearch} {
		for _, seed := range crashSeeds() {
			t.Run(fmt.Sprintf("mode=%s/seed=%d", mode, seed), func(t *testing.T) {
				total += crashRun(t, mode, seed)
			})
		}
	}
	t.Logf("visited %d crash points in total", total)
}

// crashRun runs one scenario and checks every crash point it passes; it
// returns how many it visited.
// crashCloner sends a crash clone of mem on clones at every durable
// operation while armed, with the model's cut around it.
type crashCloner struct {
	armed  atomic.Bool
	mu     sync.RWMutex // held (shared) from the armed check to the send; disarm takes it
	clones chan crashClone
	inj    errorfs.Injector
}

// disarm stops the clones: when it returns no clone is being sent, and
// clones may be closed (Pebble's background work goes on doing durable
// operations).
func (c *crashCloner) disarm() {
	c.mu.Lock()
	c.armed.Store(false)
	c.mu.Unlock()
}

func newCrashCloner(mem *vfs.MemFS, m *model.Model, rng *rand.Rand) *crashCloner {
	c := &crashCloner{clones: make(chan crashClone, 64)}
	var index atomic.Int64
	var rngMu sync.Mutex
	c.inj = errorfs.InjectorFunc(func(op errorfs.Op) error {
		c.mu.RLock()
		defer c.mu.RUnlock()
		if !c.armed.Load() || !isDurableOp(op.Kind) {
			return nil
		}
		rngMu.Lock()
		cfg := vfs.CrashCloneCfg{}
		if rng.IntN(2) == 0 { // half the clones keep a random part of the unsynced data
			cfg = vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(rng.Uint64(), 1))}
		}
		rngMu.Unlock()
		// Writes go on concurrently: every write acknowledged before the
		// clone must be in it, and none attempted after it can be.
		before := m.Now()
		clone := mem.CrashClone(cfg)
		at := model.Cut{Acked: before, Attempted: m.Now()}
		c.clones <- crashClone{fs: clone, at: at, index: int(index.Add(1))}
		return nil
	})
	return c
}

func crashRun(t *testing.T, mode routing.Mode, seed uint64) int {
	mem := vfs.NewCrashableMem()
	m := model.New(model.Options{})
	cc := newCrashCloner(mem, m, rand.New(rand.NewPCG(seed, 3)))
	clones := cc.clones
	fs := errorfs.Wrap(mem, cc.inj)
	tab, _ := routing.NewTable(mode, routing.Settings{Shards: 2, RoutingShards: 64, PartitionSize: 1})
	opts := storage.Options{Dir: "/data", FS: fs, Durability: storage.DurabilityRequest, CacheBytes: 1 << 20}
	n, j, _, err := recovery.Open(opts, tab, nil)
	if err != nil {
		t.Fatal(err)
	}

	// Check clones as they come, concurrently with the run.
	var checked atomic.Int64
	var wgCheck sync.WaitGroup
	wgCheck.Add(1)
	go func() {
		defer wgCheck.Done()
		for c := range clones {
			if err := checkCrashClone(c, tab, m); err != nil {
				t.Errorf("crash point %d (seed %d): %v", c.index, seed, err)
			}
			checked.Add(1)
		}
	}()

	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := node.NewRouter(n, tab, node.RouterConfig{MaxRetries: 16})
			wr := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := 0; !stop.Load(); i++ {
				id := fmt.Sprintf("w%d-%d", w, wr.IntN(30))
				source := fmt.Appendf(nil, "w%d-v%d", w, i)
				if wr.IntN(5) == 0 {
					source = nil // a delete
				}
				var mw *model.Write
				var err error
				if source == nil {
					mw = m.Attempt(id, model.Absent)
					_, err = r.Delete(id, "")
				} else {
					mw = m.Attempt(id, model.Doc(source))
					_, err = r.Index(id, "", source)
				}
				if err != nil {
					m.Fail(mw)
					t.Errorf("writer %d: %v", w, err)
					return
				}
				m.Ack(mw)
				time.Sleep(200 * time.Microsecond)
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	cc.armed.Store(true)
	d := splitter.NewDriver(n, splitter.Config{Journal: j})
	r1, err := d.Run(splitter.Plan{Parent: 0, Ways: 2})
	if err != nil || r1.Phase != splitter.PhaseDone {
		t.Fatalf("split: %v %v", err, r1.Err)
	}
	r2, err := d.Run(splitter.Plan{Parent: r1.SortedChildren()[1], Ways: 2})
	if err != nil || r2.Phase != splitter.PhaseDone {
		t.Fatalf("nested split: %v %v", err, r2.Err)
	}
	r3, err := d.RunMerge(splitter.MergePlan{Sources: r2.SortedChildren()})
	if err != nil || r3.Phase != splitter.PhaseDone {
		t.Fatalf("merge: %v %v", err, r3.Err)
	}
	cc.disarm()
	stop.Store(true)
	wg.Wait()
	close(clones)
	wgCheck.Wait()
	_ = n.Close()
	if checked.Load() < 20 {
		t.Errorf("only %d crash points visited", checked.Load())
	}
	t.Logf("%d crash points visited and recovered, 0 failures unless reported above", checked.Load())
	return int(checked.Load())
}

// checkCrashClone recovers a clone and checks it: recovery.Check's
// invariants (a valid table with no split in progress, no unfinished split in
// the journal, no store holding keys outside its span, every document once on
// the shard the table names), then every id against the model at the crash.
func checkCrashClone(c crashClone, initial *routing.Table, m *model.Model) error {
	opts := storage.Options{Dir: "/data", FS: c.fs, Durability: storage.DurabilityRequest, CacheBytes: 1 << 20}
	n, j, _, err := recovery.Open(opts, initial, nil)
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	defer n.Close()
	found := map[string]model.Value{}
	rep := recovery.Check(n, j, func(_ routing.ShardID, d storage.Doc) { found[d.ID] = model.Doc(d.Source) })
	if !rep.OK() {
		return fmt.Errorf("invariants after recovery: %q", rep.Violations)
	}
	r, err := m.Check(c.at, found)
	if err != nil {
		return err
	}
	if !r.OK() {
		return fmt.Errorf("%d lost, %d unexpected, %d wrong of %d ids at cut %+v: %v", r.Lost, r.Unexpected, r.Wrong, r.Checked, c.at, r.Mismatches)
	}
	return nil
}

// TestSplitAbortsOnIOError: an injected ENOSPC while the children are being
// made aborts the split cleanly; the parent keeps serving and the error
// names what failed.
func TestSplitAbortsOnIOError(t *testing.T) {
	mem := vfs.NewMem()
	var failChildren atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failChildren.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite && (strings.Contains(op.Path, "shard-2") || strings.Contains(op.Path, "shard-3")) {
			return fmt.Errorf("injected: %w", syscall.ENOSPC)
		}
		return nil
	})
	tab, _ := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 2, RoutingShards: 64, PartitionSize: 1})
	n, j, _, err := recovery.Open(storage.Options{Dir: "/data", FS: errorfs.Wrap(mem, inj)}, tab, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	r := node.NewRouter(n, tab, node.RouterConfig{})
	for i := range 50 {
		if _, err := r.Index(fmt.Sprintf("d%d", i), "", []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	failChildren.Store(true)
	rep, err := splitter.NewDriver(n, splitter.Config{Journal: j}).Run(splitter.Plan{Parent: 0, Ways: 2})
	failChildren.Store(false)
	if err != nil {
		t.Fatalf("driver: %v", err)
	}
	if rep.Phase != splitter.PhaseAborted || !errors.Is(rep.Err, syscall.ENOSPC) {
		t.Fatalf("split ended %s with %v, want aborted with ENOSPC", rep.Phase, rep.Err)
	}
	t.Logf("aborted with: %v", rep.Err)
	if v := n.Table(); len(v.InProgress()) != 0 || !slices.Equal(v.ActiveShards(), tab.ActiveShards()) {
		t.Fatalf("table after abort: active %v, in progress %v", v.ActiveShards(), v.InProgress())
	}
	for i := range 50 {
		id := fmt.Sprintf("d%d", i)
		if _, err := r.Index(id, "", []byte("v2")); err != nil {
			t.Fatalf("parent no longer serves: %v", err)
		}
		if d, ok, err := r.Get(id, ""); err != nil || !ok || string(d.Source) != "v2" {
			t.Fatalf("get %s after abort: %v %v %q", id, ok, err, d.Source)
		}
	}
}

// A table that cannot be made durable at the handoff fails the node instead
// of guessing: the driver stops at once with node.ErrFailed, the node refuses
// requests, and a reopen rolls the split back with every acknowledged write.
func TestSplitFailsTheNodeWhenTheTableCannotBeCommitted(t *testing.T) {
	mem := vfs.NewMem()
	var failTable atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failTable.Load() && strings.HasSuffix(op.Path, "TABLE.tmp") {
			return fmt.Errorf("injected: %w", syscall.ENOSPC)
		}
		return nil
	})
	tab, _ := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 2, RoutingShards: 64, PartitionSize: 1})
	n, j, _, err := recovery.Open(storage.Options{Dir: "/data", FS: errorfs.Wrap(mem, inj)}, tab, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := node.NewRouter(n, tab, node.RouterConfig{})
	for i := range 50 {
		if _, err := r.Index(fmt.Sprintf("d%d", i), "", []byte("v1")); err != nil {
			t.Fatal(err)
		}
	}
	hook := func(_ splitter.Phase, in splitter.Intent) {
		if in.Kind == splitter.IntentFence {
			failTable.Store(true) // after the handoff's journal record, before the table's commit
		}
	}
	rep, err := splitter.NewDriver(n, splitter.Config{Journal: j, Hook: hook}).Run(splitter.Plan{Parent: 0, Ways: 2})
	if !errors.Is(err, node.ErrFailed) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("driver: got %v (phase %s), want node.ErrFailed wrapping ENOSPC", err, rep.Phase)
	}
	t.Logf("driver stopped with: %v", err)
	if _, err := r.Index("d0", "", []byte("v2")); !errors.Is(err, node.ErrFailed) {
		t.Fatalf("write after the failed commit: got %v, want node.ErrFailed", err)
	}
	_ = n.Close()

	n, _, rec, err := recovery.Open(storage.Options{Dir: "/data", FS: mem}, tab, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	t.Logf("recovery: %+v", rec)
	if v := n.Table(); len(v.InProgress()) != 0 || !slices.Equal(v.ActiveShards(), tab.ActiveShards()) {
		t.Fatalf("table after recovery: active %v, in progress %v; want the split rolled back", v.ActiveShards(), v.InProgress())
	}
	r = node.NewRouter(n, n.Table(), node.RouterConfig{})
	for i := range 50 {
		id := fmt.Sprintf("d%d", i)
		if d, ok, err := r.Get(id, ""); err != nil || !ok || string(d.Source) != "v1" {
			t.Fatalf("get %s after recovery: %v %v %q", id, ok, err, d.Source)
		}
	}
}
