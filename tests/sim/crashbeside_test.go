package sim

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
	"github.com/shardsplit/shardsplit/tests/simkit"
)

// The simulator crashes a process Pebble declared dead at once
// (afterStep -> crashDead -> crash: w.mem.CrashClone), while the step the
// death interrupted may still run: w.do returns on the fatal message, not
// when the step's goroutine ends (do's comment: "fn's results must then not
// be read"; faultyOpen's: "The process died with recovery.Open still
// running"). A death on one goroutine (a sibling child's excise, a
// background flush) leaves the others going: a concurrent child's
// checkpoint linking the parent's tables (MemFS.Link), its open locking its
// directory (MemFS.Lock). Pebble v2.1.7's MemFS.Link and MemFS.Lock nest
// read locks of the clone mutex that a CrashClone between them deadlocks
// (storage/crashfs), and the simulator cloned a bare MemFS, not a
// crashfs.Disk, until 7063744 (8a56d3b had moved the three injector
// crashes of tests/ to crashfs, not this one).
//
// This test makes that moment: the split's create-children step goes on
// on its own goroutine (the dead process's), and the simulator crashes as
// crashDead does as soon as the first child's checkpoint directory
// appears. A crash that has not returned after 20 s is the deadlock.
// SHARDSPLIT_CRASHBESIDE_ITERS sets the iterations (default 60).
//
// The step is one of the process's calls (spawn), so the reclaim that
// follows the crash closes the dead engine only once the step has
// returned. Until it did, the close freed Pebble's memtables and file
// cache under the step's excise: a SIGSEGV that took CI down once
// (2026-12-03), and a data race under -race every time, which is why this
// test skipped the race build; now it runs there too, and the race build
// catches that close again at once (TestReclaimWaitsForTheDeadProcessCalls
// checks it without one).
func TestCrashBesideADeadProcessStep(t *testing.T) {
	iters := 60
	if s := os.Getenv("SHARDSPLIT_CRASHBESIDE_ITERS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("SHARDSPLIT_CRASHBESIDE_ITERS=%q", s)
		}
		iters = v
	}
	landed := 0
	for i := range iters {
		if crashBesideStep(t, uint64(1000+i)) {
			landed++
		}
		if t.Failed() {
			return
		}
	}
	t.Logf("%d iterations, %d crashes landed while the children's checkpoints ran", iters, landed)
}

