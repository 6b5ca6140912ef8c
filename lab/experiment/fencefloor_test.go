//go:build linux

package experiment

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// TestFenceFloorProbe is a manual probe (skipped unless
// SHARDSPLIT_FENCE_PROBE names a dataset cache directory, as
// SHARDSPLIT_SCALE_PROBE does): what does a fence cost the writers when it
// does no work at all? Every handoff fences its parent, so this is the
// floor under the longest stall of any split that fences, measured under
// the probe's load (64 writers, 5,000 fsync'd writes/s) on the
// probe's dataset (SHARDSPLIT_SCALE_DOCS).
//
// After the parent's first own flush and 2 s of load, rounds of windows
// SHARDSPLIT_FENCE_WINDOW long (default 23 ms, an aligned 100 MiB split's
// length on the machine it was written on) follow each other, 150 ms
// apart, in turn:
//   - steady: nothing happens (the denominator, in the same run);
//   - fence: in the window's middle the parent's apply lock is taken (the
//     writes in flight drain) and released at once;
//   - fence+sync: the same, held over a synced write to the parent's WAL,
//     as a handoff holds it over work that ends with an fsync;
//   - spin: one goroutine runs SHARDSPLIT_FENCE_SPIN (default 10 ms) of
//     pure Go CPU work from the window's middle, and nothing else;
//   - spin-yield: the same, calling runtime.Gosched after every
//     SHARDSPLIT_FENCE_SPIN_CHUNK (default 50 µs) of it;
//   - spin-paced: the same CPU time in bursts of SHARDSPLIT_FENCE_SPIN_CHUNK,
//     each followed by a sleep four times as long;
//   - spin-nice: the same on a locked OS thread at nice 19;
//   - spin-idle: the same on a locked OS thread under Linux's SCHED_IDLE
//     policy, which a waking thread of any other policy preempts at once
//     (nice 19 is only a smaller share of the CPU);
//   - spin-proc: the same spin in another process (this binary again),
//     so nothing of it runs in this process's Go runtime;
//   - children: from the window's middle, a split's clone phase without
//     the split: the parent's log and compactions held, its two halves made
//     as children (Engine.CreateChildren, together, as the splitter makes
//     them); after the window they are destroyed and the holds dropped.
//
// SHARDSPLIT_FENCE_KINDS (comma-separated) picks the kinds besides steady.
//
// The probe reports, for each kind, the median, 90th percentile and range of
// the window's longest stall, its ratio to steady, the process's CPU time
// (user and system) in the window, with spin-proc's helper's, and the
// window's length. The project's goal asks a split's longest stall to be
// at most 1.25 times the steady windows'. The spin
// kinds ask what CPU time alone costs the writers, and whether where it
// runs (another goroutine, thread priority or policy, another process) or
// its shape (yields, idle gaps) changes that; children, what a split's
// clone phase costs them without the split.
func TestFenceFloorProbe(t *testing.T) {
	cache := os.Getenv("SHARDSPLIT_FENCE_PROBE")
	if cache == "" {
		t.Skip("SHARDSPLIT_FENCE_PROBE not set")
	}
	window := envDuration(t, "SHARDSPLIT_FENCE_WINDOW", 23*time.Millisecond)
	spin := envDuration(t, "SHARDSPLIT_FENCE_SPIN", 10*time.Millisecond)
	chunk := envDuration(t, "SHARDSPLIT_FENCE_SPIN_CHUNK", 50*time.Microsecond)
	rounds := 30
	if r := os.Getenv("SHARDSPLIT_FENCE_ROUNDS"); r != "" {
		var err error
		if rounds, err = strconv.Atoi(r); err != nil || rounds < 1 {
			t.Fatalf("SHARDSPLIT_FENCE_ROUNDS=%q: want a positive count", r)
		}
	}
	cfg, d := probeDataset(t, cache)
	runDir := filepath.Join(cache, "fence-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := d.Clone(runDir); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(runDir)
	eng, err := storage.Open(storage.Options{Dir: runDir, Layout: cfg.Layout, Durability: storage.DurabilityRequest})
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(node.Config{Engine: eng})
	if err != nil {
		_ = eng.Close()
		t.Fatal(err)
	}
	defer n.Close()
	const parent = routing.ShardID(0)
	shard, ok := n.ShardStore(parent)
	if !ok {
		t.Fatalf("no shard %d", parent)
	}
	load := cfg.Load
	load.Rate = 5000
	load.Moving = func(string, string) bool { return true } // one shard: every write
	load.Defaults()
	sink := &routerSink{n: n, first: n.Table(), counts: make([]int, load.Writers)}
	for range load.Writers {
		sink.routers = append(sink.routers, node.NewRouter(n, n.Table(), node.RouterConfig{MaxRetries: 16}))
	}
	out := &Outcome{}
	ctx := context.Background()
	run := startLoad(ctx, load, sink, readLoad{}, func() int64 { return 0 }, out)
	// fail stops the load before the test ends: the deferred close
	// would otherwise race its writers.
	fail := func(format string, args ...any) {
		t.Helper()
		run.stopLoad(out)
		run.stopDisk()
		t.Fatalf(format, args...)
	}
	warm, warmed := awaitFirstFlush(ctx, n, parent, WarmFlush)
	t.Logf("warmed: waited %.1f ms for the parent's first own flush (it came: %v)", ms(warm), warmed)
	time.Sleep(2 * time.Second)

	// The spin-proc kind's helper: this test binary again, spinning on
	// request (TestSpinHelper), started before the load.
	// SHARDSPLIT_FENCE_HELPER_NICE=19 starts it under nice(1).
	helper := exec.Command(os.Args[0], "-test.run=^TestSpinHelper$")
	if v := os.Getenv("SHARDSPLIT_FENCE_HELPER_NICE"); v != "" {
		helper = exec.Command("nice", "-n", v, os.Args[0], "-test.run=^TestSpinHelper$")
	}
	helper.Env = append(os.Environ(), "SHARDSPLIT_SPIN_HELPER="+spin.String())
	toHelper, err := helper.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	fromHelper, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = toHelper.Close(); _ = helper.Wait() }()
	leaves := n.Table().Leaves(parent)
	if len(leaves) != 1 {
		t.Fatalf("shard %d: %d leaves, want 1", parent, len(leaves))
	}
	halves := []storage.ChildSpec{
		{Shard: parent + 1, Span: routing.Span{Start: leaves[0].Span.Start, End: leaves[0].Span.Start + leaves[0].Span.Width()/2}},
		{Shard: parent + 2, Span: routing.Span{Start: leaves[0].Span.Start + leaves[0].Span.Width()/2, End: leaves[0].Span.End}},
	}
	var made []*storage.Shard // the children kind's, until after its window
	// The CPU the helper spent in a window, which getrusage of this
	// process does not see.
	var helperCPU time.Duration
	undo := func() error {
		var errs []error
		for _, c := range made {
			if c != nil {
				errs = append(errs, n.Engine().DestroyShard(c.ID()))
			}
		}
		if made != nil {
			shard.ReleaseCompactions()
			errs = append(errs, shard.ReleaseLog())
		}
		made = nil
		return errors.Join(errs...)
	}
	type probeKind struct {
		name string
		act  func() error
	}
	kinds := []probeKind{
		{"steady", func() error { return nil }},
		{"spin", func() error { onGoroutine(func() { spinFor(spin) }); return nil }},
		{"spin-yield", func() error {
			onGoroutine(func() {
				for ran := time.Duration(0); ran < spin; ran += chunk {
					spinFor(chunk)
					runtime.Gosched()
				}
			})
			return nil
		}},
		{"spin-paced", func() error {
			onGoroutine(func() {
				for ran := time.Duration(0); ran < spin; ran += chunk {
					spinFor(chunk)
					time.Sleep(4 * chunk)
				}
			})
			return nil
		}},
		{"spin-nice", func() error {
			return spinLowered(spin, func() error { return syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), 19) })
		}},
		{"spin-idle", func() error { return spinLowered(spin, setIdlePolicy) }},
		{"spin-proc", func() error {
			if _, err := toHelper.Write([]byte{1}); err != nil {
				return fmt.Errorf("ask the helper to spin: %w", err)
			}
			var b [8]byte
			if _, err := io.ReadFull(fromHelper, b[:]); err != nil {
				return fmt.Errorf("await the helper's spin: %w", err)
			}
			helperCPU += time.Duration(binary.LittleEndian.Uint64(b[:]))
			return nil
		}},
		{"children", func() error {
			shard.HoldLog()
			n.Engine().HoldCompactions(shard)
			var err error
			made, _, err = n.Engine().CreateChildren(shard, halves, storage.ChildExcise, true)
			if made == nil {
				made = []*storage.Shard{}
			}
			return err
		}},
		{"fence", func() error {
			f, err := n.Fence(parent, time.Second)
			if err != nil {
				return err
			}
			f.Release()
			return nil
		}},
		{"fence+sync", func() error {
			f, err := n.Fence(parent, time.Second)
			if err != nil {
				return err
			}
			defer f.Release()
			return shard.Sync()
		}},
	}
	// SHARDSPLIT_FENCE_KINDS=steady,spin runs only those kinds (steady,
	// the denominator, always first): the children kind flushes the parent
	// at every window and releases its held compactions after, which
	// disturbs the windows that follow it.
	if v := os.Getenv("SHARDSPLIT_FENCE_KINDS"); v != "" {
		want := strings.Split(v, ",")
		// A name that is no kind (spin_proc) would run steady alone and
		// pass, as if the kind had been measured.
		for _, w := range want {
			if !slices.ContainsFunc(kinds, func(k probeKind) bool { return k.name == w }) {
				fail("SHARDSPLIT_FENCE_KINDS=%q: no kind %q", v, w)
			}
		}
		kept := kinds[:1]
		for _, k := range kinds[1:] {
			if slices.Contains(want, k.name) {
				kept = append(kept, k)
			}
		}
		kinds = kept
	}
	type span struct {
		from, to time.Duration
		cpu      time.Duration
	}
	spans := make([][]span, len(kinds))
	for range rounds {
		for k, kind := range kinds {
			time.Sleep(150 * time.Millisecond)
			cpu0 := probeCPU(t)
			helperCPU = 0
			from := run.since()
			time.Sleep(window / 2)
			if kind.name != "steady" {
				if err := kind.act(); err != nil {
					fail("%s: %v", kind.name, err)
				}
			}
			time.Sleep(time.Until(run.start.Add(from + window)))
			spans[k] = append(spans[k], span{from, run.since(), probeCPU(t) - cpu0 + helperCPU})
			if err := undo(); err != nil {
				fail("%s: undo: %v", kind.name, err)
			}
		}
	}
	run.stopLoad(out)
	run.stopDisk()
	t.Logf("%d writes acknowledged over %.1f s, %d windows of %s per kind", len(out.Load.Records), out.End.Seconds(), rounds, window)
	var steadyMedian time.Duration
	for k, kind := range kinds {
		var stalls, cpus, lengths []time.Duration
		for _, s := range spans[k] {
			stalls = append(stalls, loadgen.MaxStall(out.Load.Records, s.from, s.to))
			cpus = append(cpus, s.cpu)
			lengths = append(lengths, s.to-s.from)
		}
		slices.Sort(stalls)
		slices.Sort(cpus)
		slices.Sort(lengths)
		med := stalls[len(stalls)/2]
		if k == 0 {
			steadyMedian = med
		}
		// A kind whose act outlasts the window's second half (spin-paced
		// takes five times its spin; children, its flush) stretches the
		// window to the act's end, and a longer window has more chances
		// of a long stall: its length is reported beside its stall.
		t.Logf("%-10s longest stall per window: median %.2f ms (%.2f× steady), p90 %.2f, range %.2f–%.2f ms; CPU in the window median %.1f ms; window median %.1f ms, longest %.1f ms",
			kind.name, ms(med), float64(med)/float64(max(steadyMedian, 1)), ms(p90(stalls)),
			ms(stalls[0]), ms(stalls[len(stalls)-1]), ms(cpus[len(cpus)/2]), ms(lengths[len(lengths)/2]), ms(lengths[len(lengths)-1]))
	}
}

