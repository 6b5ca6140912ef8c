package storage

import (
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// shrinkStep is how much of a retired store's file one truncation frees
// before the file is unlinked, and shrinkPause how long the deletion then
// waits, so that the writers' next WAL fsync commits what the step freed
// (see Remove).
const (
	shrinkStep  = 8 << 20
	shrinkPause = 2 * time.Millisecond
)

// Remove implements vfs.FS. A retired store's files are shortened
// shrinkStep at a time before they are unlinked.
//
// Why: retiring a split's parent cancels the
// compaction it had paused, and Pebble then deletes that compaction's
// outputs, often hundreds of MB (a 4 GiB parent's L5+L6 -> L6 compaction).
// On this project's machines freeing that much at once (ext4, mounted with
// discard) holds the next journal commit, so the children's writers, whose
// WAL fsyncs wait for it, saw 56-95 ms without an acknowledgement in the
// second after the handoff: the event log of a probe put the gap between
// the cancellation and the unlink of a 256 MB output. Freed in steps, each
// commit carries at most a step. A filesystem without file descriptors
// (vfs.MemFS) is unlinked at once.
//
// A WAL deletion during a split is parked instead (parkWALDelete).
func (c *cancelFS) Remove(name string) error {
	if c.parkWALDelete(name) {
		return nil
	}
	defer c.yield() // yieldfs.go
	if c.retired.Load() {
		c.shrink(name)
	}
	return c.FS.Remove(name)
}

// shrink truncates name shrinkStep at a time, pausing between steps, down
// to at most one step, if name is its file's only link; it gives up
// silently (the unlink that follows frees the rest).
func (c *cancelFS) shrink(name string) {
	f, err := c.FS.OpenReadWrite(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return
	}
	defer f.Close()
	fd := f.Fd()
	if fd == vfs.InvalidFd {
		return
	}
	info, err := f.Stat()
	if err != nil {
		return
	}
	if st, ok := info.Sys().(*syscall.Stat_t); !ok || st.Nlink != 1 {
		// Another name shares the file: a retired parent's table is
		// hard-linked into its children, and truncating it would cut
		// theirs. Only its last link frees its blocks.
		return
	}
	for size := info.Size(); size > shrinkStep; {
		size -= shrinkStep
		if syscall.Ftruncate(int(fd), size) != nil {
			return
		}
		pauseClock.Sleep(shrinkPause)
	}
}
