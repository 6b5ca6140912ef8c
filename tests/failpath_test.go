package tests

// Failure paths of the split driver, the service and recovery. Each test
// drives a split into a path the happy-path tests never take — a refused
// reservation, a lost final journal record, a cancel racing the handoff, a
// close during the handoff — and then requires what the product promises:
// the parent keeps serving, no operation log stays held, and the next open
// recovers. A test marked with a patch's name guards against the bug that
// tests/sim/mutations/<name> re-introduces.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
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
	"github.com/shardsplit/shardsplit/service"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

// openFailpath opens a 1-shard partition index (R=4: a leaf can be split
// twice, down to one partition) on fs with 20 documents.
func openFailpath(t *testing.T, fs vfs.FS) (*node.Node, *splitter.Journal, *routing.Table) {
	t.Helper()
	return openIndex(t, storage.Options{FS: fs}, 20)
}

// openIndex opens, through recovery, a new 1-shard partition index (R=4)
// on opts (Dir /data and a 1 MiB cache unless set) and indexes docs
// documents d0, d1, … with source "v1".
func openIndex(t *testing.T, opts storage.Options, docs int) (*node.Node, *splitter.Journal, *routing.Table) {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = "/data"
	}
	if opts.CacheBytes == 0 {
		opts.CacheBytes = 1 << 20
	}
	tab, err := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 1, RoutingShards: 4, PartitionSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	n, j, _, err := recovery.Open(opts, tab, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := node.NewRouter(n, tab, node.RouterConfig{})
	for i := range docs {
		if _, err := r.Index(fmt.Sprintf("d%d", i), "", []byte("v1")); err != nil {
			t.Fatal(err)
		}
	}
	return n, j, tab
}

// reopen recovers a crash image of mem and checks the invariants.
func reopen(t *testing.T, fs vfs.FS, tab *routing.Table) *node.Node {
	t.Helper()
	n, j, rep, err := recovery.Open(storage.Options{Dir: "/data", FS: fs, CacheBytes: 1 << 20}, tab, nil)
	if err != nil {
		t.Fatalf("recovery refused to open: %v", err)
	}
	t.Logf("recovered: %+v", rep)
	if c := recovery.Check(n, j, nil); !c.OK() {
		t.Fatalf("after recovery: %v", c.Violations)
	}
	return n
}

// A split the table refuses (the leaf is one partition wide) does not
// leave the parent's operation log held: held, the parent would log every
// write for ever (loghold-before-refused-reserve.patch).
func TestRefusedSplitHoldsNoLog(t *testing.T) {
	n, j, _ := openFailpath(t, vfs.NewMem())
	defer n.Close()
	d := splitter.NewDriver(n, splitter.Config{Journal: j})
	leaf := routing.ShardID(0)
	for depth := 0; ; depth++ {
		rep, err := d.Run(splitter.SplitPlan(leaf, 2))
		if err != nil {
			t.Fatal(err)
		}
		if rep.Phase == splitter.PhaseAborted {
			t.Logf("split of %d refused: %v", leaf, rep.Err)
			break
		}
		if depth > 4 {
			t.Fatalf("a leaf of one partition was split")
		}
		leaf = rep.SortedTargets()[0]
	}
	s, ok := n.ShardStore(leaf)
	if !ok {
		t.Fatalf("no store for shard %d", leaf)
	}
	if h := s.LogHolds(); h != 0 {
		t.Fatalf("after a refused split of %d its operation log is held %d time(s), want 0", leaf, h)
	}
}

