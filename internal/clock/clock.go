// Package clock is the time source of storage and node: every deadline,
// sleep, ticker and measured duration there goes through a Clock, so a
// simulation can run them on a Manual clock it advances itself.
//
// Real is the wall clock (the time package). Manual is a deterministic
// clock that moves only when Advance is called; see its contract.
//
// Pebble keeps its own clock: a Manual clock governs our code's timing
// (deadlines, retries, the async WAL syncer, the compaction scheduler's
// poll), not Pebble's internal pacing.
package clock

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Clock tells the time, sleeps, and makes timers and tickers.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Since returns the time elapsed since t (Now().Sub(t)).
	Since(t time.Time) time.Duration
	// Sleep blocks for at least d; it returns at once if d <= 0.
	Sleep(d time.Duration)
	// After returns a channel that receives the time once d has elapsed.
	After(d time.Duration) <-chan time.Time
	// NewTicker returns a ticker that ticks every d; d must be positive.
	NewTicker(d time.Duration) Ticker
}

// Ticker delivers ticks on C until Stop, dropping ticks a slow reader
// misses, as a time.Ticker does.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Or returns c, or the wall clock if c is nil (for nil-means-real options).
func Or(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}

// Real is the wall clock.
type Real struct{}

var _ Clock = Real{}

// Now implements Clock.
func (Real) Now() time.Time { return time.Now() }

// Since implements Clock.
func (Real) Since(t time.Time) time.Duration { return time.Since(t) }

// Sleep implements Clock.
func (Real) Sleep(d time.Duration) { time.Sleep(d) }

// After implements Clock.
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// NewTicker implements Clock.
func (Real) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }

// Manual is a deterministic clock for simulations and tests. It is safe for
// concurrent use.
//
// Contract:
//   - Time stands still until Advance (or Set) moves it; Now returns the
//     clock's time and Since measures against it.
//   - A waiter (a Sleep, an After channel, a Ticker) has a deadline: the
//     time of its registration plus its duration. Advance(d) moves the time
//     to Now()+d and then fires, in deadline order (ties in registration
//     order), every waiter whose deadline is at or before the new time. A
//     fired Sleep returns; an After channel receives its deadline; a ticker
//     receives its tick time.
//   - A ticker fires at most once per Advance, however many periods it
//     spans (a time.Ticker drops the ticks a slow reader misses); its next
//     deadline is the first tick of its period grid after the new time.
//   - A duration <= 0 fires at once: Sleep returns and After's channel
//     already holds the current time. NewTicker panics on d <= 0, as
//     time.NewTicker does.
//   - A goroutine blocked in Sleep (or on an After channel) stays blocked
//     until some other goroutine advances the clock. Waiters reports how
//     many waiters are pending and BlockUntil waits for a number of them, so
//     a test can advance only once the code under test is waiting.
type Manual struct {
	mu      sync.Mutex
	cond    *sync.Cond // signalled when waiters change
	now     time.Time
	seq     uint64
	waiters []*waiter
}

type waiter struct {
	at     time.Time
	seq    uint64
	ch     chan time.Time
	period time.Duration // > 0: a ticker
}

var _ Clock = (*Manual)(nil)

// NewManual returns a Manual clock whose time is start.
func NewManual(start time.Time) *Manual {
	m := &Manual{now: start}
	m.cond = sync.NewCond(&m.mu)
	return m
}

// Now implements Clock.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// Since implements Clock.
func (m *Manual) Since(t time.Time) time.Duration { return m.Now().Sub(t) }

// Sleep implements Clock: it returns once the clock has been advanced by d.
func (m *Manual) Sleep(d time.Duration) { <-m.After(d) }

// After implements Clock.
func (m *Manual) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	m.mu.Lock()
	defer m.mu.Unlock()
	if d <= 0 {
		ch <- m.now
		return ch
	}
	m.addLocked(&waiter{at: m.now.Add(d), ch: ch})
	return ch
}

// NewTicker implements Clock.
func (m *Manual) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic(fmt.Sprintf("clock: non-positive interval %v for NewTicker", d))
	}
	w := &waiter{ch: make(chan time.Time, 1), period: d}
	m.mu.Lock()
	defer m.mu.Unlock()
	w.at = m.now.Add(d)
	m.addLocked(w)
	return &manualTicker{m: m, w: w}
}

type manualTicker struct {
	m *Manual
	w *waiter
}

func (t *manualTicker) C() <-chan time.Time { return t.w.ch }

// Stop stops the ticker; no tick is delivered after it returns.
func (t *manualTicker) Stop() {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	t.m.removeLocked(t.w)
}

func (m *Manual) addLocked(w *waiter) {
	m.seq++
	w.seq = m.seq
	m.waiters = append(m.waiters, w)
	m.cond.Broadcast()
}

func (m *Manual) removeLocked(w *waiter) {
	if i := slices.Index(m.waiters, w); i >= 0 {
		m.waiters = slices.Delete(m.waiters, i, i+1)
		m.cond.Broadcast()
	}
}

// Advance moves the clock forward by d and fires every waiter due by the
// new time (see the contract). It panics on a negative d.
func (m *Manual) Advance(d time.Duration) {
	if d < 0 {
		panic(fmt.Sprintf("clock: Advance by negative %v", d))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setLocked(m.now.Add(d))
}

// Set moves the clock to t, which must not be before Now, and fires every
// waiter due by then.
func (m *Manual) Set(t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t.Before(m.now) {
		panic(fmt.Sprintf("clock: Set to %v, before now %v", t, m.now))
	}
	m.setLocked(t)
}

func (m *Manual) setLocked(end time.Time) {
	m.now = end
	slices.SortFunc(m.waiters, func(a, b *waiter) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	kept := m.waiters[:0]
	var due []*waiter
	for _, w := range m.waiters {
		if w.at.After(end) {
			kept = append(kept, w)
			continue
		}
		due = append(due, w)
	}
	for _, w := range due {
		select {
		case w.ch <- w.at:
		default: // a ticker whose reader has not taken the last tick
		}
		if w.period > 0 {
			w.at = w.at.Add((end.Sub(w.at)/w.period + 1) * w.period)
			kept = append(kept, w)
		}
	}
	clear(m.waiters[len(kept):])
	m.waiters = kept
	m.cond.Broadcast()
}

// Waiters returns how many sleeps, After channels and tickers are pending.
func (m *Manual) Waiters() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.waiters)
}

// BlockUntil blocks until at least n waiters are pending.
func (m *Manual) BlockUntil(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.waiters) < n {
		m.cond.Wait()
	}
}