// p90 is the 90th percentile of sorted by nearest rank: the smallest
// value at least 90% of them are at or under.
func p90(sorted []time.Duration) time.Duration {
	return sorted[(9*len(sorted)+9)/10-1] // rank ceil(0.9 n), from 1
}

// envDuration is the duration in the environment variable name, or def.
func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

// spinFor keeps the CPU busy for d of its thread's CPU time, in Go code
// with no I/O and no locks. Spun by the wall clock instead, a spin the
// writers (or the scheduler, at nice 19) take the CPU from spends less than
// d: a 10 ms spin beside four busy loops on 2 vCPUs spent 3.9-6.6 ms. Each
// round spins, by the wall clock, the CPU time still owed, which it cannot
// overshoot; the thread's clock is read once a round.
func spinFor(d time.Duration) {
	runtime.LockOSThread() // the thread's CPU clock is this goroutine's
	defer runtime.UnlockOSThread()
	start := threadCPU()
	for left := d; left > 0; left = d - (threadCPU() - start) {
		for t := time.Now(); time.Since(t) < left; {
		}
	}
}

// probeCPU is the process's CPU time so far; the probe needs it.
func probeCPU(t *testing.T) time.Duration {
	t.Helper()
	d, ok := processCPU()
	if !ok {
		t.Fatal("this platform does not report the process's CPU time")
	}
	return d
}