// A refused reservation leaves no begin record without an end: with one
// left, a later split of the same parent that crashed before its commit
// would make recovery cancel the one reservation twice and refuse to open
// (refused-reserve-leaves-begin.patch).
func TestRefusedSplitThenCrashRecovers(t *testing.T) {
	mem := vfs.NewCrashableMem()
	n, j, tab := openFailpath(t, mem)
	d := splitter.NewDriver(n, splitter.Config{Journal: j})
	// Refused: five ways out of four partitions.
	if rep, err := d.Run(splitter.SplitPlan(0, 5)); err != nil || rep.Phase != splitter.PhaseAborted {
		t.Fatalf("split 5 ways of 4 partitions: phase %s, %v", rep.Phase, err)
	}
	// A second split of the same parent, crashed after its children exist.
	sp := d.Start(splitter.SplitPlan(0, 2))
	for sp.Machine().Phase() != splitter.PhaseCatchUp {
		if _, _, err := sp.Next(); err != nil {
			t.Fatal(err)
		}
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	_ = n.Close()
	reopen(t, crashed, tab).Close()
}

// A cancel whose final journal record is lost (ENOSPC) leaves "aborting
// children=[1 2]" in the journal; the next split reuses ids 1 and 2 and
// commits, and the next open must not act on the superseded record, or it
// refuses for good to delete the active shard (lost-end-record.patch).
func TestLostAbortRecordDoesNotBlockRecovery(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var armed atomic.Int32 // > 0: fail the armed-th rename of the journal from now
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind != errorfs.OpRename || !strings.Contains(op.Path, splitter.JournalFile) || armed.Load() == 0 {
			return nil
		}
		if armed.Add(-1) == 0 {
			return fmt.Errorf("injected: %w", syscall.ENOSPC)
		}
		return nil
	})
	n, j, tab := openFailpath(t, errorfs.Wrap(mem, inj))
	d := splitter.NewDriver(n, splitter.Config{Journal: j})
	sp := d.Start(splitter.SplitPlan(0, 2))
	for sp.Machine().Phase() != splitter.PhaseCatchUp {
		if _, _, err := sp.Next(); err != nil {
			t.Fatal(err)
		}
	}
	cancelled := sp.Machine().Targets()
	if err := sp.Cancel(); err != nil {
		t.Fatal(err)
	}
	armed.Store(2) // the aborting record is written, the aborted one is lost
	for !sp.Done() {
		if _, _, err := sp.Next(); err != nil {
			t.Fatal(err)
		}
	}
	armed.Store(0)
	rep, err := d.Run(splitter.SplitPlan(0, 2))
	if err != nil || rep.Phase != splitter.PhaseDone {
		t.Fatalf("second split: %s %v %v", rep.Phase, err, rep.Err)
	}
	if !slices.Equal(rep.SortedTargets(), cancelled) {
		t.Logf("second split's children %v, the cancelled split's %v", rep.SortedTargets(), cancelled)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	_ = n.Close()
	reopen(t, crashed, tab).Close()
}