// crashBesideStep runs one iteration on a fresh world; it reports whether
// the crash came while the step was still running.
func crashBesideStep(t *testing.T, seed uint64) (landed bool) {
	w := &world{seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5eed)), model: newSharedModel(),
		clk: clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	defer func() {
		if r := recover(); r != nil {
			if f, ok := r.(*finding); ok {
				t.Errorf("seed %d: simulator finding: %s", seed, simkit.FirstLine(f.msg))
			} else {
				t.Errorf("seed %d: panic: %v", seed, r)
			}
		}
		w.teardown()
	}()
	w.sw = drawSwarm(w.rng)
	w.sw.layout = storage.LayoutPerShard
	w.sw.serialChildren, w.sw.copyChildWAL = false, false
	w.sw.pOpenFault = 0
	w.setup()
	for range 40 {
		w.clientOp()
	}
	parent := w.n.Table().ActiveShards()[0]
	var sp *splitter.Operation
	if !w.do(func() { sp = w.drv.Start(splitter.SplitPlan(parent, 2)) }) {
		t.Fatalf("seed %d: process died starting the split", seed)
	}
	for sp.Machine().Ready().Intent.Kind != splitter.IntentBuildTargets {
		var err error
		if !w.do(func() { _, _, err = sp.Next() }) || err != nil || sp.Done() {
			t.Logf("seed %d: the split did not reach create-children (%v)", seed, err)
			return false
		}
	}
	rec, _ := w.n.Table().Split(parent)
	dir := w.n.Engine().ShardDir(rec.Children[0].Shard)
	mem := w.mem.FS(nil)
	stepDone := make(chan struct{})
	w.spawn(func() { // the dead process's step: it goes on
		defer close(stepDone)
		defer func() { _ = recover() }()
		_, _, _ = sp.Next()
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := mem.Stat(dir); err == nil {
			break
		}
		select {
		case <-stepDone:
			t.Logf("seed %d: the step ended before the checkpoint began", seed)
			return false
		default:
		}
		if time.Now().After(deadline) {
			t.Logf("seed %d: no checkpoint directory after 5 s", seed)
			return false
		}
		if w.clk.Waiters() > 0 {
			w.clk.Advance(advanceSim)
		}
	}
	select {
	case <-stepDone:
	default:
		landed = true
	}
	// Pebble declared the process dead on another goroutine: afterStep.
	w.fatalMsg = "a Fatalf on another goroutine of the step"
	crashed := make(chan struct{})
	go func() {
		defer close(crashed)
		defer func() {
			if r := recover(); r != nil {
				if f, ok := r.(*finding); ok {
					t.Errorf("seed %d: simulator finding after the crash: %s", seed, simkit.FirstLine(f.msg))
				} else {
					t.Errorf("seed %d: panic after the crash: %v", seed, r)
				}
			}
		}()
		w.crashDead()
	}()
	select {
	case <-crashed:
	case <-time.After(20 * time.Second):
		t.Logf("the goroutines in MemFS's clone lock:\n%s", stuckInMemFS())
		t.Fatalf("seed %d: the simulator's crash (vfs.MemFS.CrashClone) did not return in 20 s beside the dead process's create-children step: deadlocked with a MemFS.Link or MemFS.Lock", seed)
	}
	return landed
}

// stuckInMemFS returns the stacks of the goroutines inside MemFS's
// CrashClone, Link or Lock.
func stuckInMemFS() string {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 2)
	var out []string
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(g, "MemFS).CrashClone") || strings.Contains(g, "MemFS).Link") || strings.Contains(g, "MemFS).Lock") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// TestReclaimWaitsForTheDeadProcessCalls: the reclaim of a dead process
// closes none of its stores while one of its calls is still running (a
// call of a dead process goes on in the simulator; see spawn), and closes
// them once it has returned. Before spawn, reclaim closed the engine at
// once: the flaky SIGSEGV of TestCrashBesideADeadProcessStep, a
// create-children step's excise inside a store the close had freed.
func TestReclaimWaitsForTheDeadProcessCalls(t *testing.T) {
	w := aliveWorld(t, 7)
	defer w.teardown()
	id, old := firstShard(t, w)
	closed := func() bool { return shardClosed(old) }
	release := make(chan struct{})
	w.spawn(func() { <-release }) // stands for a call still inside Pebble when the process dies
	w.fatalMsg = "a Fatalf on another goroutine of the process"
	w.crashDead()
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if closed() {
			close(release)
			t.Fatalf("shard %d of the dead process was closed while one of its calls still ran", id)
		}
	}
	close(release)
	for deadline := time.Now().Add(hangTimeout); !closed(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("shard %d of the dead process was not closed %v after its last call returned", id, hangTimeout)
		}
	}
}

// shardClosed reports whether s is closed (TestReclaimWaitsForTheDeadProcessCalls's
// probe). It asks through the store's gate: GetAny holds it while in
// Pebble, and a close waits for it. A Scan does not: it checks the closed
// flag, then takes a snapshot with nothing holding the close off, so a
// probe that passed the flag just before the reclaim set it took its
// snapshot of a closed DB ("pebble: closed", a panic that kills the test
// binary) or iterated one being closed (TestShardClosedProbeBesideTheReclaimDoesNotPanic).
func shardClosed(s *storage.Shard) bool {
	_, _, err := s.GetAny(s.Keyspace(), 0, "shard-closed-probe")
	return errors.Is(err, storage.ErrShardClosed)
}
