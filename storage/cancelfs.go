package storage

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/internal/clock"
)

// errCompactionCancelled fails the writes of a compaction the store
// cancelled. It wraps Pebble's own cancellation error, so Pebble treats the
// failure as a cancellation (logged, not a background error) and deletes
// the compaction's partial outputs.
var errCompactionCancelled = fmt.Errorf("storage: compaction cancelled: %w", pebble.ErrCancelledCompaction)

// errStoreRetired fails every read of a store being destroyed (see
// cancelFS.retire); like errCompactionCancelled, Pebble reads it as a
// cancellation.
var errStoreRetired = fmt.Errorf("storage: store retired: %w", pebble.ErrCancelledCompaction)

// compactionWriteCategory is the category Pebble creates compaction outputs
// with (flushes use flushWriteCategory, and are never cancelled).
const compactionWriteCategory vfs.DiskWriteCategory = "pebble-compaction"

// cancelFS lets a store abandon the compactions it is running.
//
// Pebble has no call that stops a running compaction: it cancels one only
// when an excise or ingest overlaps it, and then only between output
// tables, which at this store's file sizes are 64–256 MiB apart (seconds of
// writing). DB.Close waits for every running compaction. Measured on a
// 4 GiB parent under load (design/2026-11-30-split-scale.md): a multilevel
// L4+L5+L6 compaction of 778 MB ran 6.1 s, started before the split and
// finished 3.3 s after the handoff, and the parent's close waited for it;
// meanwhile it competed with the children for the disk and both cores,
// writing tables no one would read.
//
// cancelFS fails the writes of every compaction output created before the
// last cancel, so such a compaction stops at its next block write and
// Pebble cleans up after it. Compactions that create their outputs after
// the cancel run normally (a compaction between two output tables at the
// moment of the cancel escapes it; it is the rare case and only costs
// time). Flushes, the WAL and the MANIFEST are never touched.
//
// A cancelled compaction still reads and compresses the rest of its current
// output table (Pebble's sstable writer learns of a failed write only when
// it closes the table): up to a second of CPU on a multi-GiB store. A store
// being destroyed has no readers left, so retire also fails every read,
// and the compaction stops at its next block.
//
// It can also pause them (pause): a parent being split keeps its running
// compaction, parked at its next output write, until the split ends. And
// it paces the flushes a split starts (pace, pacefs.go).
type cancelFS struct {
	vfs.FS
	epoch   atomic.Uint64 // incremented by each cancel
	retired atomic.Bool

	paused    atomic.Pointer[pauseGate] // non-nil: compaction outputs wait
	maxPause  time.Duration             // a pause's bound; 0: maxCompactionPause
	stalls    atomic.Int32              // writes Pebble holds in a write stall now (stallBegan)
	yieldHook func()                    // tests: replaces runtime.Gosched in yield (yieldfs.go)
	onDisk    bool                      // on the OS filesystem: yield (yieldfs.go)

	pacer      *flushPacer  // paces the split's flushes (pace); shared by a split's children made together; nil: never paced
	paced      atomic.Int32 // > 0: new flush outputs are paced
	pacedBytes atomic.Int64 // bytes written through paced flush outputs

	walMu    sync.Mutex
	emptyWAL map[string]int // checkpoint directories whose WAL copies are made empty (omitWAL); under walMu

	// readFailures counts the store's failed reads (an error, or a ReadAt
	// cut short by io.EOF) and the corruption Pebble reported:
	// store.excise refuses an excise during which one happened.
	readFailures atomic.Uint64
	lastFailure  atomic.Pointer[error] // the last of them

	dir    string     // the store's directory; "" parks no WAL deletion
	walDel walDeletes // WAL deletions parked while the store is split (waldefer.go)
}

// cancel fails every compaction output file open now (and wakes the
// paused ones, which then fail).
func (c *cancelFS) cancel() {
	c.epoch.Add(1)
	c.resume()
}

// maxCompactionPause bounds a pause: past it, paused compaction writes go
// on as if resumed. A split's clone, catch-up and handoff take well under a
// second even at 8 GiB; the bound only matters if a split is stuck.
const maxCompactionPause = 2 * time.Second

// pauseClock is the wall clock, as paceClock is: a paused writer is one of
// Pebble's compactions, which no simulated clock drives.
var pauseClock clock.Clock = clock.Real{}

// pauseGate is one pause: closed when it ends.
type pauseGate struct {
	open     chan struct{}
	deadline time.Time
}