// A cancel delivered just before the handoff is accepted (and the split
// aborts) or refused (and it commits); either way the index reopens. A
// cancel accepted while the driver carries out the handoff it has already
// taken would commit the split with "aborting" as its last record, and
// recovery would refuse to open (cancel-after-fence.patch).
func TestCancelBeforeHandoffIsAcceptedOrRefused(t *testing.T) {
	mem := vfs.NewCrashableMem()
	n, j, tab := openFailpath(t, mem)
	var sp *splitter.Operation
	var cancelErr error
	cancelled := false
	d := splitter.NewDriver(n, splitter.Config{Journal: j, Hook: func(_ splitter.Phase, in splitter.Intent) {
		if !cancelled && in.Kind == splitter.IntentFence {
			cancelled, cancelErr = true, sp.Cancel()
		}
	}})
	sp = d.Start(splitter.SplitPlan(0, 2))
	for !sp.Done() {
		if _, _, err := sp.Next(); err != nil {
			t.Fatal(err)
		}
	}
	rep := sp.Report()
	switch {
	case cancelErr == nil && rep.Phase != splitter.PhaseAborted:
		t.Errorf("cancel accepted but the split ended %s", rep.Phase)
	case cancelErr != nil && rep.Phase != splitter.PhaseDone:
		t.Errorf("cancel refused (%v) but the split ended %s", cancelErr, rep.Phase)
	}
	if errors.Is(cancelErr, nil) && rep.Phase == splitter.PhaseAborted && n.Table().IsSplitParent(0) {
		t.Errorf("split aborted but table v%d commits it", n.Table().Version())
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	_ = n.Close()
	reopen(t, crashed, tab).Close()
}

// A crash between the handoff's publish and its commit rolls the split
// back; a router that learned the published (never durable) table must
// still adopt the table recovery writes, so recovery cancels at a new
// version number: at the same one, the router would keep routing to the
// deleted children until its retries ran out (simulation seeds 20, 22 and
// 84 draw this case).
func TestRouterAdoptsTheTableAfterARolledBackPublish(t *testing.T) {
	mem := vfs.NewCrashableMem()
	n, j, tab := openFailpath(t, mem)
	d := splitter.NewDriver(n, splitter.Config{Journal: j})
	sp := d.Start(splitter.SplitPlan(0, 2))
	for {
		in, _, err := sp.Next()
		if err != nil {
			t.Fatal(err)
		}
		if in.Kind == splitter.IntentUnfence {
			break
		}
	}
	published := n.Table() // in memory, not durable
	if !published.IsSplitParent(0) {
		t.Fatalf("table v%d after publish does not commit the split", published.Version())
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	n2 := reopen(t, crashed, tab)
	defer n2.Close()
	if v := n2.Table().Version(); v <= published.Version() {
		t.Errorf("recovered table v%d, not newer than the published v%d a router may hold", v, published.Version())
	}
	r := node.NewRouter(n2, published, node.RouterConfig{MaxRetries: 8})
	for i := range 20 {
		if _, err := r.Index(fmt.Sprintf("d%d", i), "", []byte("v2")); err != nil {
			t.Fatalf("router holding v%d: %v", published.Version(), err)
		}
	}
	_ = n.Close()
}

// Merge failure paths: a merge the table refuses, one whose target cannot
// be built (ENOSPC) and one cancelled must each leave both sources serving
// with no operation log held; a merge crashed after its target exists
// recovers.
func TestMergeFailurePaths(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var failTarget atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failTarget.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite && strings.Contains(op.Path, "shard-3") {
			return fmt.Errorf("injected: %w", syscall.ENOSPC)
		}
		return nil
	})
	n, j, tab := openFailpath(t, errorfs.Wrap(mem, inj))
	d := splitter.NewDriver(n, splitter.Config{Journal: j})
	if rep, err := d.Run(splitter.SplitPlan(0, 2)); err != nil || rep.Phase != splitter.PhaseDone {
		t.Fatalf("split: %v %v", err, rep.Err)
	}
	sources := []routing.ShardID{1, 2}
	noHolds := func(when string) {
		t.Helper()
		for _, id := range sources {
			s, ok := n.ShardStore(id)
			if !ok {
				t.Fatalf("%s: no store for source %d", when, id)
			}
			if h := s.LogHolds(); h != 0 {
				t.Fatalf("%s: source %d's operation log is held %d time(s), want 0", when, id, h)
			}
		}
		if got := n.Table().ActiveShards(); !slices.Equal(got, sources) {
			t.Fatalf("%s: active %v, want %v", when, got, sources)
		}
		r := node.NewRouter(n, tab, node.RouterConfig{})
		for i := range 20 {
			if _, err := r.Index(fmt.Sprintf("d%d", i), "", []byte(when)); err != nil {
				t.Fatalf("%s: sources no longer serve: %v", when, err)
			}
		}
	}

	rep, err := d.Run(splitter.MergePlan(1, 7))
	if err != nil || rep.Phase != splitter.PhaseAborted || routing.ExceptionOf(rep.Err) != routing.IllegalArgument {
		t.Fatalf("merge with an unknown shard: phase %s, %v, %v; want aborted with IllegalArgumentException", rep.Phase, err, rep.Err)
	}
	noHolds("refused")

	failTarget.Store(true)
	rep, err = d.Run(splitter.MergePlan(sources...))
	failTarget.Store(false)
	if err != nil || rep.Phase != splitter.PhaseAborted || !errors.Is(rep.Err, syscall.ENOSPC) {
		t.Fatalf("merge with ENOSPC on its target: phase %s, %v, %v", rep.Phase, err, rep.Err)
	}
	t.Logf("aborted with: %v", rep.Err)
	noHolds("enospc")

	mg := d.Start(splitter.MergePlan(sources...))
	for mg.Machine().Phase() != splitter.PhaseCatchUp {
		if _, _, err := mg.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if err := mg.Cancel(); err != nil {
		t.Fatal(err)
	}
	for !mg.Done() {
		if _, _, err := mg.Next(); err != nil {
			t.Fatal(err)
		}
	}
	noHolds("cancelled")

	mg = d.Start(splitter.MergePlan(sources...))
	for mg.Machine().Phase() != splitter.PhaseCatchUp {
		if _, _, err := mg.Next(); err != nil {
			t.Fatal(err)
		}
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	_ = n.Close()
	reopen(t, crashed, tab).Close()
}

// A merge whose handoff cannot fence its second source (a write holds it
// past the drain bound) gives up the first source's fence too: between the
// attempts, while the second source is still held, the first takes writes;
// after MaxHandoffs timeouts the merge aborts.
func TestMergeDrainTimeoutReleasesTakenFences(t *testing.T) {
	n, j, tab := openFailpath(t, vfs.NewMem())
	defer n.Close()
	d := splitter.NewDriver(n, splitter.Config{Journal: j})
	if rep, err := d.Run(splitter.SplitPlan(0, 2)); err != nil || rep.Phase != splitter.PhaseDone {
		t.Fatalf("split: %v %v", err, rep.Err)
	}
	var toSource1 []string
	for i := range 20 {
		if _, s := n.Table().Route(fmt.Sprintf("d%d", i), ""); s == 1 {
			toSource1 = append(toSource1, fmt.Sprintf("d%d", i))
		}
	}
	// From the first handoff on, hold source 2's apply lock until the merge
	// cancels (its cancel releases source 2's log, which takes that lock).
	hold, release := make(chan struct{}), make(chan struct{})
	holdSource2 := func() {
		go func() {
			_, _ = n.HoldApplyLock(2, time.Second, func() error {
				close(hold)
				<-release
				return nil
			})
		}()
		<-hold
	}
	var fences, checked int
	hook := func(_ splitter.Phase, in splitter.Intent) {
		switch {
		case in.Kind == splitter.IntentFence:
			if fences == 0 {
				holdSource2()
			}
			fences++
		case in.Kind == splitter.IntentCatchUp && fences > 0:
			// After a timed-out handoff: source 1 must take a write.
			done := make(chan error, 1)
			go func() {
				_, err := node.NewRouter(n, tab, node.RouterConfig{}).Index(toSource1[0], "", []byte("between"))
				done <- err
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("write to source 1 between handoffs: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Errorf("a write to source 1 did not finish in 5 s: its fence was not released")
			}
			checked++
		case in.Kind == splitter.IntentCancel:
			close(release)
		}
	}
	d = splitter.NewDriver(n, splitter.Config{Journal: j, DrainTimeout: 5 * time.Millisecond, Hook: hook})
	rep, err := d.Run(splitter.Plan{Kind: splitter.KindMerge, Sources: []routing.ShardID{1, 2}, MaxHandoffs: 2})
	if err != nil || rep.Phase != splitter.PhaseAborted || rep.Handoffs != 2 || checked != 1 {
		t.Fatalf("merge: phase %s after %d handoffs (%d checks between), %v, %v; want aborted after 2", rep.Phase, rep.Handoffs, checked, err, rep.Err)
	}
	if _, err := node.NewRouter(n, tab, node.RouterConfig{}).Index(toSource1[0], "", []byte("after")); err != nil {
		t.Fatal(err)
	}
}

// A cancel the hook delivers before the first intent (the split is still
// preparing: nothing to undo) ends the split aborted; Run reports that end
// cleanly, rather than go on to Next on the ended split and fail with
// "has nothing to do in phase aborted".
func TestCancelBeforeReserveEndsRunCleanly(t *testing.T) {
	mem := vfs.NewCrashableMem()
	n, j, tab := openFailpath(t, mem)
	var cancelErr error
	var sp *splitter.Operation
	d := splitter.NewDriver(n, splitter.Config{Journal: j, Hook: func(_ splitter.Phase, in splitter.Intent) {
		if in.Kind == splitter.IntentReserve && sp != nil {
			cancelErr = sp.Cancel()
		}
	}})
	sp = d.Start(splitter.SplitPlan(0, 2))
	_, _, err := sp.Next()
	if cancelErr != nil {
		t.Fatalf("cancel before reserve refused: %v", cancelErr)
	}
	if err != nil {
		t.Errorf("Next after a cancel the hook delivered: %v", err)
	}
	if rep := sp.Report(); rep.Phase != splitter.PhaseAborted {
		t.Errorf("split ended %s, want %s", rep.Phase, splitter.PhaseAborted)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	_ = n.Close()
	reopen(t, crashed, tab).Close()
}

// A cancel from another goroutine, racing Run's steps: the split ends
// aborted (cancel accepted) or done (refused, after the fence), Run reports
// no error either way, and the index reopens.
func TestCancelFromAnotherGoroutineRacesRun(t *testing.T) {
	for i := range 20 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			n, j, tab := openFailpath(t, mem)
			started := make(chan *splitter.Operation, 1)
			d := splitter.NewDriver(n, splitter.Config{Journal: j, Hook: func(splitter.Phase, splitter.Intent) {}})
			sp := d.Start(splitter.SplitPlan(0, 2))
			started <- sp
			var wg sync.WaitGroup
			var accepted atomic.Bool
			wg.Add(1)
			go func() {
				defer wg.Done()
				sp := <-started
				for k := 0; k < i; k++ {
					runtime.Gosched()
				}
				accepted.Store(sp.Cancel() == nil)
			}()
			for steps := 0; !sp.Done(); steps++ {
				if _, _, err := sp.Next(); err != nil {
					t.Fatalf("step %d: %v", steps, err)
				}
			}
			wg.Wait()
			rep := sp.Report()
			if accepted.Load() != (rep.Phase == splitter.PhaseAborted) {
				t.Errorf("cancel accepted=%v, split ended %s", accepted.Load(), rep.Phase)
			}
			crashed := mem.CrashClone(vfs.CrashCloneCfg{})
			_ = n.Close()
			reopen(t, crashed, tab).Close()
		})
	}
}

// A service closing while an in-place split or merge holds its parent
// (sources) fenced — the handoff, between Fence and Unfence — halts it
// after its current intent and leaves it to recovery. A write that was
// waiting on the apply lock must then be answered, not left waiting for
// ever on a lock nobody will release.
func TestCloseDuringAFencedHandoffAnswersTheWaitingWrite(t *testing.T) {
	for _, op := range []string{"split", "merge"} {
		t.Run(op, func(t *testing.T) {
			var armed atomic.Bool
			fenced := make(chan struct{})
			release := make(chan struct{})
			var once sync.Once
			dir := t.TempDir()
			s, err := service.Open(service.Config{Dir: dir, SplitHook: func(_ string, _ splitter.Phase, next splitter.Intent) {
				if armed.Load() && next.Kind == splitter.IntentReplayTail {
					once.Do(func() {
						close(fenced)
						<-release
					})
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			one, zero := "1", "0"
			if _, err := s.CreateIndex(service.CreateRequest{Name: "h", Settings: service.FlatSettings{service.SettingShards: &one, service.SettingReplicas: &zero}}); err != nil {
				t.Fatal(err)
			}
			for i := range 20 {
				if _, err := s.IndexDoc("h", fmt.Sprintf("d%d", i), "", []byte(`{}`), service.WriteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if op == "merge" {
				task, err := s.StartSplit(service.SplitRequest{Index: "h", Shard: 0, Ways: 2})
				if err != nil {
					t.Fatal(err)
				}
				if err := task.Wait(context.Background()); err != nil {
					t.Fatal(err)
				}
				armed.Store(true)
				if _, err := s.StartMerge(service.MergeRequest{Index: "h", Shards: []routing.ShardID{1, 2}}); err != nil {
					t.Fatal(err)
				}
			} else {
				armed.Store(true)
				if _, err := s.StartSplit(service.SplitRequest{Index: "h", Shard: 0, Ways: 2}); err != nil {
					t.Fatal(err)
				}
			}
			<-fenced // the apply lock is held
			wrote := make(chan error, 1)
			go func() {
				_, err := s.IndexDoc("h", "d0", "", []byte(`{"during":1}`), service.WriteOptions{})
				wrote <- err
			}()
			select {
			case err := <-wrote:
				t.Fatalf("the write did not wait on the fence: %v", err)
			case <-time.After(100 * time.Millisecond):
			}
			closed := make(chan error, 1)
			go func() { closed <- s.Close() }()
			time.Sleep(200 * time.Millisecond) // Close has halted the task
			close(release)
			select {
			case err := <-closed:
				t.Logf("Close: %v", err)
			case <-time.After(20 * time.Second):
				t.Fatal("Close never returned")
			}
			select {
			case err := <-wrote:
				t.Logf("the write waiting on the fence: %v", err)
			case <-time.After(10 * time.Second):
				t.Fatal("a write waiting on the fence was never answered after the service closed")
			}
			// Recovery decides the operation; the index serves every write.
			s, err = service.Open(service.Config{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, err := s.IndexDoc("h", "after", "", []byte(`{}`), service.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			for i := range 20 {
				if _, ok, err := s.GetDoc("h", fmt.Sprintf("d%d", i), ""); err != nil || !ok {
					t.Errorf("d%d after the restart: found %v, %v", i, ok, err)
				}
			}
		})
	}
}
