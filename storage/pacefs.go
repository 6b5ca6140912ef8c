package storage

import (
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/internal/clock"
)

// flushWriteCategory is the category Pebble creates flush outputs with.
const flushWriteCategory vfs.DiskWriteCategory = "pebble-memtable-flush"

// DefaultSplitFlushRate is the rate a split's own flushes write at
// (Options.SplitFlushRate).
//
// Why pace them (issue 15): on this project's machines the writers' WAL
// fsyncs wait behind what a flush has just written (whether in the ext4
// journal or the virtual disk's cache flush was not isolated), so a flush
// that writes a 16 MiB memtable at the disk's full speed (270 MB/s
// measured) slows every write acknowledged meanwhile. In probes of a
// 4 GiB split under 5,000 fsync'd writes/s the parent's unpaced flush left
// writers with no acknowledgement for 11–25 ms, against 4–5 ms between
// acknowledgements in steady state; paced at 128 MiB/s, 8.2–8.8 ms (three
// runs each, design/2026-11-30-split-scale.md). The price is time: the
// flush of a full memtable takes about 120 ms instead of 50.
const DefaultSplitFlushRate = 128 << 20

// pace makes the flushes the store starts from now on write at most
// c.flushRate bytes a second, until the returned function is called.
// Flushes already running are not affected. Calls nest.
func (c *cancelFS) pace() (done func()) {
	if c.flushRate <= 0 {
		return func() {}
	}
	c.paced.Add(1)
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			c.paced.Add(-1)
		}
	}
}

// pacedFile is a flush output written while its store was paced: each
// write returns no sooner than the file's bytes at rate allow.
//
// NB: only Write is paced. Pebble writes tables sequentially through Write
// (objstorageprovider's file writable); WriteAt is for other files.
type pacedFile struct {
	vfs.File
	rate    float64 // bytes a second
	written *atomic.Int64
	start   time.Time
	n       int64
}

// paceClock is the wall clock, not the engine's: the paced writer is
// Pebble's flush, which no simulated clock drives. Under a manual clock a
// split's synchronous flush would wait for a tick that its own step holds
// back.
var paceClock clock.Clock = clock.Real{}

func (f *pacedFile) Write(p []byte) (int, error) {
	if f.start.IsZero() {
		f.start = paceClock.Now()
	}
	n, err := f.File.Write(p)
	f.n += int64(n)
	f.written.Add(int64(n))
	due := time.Duration(float64(f.n) / f.rate * float64(time.Second))
	if ahead := due - paceClock.Since(f.start); ahead >= pacingSlack {
		paceClock.Sleep(ahead)
	}
	return n, err
}

// pacingSlack is how far ahead of its rate a paced file may get before it
// sleeps: a sleep per 32 KiB block would cost more in wake-ups than it
// smooths.
const pacingSlack = time.Millisecond
