package storage

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// walLengths lets a store recycle its WAL files (Pebble's default) while a
// checkpoint copies only what the store wrote to them.
//
// Why recycling (issue 15, tenth session): a flushed memtable's WAL used to
// be unlinked, and on this machine's filesystem (mounted with discard) an
// unlink delays the fsyncs of the writers' group commits: at the request,
// the split window's longest gap sat where the split's forced flush ended.
// A recycled WAL is renamed and rewritten instead.
//
// Why a length: a recycled file keeps the length of the log it replaced,
// and Pebble's Checkpoint copies each live WAL whole (vfs.CopyAcrossFS), so
// a child's copy was the recycled file's full size, a few KiB of records
// in up to a memtable's worth of stale bytes (15 MiB measured
// after a bulk load). Each WAL the store creates or reuses in this process
// records how many bytes were written to it, and a reader of that file sees
// it end there. Pebble writes a WAL from its start, in order, so that is
// every record the log holds; the stale bytes after it are what replay
// would skip anyway (a recycled log's chunks name their log number).
//
// A WAL from before this process's open (none is live after Pebble's
// Open, which starts a new log) has no length and reads whole.
type walLengths struct {
	dir string // the store's directory: only its own WALs are tracked
	mu  sync.Mutex
	n   map[string]*atomic.Int64 // path -> bytes written; under mu
}

func isWAL(name string) bool { return strings.HasSuffix(name, ".log") }

// track starts counting the writes to the WAL at name and returns f
// wrapped to count them. A file not in the store's directory is returned
// as it is.
func (w *walLengths) track(name string, f vfs.File, fs vfs.FS) vfs.File {
	if !isWAL(name) || fs.PathDir(name) != w.dir {
		return f
	}
	n := new(atomic.Int64)
	w.mu.Lock()
	if w.n == nil {
		w.n = map[string]*atomic.Int64{}
	}
	w.n[name] = n
	w.mu.Unlock()
	return &walWriteFile{File: f, n: n}
}

// length returns the counter of the WAL at name, or nil.
func (w *walLengths) length(name string) *atomic.Int64 {
	if !isWAL(name) {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n[name]
}

// forget drops the counter of name (removed, or renamed for reuse).
func (w *walLengths) forget(name string) {
	if !isWAL(name) {
		return
	}
	w.mu.Lock()
	delete(w.n, name)
	w.mu.Unlock()
}

// walWriteFile counts the bytes written to a WAL: the end of its highest
// write.
type walWriteFile struct {
	vfs.File
	n   *atomic.Int64
	off int64 // Write's position; Pebble's log writer is the only writer
}

func (f *walWriteFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	f.off += int64(n)
	f.raise(f.off)
	return n, err
}

func (f *walWriteFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	f.raise(off + int64(n))
	return n, err
}

func (f *walWriteFile) raise(end int64) {
	for {
		cur := f.n.Load()
		if end <= cur || f.n.CompareAndSwap(cur, end) {
			return
		}
	}
}

// capped limits the reads of a WAL to its written length (nil: no limit).
// It keeps Read's position, which the underlying file also advances.
type capped struct {
	n   *atomic.Int64
	pos int64
}

// read clips p to what is left before the written length; done says the
// reader is at the end.
func (c *capped) read(p []byte) (_ []byte, done bool) {
	if c.n == nil {
		return p, false
	}
	left := c.n.Load() - c.pos
	if left <= 0 {
		return p, true
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	return p, false
}

func (c *capped) readAt(p []byte, off int64) (_ []byte, done bool) {
	if c.n == nil {
		return p, false
	}
	left := c.n.Load() - off
	if left <= 0 {
		return p, true
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	return p, false
}
