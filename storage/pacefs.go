package storage

import (
	"sync"
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
// Why pace them: on this project's machines the writers' WAL
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

// pace makes the flushes the store starts from now on write at its pacer's
// rate, until the returned function is called. Flushes already running are
// not affected. Calls nest. A store without a pacer (SplitFlushRate < 0)
// is never paced.
func (c *cancelFS) pace() (done func()) {
	if c.pacer == nil {
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

// flushPacer holds the flush outputs that share it to one rate: each write
// is due when the bytes written before it at rate allow, and a writer ahead
// of its due time by pacingSlack or more sleeps until then. Time a writer
// spends behind (a slow disk, no flush running) is not saved up: the rate
// bounds every stretch longer than the slack.
//
// A store's flushes share its own pacer; the children of one split made at
// the same time (CreateChildren) share one, so the split's flush writes
// stay within SplitFlushRate together (two children's opens flushing side
// by side wrote at twice the rate with a pacer each).
type flushPacer struct {
	rate float64 // bytes a second
	mu   sync.Mutex
	next time.Time // when the bytes accounted so far are due
}

// newFlushPacer returns a pacer at rate bytes a second, or nil (never
// paced) if rate is not positive.
func newFlushPacer(rate int64) *flushPacer {
	if rate <= 0 {
		return nil
	}
	return &flushPacer{rate: float64(rate)}
}

// wrote accounts n bytes just written and returns how long the writer
// should sleep.
func (p *flushPacer) wrote(n int) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := paceClock.Now()
	if p.next.Before(now) {
		p.next = now
	}
	p.next = p.next.Add(time.Duration(float64(n) / p.rate * float64(time.Second)))
	if ahead := p.next.Sub(now); ahead >= pacingSlack {
		return ahead
	}
	return 0
}

// pacedFile is a flush output written while its store was paced: each
// write returns no sooner than its pacer allows.
//
// NB: only Write is paced. Pebble writes tables sequentially through Write
// (objstorageprovider's file writable); WriteAt is for other files.
type pacedFile struct {
	vfs.File
	pacer   *flushPacer
	written *atomic.Int64
}

// paceClock is the wall clock, not the engine's: the paced writer is
// Pebble's flush, which no simulated clock drives. Under a manual clock a
// split's synchronous flush would wait for a tick that its own step holds
// back.
var paceClock clock.Clock = clock.Real{}

func (f *pacedFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	f.written.Add(int64(n))
	if d := f.pacer.wrote(n); d > 0 {
		paceClock.Sleep(d)
	}
	return n, err
}

// pacingSlack is how far ahead of its rate a paced file may get before it
// sleeps: a sleep per 32 KiB block would cost more in wake-ups than it
// smooths.
const pacingSlack = time.Millisecond