// pause parks every compaction of the store at its next output write (or
// sync) until resume, cancel or maxPause; a pause asked for during a
// write stall ends at once (stallBegan). Flushes, the WAL and the
// MANIFEST are never paused. A paused compaction holds no lock writers
// need: Pebble writes outputs without its mutex.
//
// Why pause a split parent's running compaction rather than cancel it: a
// cancelled compaction deletes its partial outputs at once: on a 4 GiB
// parent an L5→L6 compaction had written ~200 MB when the split began, and
// their unlink on this machine's discard mount held the writers 99 and
// 109 ms and made the second child's checkpoint take 163 ms (probe pairs,
// design/2026-11-30-split-scale.md). Left running it competes with the
// split's fsyncs for the disk. Paused, it writes nothing until the split
// ends: a retiring parent then cancels it (cancel wakes it to fail), a
// cancelled split resumes it.
//
// NB: the bound is wall-clock time (pauseClock), not the store's clock: it
// is a liveness guard and must fire under a manual clock too.
func (c *cancelFS) pause() {
	bound := c.maxPause
	if bound <= 0 {
		bound = maxCompactionPause
	}
	g := &pauseGate{open: make(chan struct{}), deadline: pauseClock.Now().Add(bound)}
	for {
		old := c.paused.Load()
		if old != nil && pauseClock.Now().Before(old.deadline) {
			return // paused already
		}
		// None, or one past its bound that nothing resumed (a split that
		// failed without releasing): a new pause replaces it.
		if c.paused.CompareAndSwap(old, g) {
			if old != nil {
				close(old.open)
			}
			// A write stall in progress ends the pause at once: its
			// WriteStallBegin came before the pause (stallBegan).
			// Checked after the swap, so a stall that begins meanwhile
			// either sees the gate (and resumes it) or is seen here.
			if c.stalls.Load() > 0 {
				c.resume()
			}
			return
		}
	}
}

// stallBegan is Pebble's WriteStallBegin: a write stalled. It ends the
// pause, and until stallEnded no pause takes effect.
//
// NB: Pebble reports a stall once, when it begins, and the writers behind
// the stalled one wait on its commit pipeline without reporting anything.
// A pause that begins during a stall (a split of a parent whose L0 is at
// the stop-writes depth, the compaction that ends the stall running) would
// otherwise park that compaction with nothing to resume it, and the
// writers stayed stalled until the pause's bound
// (TestPauseDuringAWriteStallDoesNotProlongIt).
func (c *cancelFS) stallBegan() {
	c.stalls.Add(1)
	c.resume()
}

// stallEnded is Pebble's WriteStallEnd.
func (c *cancelFS) stallEnded() { c.stalls.Add(-1) }

// resume ends the pause, if any: paused compaction writes go on.
func (c *cancelFS) resume() {
	if g := c.paused.Swap(nil); g != nil {
		close(g.open)
	}
}

// awaitResume blocks a compaction write while the store is paused, up to
// the pause's bound.
func (c *cancelFS) awaitResume() {
	g := c.paused.Load()
	if g == nil {
		return
	}
	d := g.deadline.Sub(pauseClock.Now())
	if d <= 0 {
		return
	}
	select {
	case <-g.open:
	case <-pauseClock.After(d):
	}
}

// retire cancels the compactions and fails every read from now on: for a
// store whose readers are gone and which is about to be closed and removed.
func (c *cancelFS) retire() {
	c.retired.Store(true)
	c.cancel()
}

// Open implements vfs.FS.
func (c *cancelFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := c.FS.Open(name, opts...)
	if err != nil {
		return f, err
	}
	return &retirableFile{File: f, fs: c}, nil
}

// retirableFile is a file opened for reading; its reads fail once its
// store retired.
type retirableFile struct {
	vfs.File
	fs *cancelFS
}

func (f *retirableFile) Read(p []byte) (int, error) {
	if f.fs.retired.Load() {
		return 0, errStoreRetired
	}
	n, err := f.File.Read(p)
	f.fs.countReadFailure(err)
	return n, err
}

func (f *retirableFile) ReadAt(p []byte, off int64) (int, error) {
	if f.fs.retired.Load() {
		return 0, errStoreRetired
	}
	n, err := f.File.ReadAt(p, off)
	if err == io.EOF && n < len(p) {
		// A short read: Pebble's readable passes io.EOF up as the read's
		// error (objstorageprovider fileReadable.ReadAt), so it fails a
		// seek as EIO does (TestAShortTableReadDuringAnExciseFailsIt).
		f.fs.readFailed(fmt.Errorf("short read of %d bytes at %d: %w", len(p), off, err))
		return n, err
	}
	f.fs.countReadFailure(err)
	return n, err
}

