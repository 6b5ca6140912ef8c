package tests

// Crash-point enumeration: lab/crashpoint runs a split, a nested
// split and a merge of the nested split's children under concurrent
// acknowledged writes and takes a crash clone at every operation that can
// change durable state; every clone is recovered and checked (its package
// doc has the checks). This test runs it in both modes and fails on any
// point that did not pass, any writer error, or too few points.

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/shardsplit/shardsplit/lab/crashpoint"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/recovery"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
	"github.com/shardsplit/shardsplit/storage/crashfs"
)

// isDurableOp reports whether an operation can change what survives a
// crash (with unsynced data dropped, plain writes and closes cannot).
func isDurableOp(k errorfs.OpKind) bool { return crashfs.IsDurableOp(k) }

// crashSeeds are the enumeration's seeds: SHARDSPLIT_CRASH_SEEDS=n runs
// 1..n; otherwise seeds 1 and 2, and under the race detector seed 1.
func crashSeeds() []uint64 {
	if s := os.Getenv("SHARDSPLIT_CRASH_SEEDS"); s != "" {
		n, _ := strconv.Atoi(s)
		seeds := make([]uint64, n)
		for i := range seeds {
			seeds[i] = uint64(i + 1)
		}
		return seeds
	}
	if raceEnabled {
		return []uint64{1} // the ordinary pass runs both
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
	res, err := crashpoint.Run(mode, seed)
	for _, werr := range res.WriterErrs {
		t.Error(werr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.Routed == 0 || res.Moved == 0 {
		t.Errorf("%d routed writes, %d of them moving an id's document to another key of its shard: the _id index is not exercised", res.Routed, res.Moved)
	}
	for _, p := range res.Failures() {
		t.Errorf("crash point %d (seed %d, %s, phase %s): %v", p.Index, seed, p.Op, p.Phase, p.Err)
	}
	// Both ways of making children, each under the crash points: from the
	// parent's flushed state and its retained history (the first split's
	// parent has served writes since its open), and with the parent
	// flushed first (the nested split's, a child that has not flushed).
	if res.FromHistory == 0 || res.History == 0 || res.Flushed == 0 {
		t.Errorf("%d children from the flushed state (%d writes from the history), %d with the parent flushed: both builds are not exercised", res.FromHistory, res.History, res.Flushed)
	}
	if len(res.Points) < 20 {
		t.Errorf("only %d crash points visited", len(res.Points))
	}
	t.Logf("%d crash points visited and recovered, 0 failures unless reported above; %d children from the flushed state (%d writes from the history), %d with the parent flushed",
		len(res.Points), res.FromHistory, res.History, res.Flushed)
	return len(res.Points)
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
	rep, err := splitter.NewDriver(n, splitter.Config{Journal: j}).Run(splitter.SplitPlan(0, 2))
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
	rep, err := splitter.NewDriver(n, splitter.Config{Journal: j, Hook: hook}).Run(splitter.SplitPlan(0, 2))
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
