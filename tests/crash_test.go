package tests

// Crash-point enumeration (after Pebble's TestDBWALRotationCrash): a split
// (and a nested split) runs under concurrent acknowledged writes on Pebble's
// crashable in-memory filesystem, wrapped in an error-injecting filesystem
// whose injector takes a crash clone — the filesystem as it would be after
// a power loss, unsynced data dropped — at every operation that can change
// durable state. Every clone is then recovered and checked: the table is
// valid, no split is left unfinished, every document is on the shard the
// table names exactly once, no store holds a key outside its span, and every
// write acknowledged before the crash instant is there (or the one write in
// flight after it).

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

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/recovery"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

// writeEvent is one write as the model sees it.
type writeEvent struct {
	id      string
	value   string // "" = delete
	acked   bool
	ackedAt int64 // model clock when acknowledged
}

// model records every writer's writes in order; writers own their ids.
type crashModel struct {
	mu     sync.Mutex
	clock  int64
	writes map[string][]*writeEvent
}

func (m *crashModel) attempt(id, value string) *writeEvent {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := &writeEvent{id: id, value: value}
	m.writes[id] = append(m.writes[id], e)
	return e
}

func (m *crashModel) ack(e *writeEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.clock++
	e.acked, e.ackedAt = true, m.clock
}

// now is the model clock: acks with ackedAt <= now happened before.
func (m *crashModel) now() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.clock
}

// allowed returns the states id may be in after a crash at model time t:
// the last write acknowledged by t, or the write attempted after it.
func (m *crashModel) allowed(id string, t int64) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	ws := m.writes[id]
	last := -1
	for i, w := range ws {
		if w.acked && w.ackedAt <= t {
			last = i
		}
	}
	states := []string{""} // never written (or deleted)
	if last >= 0 {
		states = []string{ws[last].value}
	}
	if last+1 < len(ws) {
		states = append(states, ws[last+1].value)
	}
	return states
}

type crashClone struct {
	fs    *vfs.MemFS
	at    int64 // model time
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
func crashRun(t *testing.T, mode routing.Mode, seed uint64) int {
	mem := vfs.NewCrashableMem()
	model := &crashModel{writes: map[string][]*writeEvent{}}
	var armed atomic.Bool
	clones := make(chan crashClone, 64)
	var index atomic.Int64
	rng := rand.New(rand.NewPCG(seed, 3))
	var rngMu sync.Mutex
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !armed.Load() || !isDurableOp(op.Kind) {
			return nil
		}
		at := model.now()
		rngMu.Lock()
		cfg := vfs.CrashCloneCfg{}
		if rng.IntN(2) == 0 { // half the clones keep a random part of the unsynced data
			cfg = vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(rng.Uint64(), 1))}
		}
		rngMu.Unlock()
		clones <- crashClone{fs: mem.CrashClone(cfg), at: at, index: int(index.Add(1))}
		return nil
	})
	fs := errorfs.Wrap(mem, inj)
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
			if err := checkCrashClone(c, tab, model); err != nil {
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
				value := fmt.Sprintf("w%d-v%d", w, i)
				if wr.IntN(5) == 0 {
					value = ""
				}
				e := model.attempt(id, value)
				var err error
				if value == "" {
					_, err = r.Delete(id, "")
				} else {
					_, err = r.Index(id, "", []byte(value))
				}
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				model.ack(e)
				time.Sleep(200 * time.Microsecond)
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	armed.Store(true)
	d := splitter.NewDriver(n, splitter.Config{Journal: j})
	r1, err := d.Run(splitter.Plan{Parent: 0, Ways: 2})
	if err != nil || r1.Phase != splitter.PhaseDone {
		t.Fatalf("split: %v %v", err, r1.Err)
	}
	r2, err := d.Run(splitter.Plan{Parent: r1.SortedChildren()[1], Ways: 2})
	if err != nil || r2.Phase != splitter.PhaseDone {
		t.Fatalf("nested split: %v %v", err, r2.Err)
	}
	armed.Store(false)
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

// checkCrashClone recovers a clone and checks the invariants and the model.
func checkCrashClone(c crashClone, initial *routing.Table, model *crashModel) error {
	opts := storage.Options{Dir: "/data", FS: c.fs, Durability: storage.DurabilityRequest, CacheBytes: 1 << 20}
	n, j, _, err := recovery.Open(opts, initial, nil)
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	defer n.Close()
	// Recovery must be idempotent: a journal with nothing unfinished.
	for _, r := range splitter.Last(j.Records()) {
		if !r.Stage.Finished() {
			return fmt.Errorf("split %d left at %s after recovery", r.Split, r.Stage)
		}
	}
	t := n.Table()
	if err := t.Validate(); err != nil {
		return err
	}
	if len(t.InProgress()) != 0 {
		return fmt.Errorf("table v%d still has splits in progress %v", t.Version(), t.InProgress())
	}
	found := map[string]string{}
	_, err = n.Search(func(shard routing.ShardID, d storage.Doc) error {
		if _, dup := found[d.ID]; dup {
			return fmt.Errorf("%s found twice", d.ID)
		}
		found[d.ID] = string(d.Source)
		if _, want := t.Route(d.ID, d.Routing); want != shard {
			return fmt.Errorf("%s on shard %d, table v%d names %d", d.ID, shard, t.Version(), want)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, id := range t.ActiveShards() {
		s, _ := n.ShardStore(id)
		o, _ := t.Shard(id)
		for _, foreign := range complement(t.RootSpan(o.Root), o.Span) {
			if k, _ := s.CountKeys(foreign); k != 0 {
				return fmt.Errorf("shard %d holds %d keys outside its span", id, k)
			}
		}
	}
	model.mu.Lock()
	ids := make([]string, 0, len(model.writes))
	for id := range model.writes {
		ids = append(ids, id)
	}
	model.mu.Unlock()
	for _, id := range ids {
		if allowed := model.allowed(id, c.at); !slices.Contains(allowed, found[id]) {
			return fmt.Errorf("%s = %q, allowed %q", id, found[id], allowed)
		}
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