// threadCPU is the CPU time the calling thread has used.
func threadCPU() time.Duration {
	const clockThreadCPUTimeID = 3 // CLOCK_THREAD_CPUTIME_ID
	var ts syscall.Timespec
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic(fmt.Sprintf("clock_gettime(CLOCK_THREAD_CPUTIME_ID): %v", errno))
	}
	return time.Duration(ts.Nano())
}

// spinLowered spins d on a goroutine whose locked OS thread lower has
// lowered (its nice value, its scheduling policy). Never unlocked: the
// runtime retires the thread with the goroutine (or parks it for good, if
// it is the process's main thread), so no other goroutine runs lowered.
func spinLowered(d time.Duration, lower func() error) error {
	var err error
	onGoroutine(func() {
		runtime.LockOSThread()
		if err = lower(); err == nil {
			spinFor(d)
		}
	})
	return err
}

// setIdlePolicy puts the calling thread under SCHED_IDLE (Linux).
func setIdlePolicy() error {
	const schedIdle = 5 // SCHED_IDLE
	var param struct{ priority int32 }
	if _, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, 0, schedIdle, uintptr(unsafe.Pointer(&param))); errno != 0 {
		return fmt.Errorf("sched_setscheduler(SCHED_IDLE): %w", errno)
	}
	return nil
}

