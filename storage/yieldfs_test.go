package storage

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/internal/clock"
)

// Every blocking file operation of a store but its WAL's (and directory
// syncs) yields the processor after it (yieldfs.go): a file's writes and
// syncs, creating, linking, renaming and removing files, making
// directories.
func TestBlockingFileOperationsYieldButTheWALs(t *testing.T) {
	var yields int
	c := &cancelFS{FS: vfs.NewMem(), dir: "/s", yieldHook: func() { yields++ }}
	counted := func(op string, do func() error) int {
		t.Helper()
		before := yields
		if err := do(); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		return yields - before
	}
	got := map[string]int{}
	got["mkdir"] = counted("mkdir", func() error { return c.MkdirAll("/s", 0o755) })
	for _, cat := range []vfs.DiskWriteCategory{walWriteCategory, flushWriteCategory, compactionWriteCategory, "pebble-manifest"} {
		var f vfs.File
		got["create "+string(cat)] = counted("create", func() (err error) {
			f, err = c.Create("/s/"+string(cat), cat)
			return err
		})
		got["write, sync, sync data "+string(cat)] = counted("write", func() error {
			if _, err := f.Write([]byte("x")); err != nil {
				return err
			}
			if err := f.Sync(); err != nil {
				return err
			}
			return f.SyncData()
		})
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	got["link"] = counted("link", func() error { return c.Link("/s/pebble-manifest", "/s/linked") })
	got["rename"] = counted("rename", func() error { return c.Rename("/s/linked", "/s/renamed") })
	got["remove"] = counted("remove", func() error { return c.Remove("/s/renamed") })
	got["directory sync"] = counted("directory sync", func() error {
		d, err := c.OpenDir("/s")
		if err != nil {
			return err
		}
		defer d.Close()
		return d.Sync()
	})
	want := map[string]int{
		"mkdir": 1, "link": 1, "rename": 1, "remove": 1, "directory sync": 0,
		// A WAL's creation, writes and syncs do not yield.
		"create pebble-wal": 0, "write, sync, sync data pebble-wal": 0,
		"create pebble-memtable-flush": 1, "write, sync, sync data pebble-memtable-flush": 3,
		"create pebble-compaction": 1, "write, sync, sync data pebble-compaction": 3,
		"create pebble-manifest": 1, "write, sync, sync data pebble-manifest": 3,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("yields per operation (-want +got):\n%s", d)
	}
}

// Only a store on the operating system's filesystem yields: an in-memory
// store has no syscall to hold a processor in (yieldfs.go).
func TestOnlyAStoreOnDiskYields(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   vfs.FS
		dir  string
		want bool
	}{
		{"disk", vfs.Default, t.TempDir(), true},
		{"memory", vfs.NewMem(), "/s", false},
	} {
		st, err := openStore(tc.dir, storeOptions{fs: tc.fs, logger: zap.NewNop(), clock: clock.Real{}}, false)
		if err != nil {
			t.Fatal(err)
		}
		if st.cfs.onDisk != tc.want {
			t.Errorf("%s: onDisk %v, want %v", tc.name, st.cfs.onDisk, tc.want)
		}
		if err := st.close(); err != nil {
			t.Fatal(err)
		}
	}
}

