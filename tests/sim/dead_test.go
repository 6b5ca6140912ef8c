package sim

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/recovery"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
	"github.com/shardsplit/shardsplit/storage/crashfs"
	"github.com/shardsplit/shardsplit/tests/simkit"
)

// manifestFault fails every MANIFEST write and sync once armed: a flush
// that then updates its store's MANIFEST calls Pebble's Fatalf holding the
// DB's mutex (versionSet.UpdateVersionLocked relocks it first), the death
// seed 418 met.
type manifestFault struct{ armed atomic.Bool }

func (m *manifestFault) MaybeError(op errorfs.Op) error {
	if !m.armed.Load() || !strings.HasPrefix(filepath.Base(op.Path), "MANIFEST") || op.Kind.ReadOrWrite() != errorfs.OpIsWrite {
		return nil
	}
	return fmt.Errorf("injected on %s: %w", op.Path, syscall.EIO)
}

func (m *manifestFault) String() string { return "manifest" }

// dyingWorld is a world whose node (one shard, per-shard layout) holds a
// document, with a reader parked on it if hold is set; then a background
// flush of that shard dies in Pebble's Fatalf with the DB's mutex held.
// The death is pending on w.fatal: no step has seen it yet.
func dyingWorld(t *testing.T, hold bool) *world {
	t.Helper()
	clk := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	w := &world{seed: 1, rng: rand.New(rand.NewPCG(1, 0x5eed)), clk: clk, model: newSharedModel(), mem: crashfs.New(), hist: &history{}}
	w.sw.layout = storage.LayoutPerShard
	tab, err := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 1, RoutingShards: 2, PartitionSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	w.initial = tab
	fault := &manifestFault{}
	logger, fatal := newIncarnationLogger()
	opts := storage.Options{Dir: "/data", FS: errorfs.Wrap(w.mem.FS(nil), fault), Layout: storage.LayoutPerShard,
		Durability: storage.DurabilityRequest, CacheBytes: 1 << 20, Logger: logger, Clock: clk}
	n, j, _, err := recovery.Open(opts, tab, logger)
	if err != nil {
		t.Fatal(err)
	}
	w.n, w.j, w.fatal = n, j, fatal
	w.inj = &injector{fired: 1} // the MANIFEST fault is this incarnation's
	r := node.NewRouter(n, tab, node.RouterConfig{MaxRetries: 16, Clock: clk})
	pw := w.model.Begin("k0", "v0")
	if _, err := r.Index("k0", "", []byte("v0")); err != nil {
		t.Fatal(err)
	}
	w.model.Ack(pw)
	if hold {
		w.holdReader()
		if len(w.readers) != 1 {
			t.Fatalf("no reader parked: %v", w.trace)
		}
	}
	fault.armed.Store(true)
	// A batch of half the memtable's size or more is flushed on its own
	// at once, in the background.
	big := make([]byte, 9<<20)
	w.model.Begin("big", string(big)) // in flight when the process dies
	go func() { _, _ = r.Index("big", "", big) }()
	select {
	case msg := <-fatal:
		fatal <- msg // pending: seen by no step yet
	case <-time.After(hangTimeout):
		t.Fatal("the flush did not die")
	}
	return w
}

// catch runs fn and returns the finding it raised, if any.
func catch(fn func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(*finding)
			if !ok {
				panic(r)
			}
			msg = simkit.FirstLine(f.msg)
		}
	}()
	fn()
	return ""
}

// A reader started on a process that has just died (its death pending
// since the last step) blocks on the dead store's mutex before its first
// document: the step is the process's death, not a hang.
func TestHoldReaderOnADeadProcess(t *testing.T) {
	w := dyingWorld(t, false)
	if msg := catch(w.holdReader); msg != "" {
		t.Fatalf("holdReader on a dead process: finding %q", msg)
	}
	if !w.noticeFatal() {
		t.Errorf("the death was lost: trace %v", w.trace)
	}
}

