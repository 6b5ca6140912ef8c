package splitter

import (
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/storage"
)

// stallGate is the wait, before a handoff's retry, for the write stall
// that made its drain time out: the retry would find the same writes held
// in Pebble. The fence records the stalled shard (on, guarded by the
// operation's lock); the next step waits before it takes the lock, so that
// Phase, Report and Cancel answer meanwhile. A cancel taken during the wait
// (Interrupt) ends it, and the step carries out the abort.
type stallGate struct {
	interrupted cancelSignal   // Interrupt: ends a stall wait, skips later ones
	on          *storage.Shard // a drain timeout found it in a write stall; guarded by the operation's lock
}

// wait waits for the recorded shard's write stall to end, at most
// Config.StallWait, unless the operation's next intent (read under mu) is
// not the retry's catch-up: a cancel was taken, or the attempts ran out. A
// wait that happened is counted in r, under mu.
func (g *stallGate) wait(d *Driver, log *zap.Logger, mu *sync.Mutex, retrying func() bool, r *Report) {
	mu.Lock()
	s, retry := g.on, retrying()
	g.on = nil
	mu.Unlock()
	if s == nil || !retry {
		return
	}
	select {
	case <-g.interrupted.ch():
		return // a cancel, or the caller stops: no retry to wait for
	default:
	}
	if !s.WriteStalled() {
		return
	}
	log.Info("handoff: drain timed out with the shard's writes in a write stall; waiting for it to end before the retry",
		zap.Uint32("shard", uint32(s.ID())), zap.Duration("limit", d.cfg.StallWait))
	waited, ended := s.AwaitWriteStallEnd(d.cfg.StallWait, g.interrupted.ch())
	log.Info("handoff: write stall wait over", zap.Uint32("shard", uint32(s.ID())), zap.Duration("waited", waited), zap.Bool("ended", ended))
	mu.Lock()
	r.StallWaits++
	r.StallWaited += waited
	mu.Unlock()
}

// cancelSignal is closed once, by Interrupt (a cancel asks first): a stall
// wait in progress ends and no later one begins.
type cancelSignal struct {
	init, raised sync.Once
	c            chan struct{}
}

func (c *cancelSignal) get() chan struct{} {
	c.init.Do(func() { c.c = make(chan struct{}) })
	return c.c
}

func (c *cancelSignal) ch() <-chan struct{} { return c.get() }

func (c *cancelSignal) raise() {
	ch := c.get()
	c.raised.Do(func() { close(ch) })
}

// maxRetryDelay bounds the pause before a failed undo or cleanup is
// retried (retryBackoff).
const maxRetryDelay = time.Second

// retryBackoff spaces out the retries of an undo or a cleanup that failed
// (a cancel that cannot write the table, a retire that cannot remove a
// store): the machine retries them until they succeed, and retried at
// once, a disk full for a moment used up Run's step bound (maxSteps) in a
// fifth of a second, leaving the operation unfinished, its reservation in
// the table, until a restart. The first retry is immediate; then the
// pause doubles from a millisecond up to maxRetryDelay. It is taken at
// the start of the next step without the operation's lock, as the stall
// wait is.
type retryBackoff struct {
	// Guarded by the operation's lock:
	failed int       // consecutive failures of a retried intent
	since  time.Time // the first of them
	last   error     // the latest of them
}

// stepped counts a step that left the operation in phase to at now: a
// failure that keeps it in its phase (aborting, cleanup) is retried,
// anything else ends the run of failures.
func (b *retryBackoff) stepped(from, to Phase, ev Event, now time.Time) {
	if ev.Kind == EventFailed && from == to && !to.Terminal() {
		if b.failed == 0 {
			b.since = now
		}
		b.failed++
		b.last = ev.Err
	} else {
		b.failed, b.last = 0, nil
	}
}

// restart counts a run of failures as begun at now (Resume: RetryFor
// afresh).
func (b *retryBackoff) restart(now time.Time) {
	if b.failed > 0 {
		b.since = now
	}
}

// gaveUp returns an error once the intent has been failing for longer
// than Config.RetryFor (Run's bound).
func (b *retryBackoff) gaveUp(d *Driver, mu *sync.Mutex) error {
	mu.Lock()
	defer mu.Unlock()
	if b.failed == 0 {
		return nil
	}
	if took := d.cfg.Clock.Since(b.since); took > d.cfg.RetryFor {
		return fmt.Errorf("failing for %v (%d attempts; Config.RetryFor %v): %w", took.Round(time.Millisecond), b.failed, d.cfg.RetryFor, b.last)
	}
	return nil
}

// wait pauses before the retry of a failed intent, on the driver's clock.
func (b *retryBackoff) wait(d *Driver, mu *sync.Mutex) {
	mu.Lock()
	failed := b.failed
	mu.Unlock()
	if failed < 2 {
		return
	}
	d.cfg.Clock.Sleep(min(time.Millisecond<<min(failed-2, 10), maxRetryDelay))
}