func (c *cancelFS) countReadFailure(err error) {
	if err != nil && err != io.EOF {
		c.readFailed(err)
	}
}

// readFailed counts a failed read (or a corruption Pebble found).
func (c *cancelFS) readFailed(err error) {
	c.lastFailure.Store(&err)
	c.readFailures.Add(1)
}

// lastReadFailure returns the last failed read's error, or nil.
func (c *cancelFS) lastReadFailure() error {
	if p := c.lastFailure.Load(); p != nil {
		return *p
	}
	return nil
}

// Create implements vfs.FS.
func (c *cancelFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if category != walWriteCategory {
		defer c.yield() // yieldfs.go
	}
	f, err := c.FS.Create(name, category)
	if err != nil {
		return f, err
	}
	if c.omitsWAL(name) {
		return emptyWALFile{f}, nil
	}
	if category == flushWriteCategory && c.paced.Load() > 0 {
		return c.yielding(&pacedFile{File: f, pacer: c.pacer, written: &c.pacedBytes}, category), nil
	}
	if category != compactionWriteCategory {
		return c.yielding(f, category), nil
	}
	return c.yielding(&cancelFile{File: f, fs: c, epoch: c.epoch.Load()}, category), nil
}

// omitWAL makes the WAL files a checkpoint of the store into dir copies
// empty, until the returned function is called: the checkpoint then holds
// only what the store had flushed. Calls nest.
//
// Why: Pebble's Checkpoint always copies the live WAL, and
// opening the copy replays it and flushes all of it before Open returns,
// both halves of the keyspace, once per child. A split whose parent
// holds its operation log from before a flush needs none of it: the log
// has every write the flushed tables lack (Engine.CreateChildren).
// Pebble opens an empty WAL as a log with no records.
func (c *cancelFS) omitWAL(dir string) (done func()) {
	dir = c.FS.PathJoin(dir, "") // one spelling for omitsWAL's PathDir
	c.walMu.Lock()
	defer c.walMu.Unlock()
	if c.emptyWAL == nil {
		c.emptyWAL = map[string]int{}
	}
	c.emptyWAL[dir]++
	var once atomic.Bool
	return func() {
		if !once.CompareAndSwap(false, true) {
			return
		}
		c.walMu.Lock()
		defer c.walMu.Unlock()
		if c.emptyWAL[dir]--; c.emptyWAL[dir] == 0 {
			delete(c.emptyWAL, dir)
		}
	}
}

// omitsWAL says whether name is a WAL file in a directory of omitWAL.
func (c *cancelFS) omitsWAL(name string) bool {
	if !strings.HasSuffix(name, ".log") {
		return false
	}
	c.walMu.Lock()
	defer c.walMu.Unlock()
	return c.emptyWAL[c.FS.PathDir(name)] > 0
}

// emptyWALFile is a WAL copy left empty (omitWAL): its writes are dropped.
// Its syncs, close and everything else are the file's own.
type emptyWALFile struct{ vfs.File }

func (emptyWALFile) Write(p []byte) (int, error)            { return len(p), nil }
func (emptyWALFile) WriteAt(p []byte, _ int64) (int, error) { return len(p), nil }

// Unwrap returns the wrapped filesystem.
func (c *cancelFS) Unwrap() vfs.FS { return c.FS }

// cancelFile is a compaction output; its writes wait while its store is
// paused and fail once its store cancelled its compactions.
type cancelFile struct {
	vfs.File
	fs    *cancelFS
	epoch uint64
}

func (f *cancelFile) cancelled() bool { return f.fs.epoch.Load() != f.epoch }

func (f *cancelFile) Write(p []byte) (int, error) {
	f.fs.awaitResume()
	if f.cancelled() {
		return 0, errCompactionCancelled
	}
	return f.File.Write(p)
}

func (f *cancelFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.awaitResume()
	if f.cancelled() {
		return 0, errCompactionCancelled
	}
	return f.File.WriteAt(p, off)
}

func (f *cancelFile) Sync() error {
	f.fs.awaitResume()
	if f.cancelled() {
		return errCompactionCancelled
	}
	return f.File.Sync()
}

func (f *cancelFile) SyncData() error {
	f.fs.awaitResume()
	if f.cancelled() {
		return errCompactionCancelled
	}
	return f.File.SyncData()
}

func (f *cancelFile) SyncTo(length int64) (bool, error) {
	f.fs.awaitResume()
	if f.cancelled() {
		return false, errCompactionCancelled
	}
	return f.File.SyncTo(length)
}