// The liveness phase releases the readers first: one of a dead process
// blocks, the death is found there (finishReader), and the process must
// then count as unhealthy without being probed (the probe's fsync takes
// the dead store's mutex too).
func TestLivenessAfterADeathFoundByAReader(t *testing.T) {
	w := dyingWorld(t, true)
	var healthy bool
	if msg := catch(func() {
		w.releaseAll()
		healthy = w.healthy()
	}); msg != "" {
		t.Fatalf("finding %q", msg)
	}
	if healthy {
		t.Errorf("a dead process probed healthy: trace %v", w.trace)
	}
}

// A death that reaches the simulator only while the step's check scans
// (after afterStep's poll) is turned into a crash before the step ends:
// the next step runs on a recovered node. Seed 246 of a 3000-seed run:
// the check's scan took the death's message, afterStep returned, and the
// next step's search waited on the dead store's mutex for ever (a hang).
func TestADeathTheCheckFindsIsACrashBeforeTheNextStep(t *testing.T) {
	w := dyingWorld(t, false)
	msg := <-w.fatal
	late := make(chan string, 1)
	w.fatal = late
	go func() {
		// By now afterStep's poll has passed, and the check waits on the
		// dead store's mutex.
		time.Sleep(50 * time.Millisecond)
		late <- msg
	}()
	dead := w.n
	if f := catch(w.afterStep); f != "" {
		t.Fatalf("afterStep: finding %q\ntrace %v", f, w.trace)
	}
	if w.fatalMsg != "" || w.dead || w.n == dead {
		t.Fatalf("the step ended on the dead process (death %q, dead=%v, node replaced=%v)\ntrace %v",
			simkit.FirstLine(w.fatalMsg), w.dead, w.n != dead, w.trace)
	}
}

// A call into a process whose death is known but not yet turned into a
// crash returns at once as the process's death: it must not wait on the
// dead store's mutex for a second message that never comes.
func TestACallIntoAKnownDeadProcessDoesNotWait(t *testing.T) {
	w := dyingWorld(t, false)
	w.fatalMsg = <-w.fatal // taken by an earlier call of the step
	start := time.Now()
	if f := catch(func() { w.search("c0 search", "") }); f != "" {
		t.Fatalf("search on a known-dead process: finding %q", f)
	}
	if took := time.Since(start); took > hangTimeout/2 {
		t.Errorf("the search took %v", took)
	}
	if last := w.trace[len(w.trace)-1]; !strings.Contains(last, "process died") {
		t.Errorf("the search's outcome: %q, want the process's death", last)
	}
}

// holdReader is a call into the process, and on a process whose death is
// known it must not wait: its search would block on the dead store's mutex
// before the first document, the death's message is taken already, and
// the step would wait hangTimeout and report a hang that is the
// simulator's, not the system's.
func TestHoldReaderOnAKnownDeadProcessDoesNotWait(t *testing.T) {
	w := dyingWorld(t, false)
	w.fatalMsg = <-w.fatal // known
	start := time.Now()
	if f := catch(w.holdReader); f != "" {
		t.Fatalf("holdReader on a known-dead process after %v: finding %q", time.Since(start), f)
	}
	if took := time.Since(start); took > hangTimeout/4 {
		t.Errorf("holdReader on a known-dead process took %v", took)
	}
	if len(w.readers) != 0 {
		t.Errorf("a reader was parked on a dead process")
	}
}

// afterStep ends a step only on a live process: w.dead with no message is
// a known death as well (healthy leaves it so when its probe meets the
// death), and a step ended on it would go on checking nothing, every later
// do returning false at once. afterStep turns it into a crash.
func TestAfterStepOnAProcessMarkedDeadCrashesIt(t *testing.T) {
	w := dyingWorld(t, false)
	<-w.fatal
	w.fatalMsg, w.dead = "", true // as healthy leaves a probe that met the death
	dead := w.n
	if f := catch(w.afterStep); f != "" {
		t.Fatalf("afterStep: finding %q\ntrace %v", f, w.trace)
	}
	if w.dead || w.n == dead {
		t.Fatalf("the step ended on the dead process (dead=%v, node replaced=%v)\ntrace %v", w.dead, w.n != dead, w.trace)
	}
}
