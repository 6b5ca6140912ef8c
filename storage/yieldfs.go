package storage

import (
	"os"
	"runtime"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Blocking file operations yield the processor (runtime.Gosched) after
// they return, except the WAL's.
//
// Why: Go keeps a goroutine's P while it is
// in a short syscall, and the goroutine takes the P back when the syscall
// returns; the goroutines queued on that P run only when it blocks, is
// preempted (10 ms) or the runtime's monitor takes the P away from a
// syscall it watched for a whole tick (its tick grows to 10 ms on a
// quiet process). A split's children are made by goroutines that do
// little but file operations (checkpoint: links, copies, fsyncs; open and
// excise: creates, renames, MANIFEST syncs), one per child, and on this
// 2-core machine they held both Ps: a runtime trace of an aligned 100 MiB
// probe split showed six runnable goroutines (writers and the commit
// pipeline's) waiting 12.3 ms for a P while the two children's goroutines
// ran 0.1–0.2 ms between syscalls of ~1 ms and the processors were mostly
// idle; the writers' longest stall was 11.1 ms there. A yield after each
// such operation puts the goroutine at the back of the global queue and
// lets the queued ones run. In five alternated probe pairs (a diagnostic
// build yielding during the split only) the longest stall went 8.3 → 3.4
// ms (medians), the split 63 → 55 ms.
//
// The WAL is left alone: its creation, writes and syncs are the writers'
// own (the commit pipeline; a new WAL is made under Pebble's commit lock,
// where a yield would only lengthen the rotation). So are directory syncs:
// the store's directory handle serves the WAL's creation too. Reads are
// left alone because they serve requests. Everything else (flushes,
// compactions, MANIFEST, checkpoints) is background work that should let
// the foreground run.
//
// Nor does anything yield while the store's writers are in a write stall
// (stallBegan): they wait for this store's flush (a memtable stall) or
// compaction (an L0 stall), the very work that yields, and are not
// runnable themselves, so a yield only puts the stall's end behind other
// background work (TestNoYieldWhileTheStoresWritersAreStalled;
// with two goroutines busy 150 us between yields, the stall after its
// flush could run lasted a median 98 ms with the yields and 13.5 ms
// without them during the stall, 15 runs each, noisy).
//
// Only a store on the operating system's filesystem yields: an in-memory
// one (the simulation, most tests) makes no syscalls to hold a P in, and
// it only costs time there.
func (c *cancelFS) yield() {
	if c.stalls.Load() > 0 {
		return
	}
	if c.yieldHook != nil {
		c.yieldHook()
		return
	}
	if c.onDisk {
		runtime.Gosched()
	}
}

// yieldFile yields after each write and sync of a file that is not a WAL.
type yieldFile struct {
	vfs.File
	c *cancelFS
}

func (f yieldFile) Write(p []byte) (int, error) {
	defer f.c.yield()
	return f.File.Write(p)
}

func (f yieldFile) WriteAt(p []byte, off int64) (int, error) {
	defer f.c.yield()
	return f.File.WriteAt(p, off)
}

func (f yieldFile) Sync() error {
	defer f.c.yield()
	return f.File.Sync()
}

func (f yieldFile) SyncData() error {
	defer f.c.yield()
	return f.File.SyncData()
}

func (f yieldFile) SyncTo(length int64) (bool, error) {
	defer f.c.yield()
	return f.File.SyncTo(length)
}

// yielding wraps a file created with category: every one but a WAL.
func (c *cancelFS) yielding(f vfs.File, category vfs.DiskWriteCategory) vfs.File {
	if category == walWriteCategory {
		return f
	}
	return yieldFile{f, c}
}

// walWriteCategory is the category Pebble creates its WAL files with.
const walWriteCategory vfs.DiskWriteCategory = "pebble-wal"

// Link implements vfs.FS, yielding after it.
func (c *cancelFS) Link(oldname, newname string) error {
	defer c.yield()
	return c.FS.Link(oldname, newname)
}

// Rename implements vfs.FS, yielding after it.
func (c *cancelFS) Rename(oldname, newname string) error {
	defer c.yield()
	return c.FS.Rename(oldname, newname)
}

// MkdirAll implements vfs.FS, yielding after it.
func (c *cancelFS) MkdirAll(dir string, perm os.FileMode) error {
	defer c.yield()
	return c.FS.MkdirAll(dir, perm)
}