// onGoroutine runs f on a goroutine of its own and waits for it.
func onGoroutine(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

// TestSpinHelper is TestFenceFloorProbe's other process (skipped unless
// SHARDSPLIT_SPIN_HELPER is a duration): for each byte on stdin it spins
// that long and writes back the CPU time that took (8 bytes, little
// endian, in nanoseconds), until stdin closes.
func TestSpinHelper(t *testing.T) {
	v := os.Getenv("SHARDSPLIT_SPIN_HELPER")
	if v == "" {
		t.Skip("SHARDSPLIT_SPIN_HELPER not set")
	}
	spin := envDuration(t, "SHARDSPLIT_SPIN_HELPER", 0)
	var b [1]byte
	for {
		if _, err := os.Stdin.Read(b[:]); err != nil {
			return
		}
		cpu0 := probeCPU(t)
		spinFor(spin)
		var out [8]byte
		binary.LittleEndian.PutUint64(out[:], uint64(probeCPU(t)-cpu0))
		if _, err := os.Stdout.Write(out[:]); err != nil {
			t.Fatal(err)
		}
	}
}

// The probe's 90th percentile is one of its windows: the 9th of 10, the
// 27th of 30, not the longest of 10.
func TestP90(t *testing.T) {
	for _, c := range []struct{ n, want int }{{1, 1}, {3, 3}, {10, 9}, {11, 10}, {30, 27}} {
		sorted := make([]time.Duration, c.n)
		for i := range sorted {
			sorted[i] = time.Duration(i + 1)
		}
		if got := p90(sorted); got != time.Duration(c.want) {
			t.Errorf("p90 of 1..%d = %d, want %d", c.n, got, c.want)
		}
	}
}
