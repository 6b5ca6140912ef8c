package storage

import (
	"fmt"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
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
// 4 GiB parent under load (issue 15): a multilevel L4+L5+L6 compaction of
// 778 MB ran 6.1 s, started before the split and finished 3.3 s after the
// handoff, and the parent's close waited for it; meanwhile it competed with
// the children for the disk and both cores, writing tables no one would
// read.
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
// It also paces the flushes a split starts (pace, pacefs.go).
type cancelFS struct {
	vfs.FS
	epoch   atomic.Uint64 // incremented by each cancel
	retired atomic.Bool

	flushRate  int64        // bytes a second of a paced flush; <= 0: never paced
	paced      atomic.Int32 // > 0: new flush outputs are paced
	pacedBytes atomic.Int64 // bytes written through paced flush outputs
}

// cancel fails every compaction output file open now.
func (c *cancelFS) cancel() { c.epoch.Add(1) }

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
	return f.File.Read(p)
}

func (f *retirableFile) ReadAt(p []byte, off int64) (int, error) {
	if f.fs.retired.Load() {
		return 0, errStoreRetired
	}
	return f.File.ReadAt(p, off)
}

// Create implements vfs.FS.
func (c *cancelFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := c.FS.Create(name, category)
	if err == nil && category == flushWriteCategory && c.paced.Load() > 0 {
		return &pacedFile{File: f, rate: float64(c.flushRate), written: &c.pacedBytes}, nil
	}
	if err != nil || category != compactionWriteCategory {
		return f, err
	}
	return &cancelFile{File: f, fs: c, epoch: c.epoch.Load()}, nil
}

// Unwrap returns the wrapped filesystem.
func (c *cancelFS) Unwrap() vfs.FS { return c.FS }

// cancelFile is a compaction output; its writes fail once its store
// cancelled its compactions.
type cancelFile struct {
	vfs.File
	fs    *cancelFS
	epoch uint64
}

func (f *cancelFile) cancelled() bool { return f.fs.epoch.Load() != f.epoch }

func (f *cancelFile) Write(p []byte) (int, error) {
	if f.cancelled() {
		return 0, errCompactionCancelled
	}
	return f.File.Write(p)
}

func (f *cancelFile) WriteAt(p []byte, off int64) (int, error) {
	if f.cancelled() {
		return 0, errCompactionCancelled
	}
	return f.File.WriteAt(p, off)
}

func (f *cancelFile) Sync() error {
	if f.cancelled() {
		return errCompactionCancelled
	}
	return f.File.Sync()
}

func (f *cancelFile) SyncData() error {
	if f.cancelled() {
		return errCompactionCancelled
	}
	return f.File.SyncData()
}

func (f *cancelFile) SyncTo(length int64) (bool, error) {
	if f.cancelled() {
		return false, errCompactionCancelled
	}
	return f.File.SyncTo(length)
}