// A file wrapped in yieldFile, alone or around a
// cancelFile or pacedFile, still reports the OS file's descriptor (Fd,
// which Pebble's syncing file and Prefetch use) and forwards Preallocate:
// the wrappers embed vfs.File, and Pebble v2.1.7 type-asserts no optional
// interface on a vfs.File it gets from Create.
func TestYieldFileForwardsFdAndPreallocate(t *testing.T) {
	dir := t.TempDir()
	c := &cancelFS{FS: vfs.Default, dir: dir, pacer: newFlushPacer(DefaultSplitFlushRate), yieldHook: func() {}}
	c.paced.Add(1)
	for _, cat := range []vfs.DiskWriteCategory{compactionWriteCategory, flushWriteCategory, "pebble-manifest"} {
		f, err := c.Create(filepath.Join(dir, string(cat)), cat)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := f.(yieldFile); !ok {
			t.Errorf("%s: %T, not a yieldFile", cat, f)
		}
		if f.Fd() == vfs.InvalidFd {
			t.Errorf("%s: %T hides the descriptor", cat, f.(yieldFile).File)
		}
		if err := f.Preallocate(0, 4096); err != nil {
			t.Errorf("%s: preallocate: %v", cat, err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// flushGateFS holds every flush output's creation until gate closes.
type flushGateFS struct {
	vfs.FS
	gate chan struct{}
}

func (f flushGateFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if category == flushWriteCategory {
		<-f.gate
	}
	return f.FS.Create(name, category)
}

// stallRun is one memtable write stall ended by a gated flush.
type stallRun struct {
	yields, stalledYields int64         // yields in all, and while a writer of the store was stalled
	stall                 time.Duration // from the flush's release to the stall's end
}

// runMemtableStall fills a store's memtables while its flush is held, so
// that a writer stalls (memtable count limit), then lets the flush go and
// measures the stall from there. hook wraps the store's yield.
func runMemtableStall(t *testing.T, busy int, hook func(yield func())) stallRun {
	t.Helper()
	g := flushGateFS{FS: vfs.NewMem(), gate: make(chan struct{})}
	st, err := openStore("/data/shard-1", storeOptions{fs: g, logger: zap.NewNop(), clock: clock.Real{}}, false)
	if err != nil {
		t.Fatal(err)
	}
	var run stallRun
	var yields, stalledYields atomic.Int64
	// Set before the first write: every file operation of the store after
	// open happens after it (the flush and the cleaner get their work
	// through Pebble's channels and mutexes).
	st.cfs.yieldHook = func() {
		yields.Add(1)
		if st.cfs.stalls.Load() > 0 {
			stalledYields.Add(1)
		}
		hook(runtime.Gosched)
	}
	released := false
	release := func() {
		if !released {
			released = true
			close(g.gate)
		}
	}
	defer func() {
		release()
		if err := st.close(); err != nil {
			t.Error(err)
		}
	}()
	wrote := make(chan error, 1)
	go func() {
		val := make([]byte, 64<<10)
		for i := 0; i < 1024; i++ { // 64 MiB: past 2 x 16 MiB of memtables
			if err := st.db.Set([]byte(fmt.Sprintf("k%06d", i)), val, pebble.NoSync); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	for deadline := time.Now().Add(20 * time.Second); st.cfs.stalls.Load() == 0; time.Sleep(time.Millisecond) {
		select {
		case err := <-wrote:
			t.Fatalf("the writes ended (%v) without a write stall", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no write stall with the flush held")
		}
	}
	// Background goroutines that want the processor meanwhile, as a
	// split's children do (the commit's trace: 0.1-0.2 ms between
	// operations that now yield).
	stop := make(chan struct{})
	for range busy {
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for end := time.Now().Add(150 * time.Microsecond); time.Now().Before(end); {
				}
				runtime.Gosched()
			}
		}()
	}
	defer close(stop)
	start := time.Now()
	release()
	for st.cfs.stalls.Load() > 0 {
		time.Sleep(100 * time.Microsecond)
	}
	run.stall = time.Since(start)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	run.yields, run.stalledYields = yields.Load(), stalledYields.Load()
	return run
}

// No yield is taken while the store's writers are in a write stall: they
// would sit on the writers' critical path. A memtable-count stall waits
// for the flush (an L0 stall for a compaction), and that flush would
// yield after creating its table, after each block write, each SyncTo and
// sync, and again after each MANIFEST write and sync of its version edit,
// the last under the manifest lock (versionSet.logLock), which the install
// waits for. The writers are not runnable then (they wait on Pebble's
// condition variable), so every yield would serve other background work
// and delay the end of the stall: the same reason the WAL is exempt ("a
// yield would only lengthen the rotation"). The store knows when its
// writers are stalled (cancelFS.stalls).
func TestNoYieldWhileTheStoresWritersAreStalled(t *testing.T) {
	run := runMemtableStall(t, 0, func(yield func()) { yield() })
	t.Logf("%d yields in all, %d while a writer was stalled; stall %v after the flush's release", run.yields, run.stalledYields, run.stall)
	if run.stalledYields > 0 {
		t.Errorf("%d yields were taken while the store's writers were stalled, by the flush that ends the stall: each puts the stall's critical path at the back of the run queue", run.stalledYields)
	}
}

// Measurement (logs only): the stall's length after the flush is released,
// with two busy background goroutines on this 2-core machine, with the
// yields and with them turned off (the hook skips runtime.Gosched).
func TestStallLengthWithBusyGoroutines(t *testing.T) {
	if os.Getenv("SHARDSPLIT_YIELD_PROBE") == "" {
		t.Skip("a manual measurement: SHARDSPLIT_YIELD_PROBE=1")
	}
	for i := 0; i < 3; i++ {
		with := runMemtableStall(t, 2, func(yield func()) { yield() })
		without := runMemtableStall(t, 2, func(func()) {})
		t.Logf("pair %d: stall %v with yields (%d of them during it), %v without", i, with.stall, with.stalledYields, without.stall)
	}
}
