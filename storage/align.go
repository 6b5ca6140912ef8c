package storage

import (
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/internal/clock"
)

// AwaitOwnFlush waits, at most max, for the moment just after shard s's
// store has flushed on its own: no flush running, at most
// flushBeforeCheckpoint of unflushed WAL or a flush ended since the wait
// began (writes that came in during that flush are all a split can then
// avoid), and the flushed memtable's WAL deleted. A split that begins
// then (splitter.Config.AlignFlush) finds almost every write in the
// parent's tables: its children take little or nothing from the parent's
// retained history (history.go), and a parent whose history cannot stand
// in for its memtables has little or nothing to flush.
//
// Why: a split's children must hold what the parent's memtable holds,
// replayed from the history (up to 16 MiB written into the children
// inside the window) or, as the fallback, flushed; a forced flush puts a memtable rotation (the commit
// pipeline held across a new WAL and a directory fsync), up to 16 MiB of
// table writes and the old WAL's unlink inside the split's window, and on
// this project's machines each of them delays the writers' WAL fsyncs
// (probes of 100 MiB and 4 GiB splits: 5–12 ms with no acknowledgement,
// against 1.5–5 ms in steady windows as long). The store flushes its
// memtable anyway every MemTableSize bytes of writes (about every 3 s at
// 5,000 writes/s of 1 KiB); waiting for that flush moves no work and adds
// none, where forcing one adds a flush to the writers' cycle.
//
// It returns how long it waited and whether the store reached that state;
// on false (max passed: a store written to slowly may take minutes to
// fill its memtable) the split goes on as it would have. In the
// shared layout a child copies nothing, and it returns at once.
func (e *Engine) AwaitOwnFlush(s *Shard, max time.Duration) (time.Duration, bool, error) {
	if e.opts.Layout == LayoutShared {
		return 0, true, nil
	}
	start := e.opts.Clock.Now()
	deletes, flushed := s.st.flushes.counts()
	// One ticker, stopped on return: an After per poll stays registered
	// with a manual clock until it is advanced past it (a simulation
	// would count it as a waiter).
	poll := e.opts.Clock.NewTicker(alignPoll)
	defer poll.Stop()
	for {
		changed := s.st.flushes.changed()
		ready, err := s.st.flushedJustNow(e.opts.Clock, flushed)
		if d, _ := s.st.flushes.counts(); ready && d != deletes {
			// The deleted WAL's blocks are freed (and, on a filesystem
			// mounted with discard, trimmed) at the next journal commit,
			// which a writer's fsync would otherwise pay inside the
			// split: commit it now, as the end of the store's own flush,
			// then sync the WAL behind every write queued meanwhile.
			err = s.st.settle(e.opts.FS)
		}
		waited := e.opts.Clock.Since(start)
		if err != nil {
			return waited, false, err // not settled: the split may still pay for the flush
		}
		if ready {
			return waited, true, nil
		}
		left := max - waited
		if left <= 0 {
			return waited, false, nil
		}
		select {
		case <-changed:
		case <-poll.C():
		}
	}
}

// alignPoll is how often AwaitOwnFlush looks at the store between its
// flush events (the memtable's size has no event); a wait past its
// bound ends at the next poll, up to alignPoll late.
const alignPoll = 20 * time.Millisecond

// walDeleteGrace bounds how long after a flush's end AwaitOwnFlush waits
// for the flushed memtable's WAL to be deleted (Pebble deletes it in the
// background, ~10 ms after the flush in the split-scale probes; an unlink on
// a filesystem mounted with discard delayed the writers' fsyncs by 6–12
// ms there).
const walDeleteGrace = 50 * time.Millisecond

// flushedJustNow reports whether the store is in the state AwaitOwnFlush
// waits for; flushed is the count of flushes seen when the wait began.
func (st *store) flushedJustNow(c clock.Clock, flushed uint64) (bool, error) {
	if !st.enter() {
		return false, fmt.Errorf("storage: store %s is closed", st.dir)
	}
	m := st.db.Metrics()
	st.exit()
	if m.Flush.NumInProgress > 0 {
		return false, nil
	}
	// CreateChild's test: at most this much unflushed and the split
	// forces no flush (Pebble may hold it in several small memtables: a
	// young store's grow from 256 KiB). Or the store has flushed since the
	// wait began: what came in during that flush is all a split can
	// avoid, and a wait that asked for less could outlast every flush
	// when writes outpace them (a slow disk, a race build).
	if _, n := st.flushes.counts(); m.WAL.Size > flushBeforeCheckpoint && n == flushed {
		return false, nil
	}
	pending, at := st.flushes.walPending()
	return !pending || c.Now().Sub(at) >= walDeleteGrace, nil
}

// settle makes the store directory's changes durable, then waits for WAL
// syncs queued behind every write committed so far.
func (st *store) settle(fs vfs.FS) error {
	if !st.enter() {
		return fmt.Errorf("storage: store %s is closed", st.dir)
	}
	defer st.exit()
	if err := syncDir(fs, st.dir); err != nil {
		return err
	}
	// Twice: the first sync returns with the writes that queued behind
	// the flush's last fsyncs, the second after one ordinary group
	// commit, so the split's first step does not queue behind them.
	for range 2 {
		if err := st.db.LogData(nil, pebble.Sync); err != nil {
			return fmt.Errorf("storage: sync the WAL of %s: %w", st.dir, err)
		}
	}
	return nil
}

// flushEvents follows a store's flushes and WAL deletions (Pebble's event
// listener) for AwaitOwnFlush and store.flush.
type flushEvents struct {
	mu       sync.Mutex
	deleted  uint64        // WAL deletions seen
	flushed  uint64        // flushes ended
	failed   uint64        // flushes failed
	failErr  error         // the last failure's error
	failing  bool          // the last flush to end failed (Pebble is retrying it)
	ch       chan struct{} // closed and replaced at each event
	pending  bool          // a flush ended and no WAL was deleted since
	flushEnd time.Time
}

// changed returns a channel closed at the next event.
func (f *flushEvents) changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ch == nil {
		f.ch = make(chan struct{})
	}
	return f.ch
}

// counts returns the WAL deletions and the flushes seen so far.
func (f *flushEvents) counts() (deleted, flushed uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deleted, f.flushed
}

// failures returns the count of failed flushes and the last one's error.
func (f *flushEvents) failures() (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed, f.failErr
}

// failingNow returns the last failure's error if the last flush to end
// failed: Pebble is retrying it, and no later memtable flushes first.
func (f *flushEvents) failingNow() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.failing {
		return nil
	}
	return f.failErr
}

// flushOK records a flush that ended without an error (or wrote no table).
func (f *flushEvents) flushOK() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing = false
}

func (f *flushEvents) walPending() (bool, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pending, f.flushEnd
}

func (f *flushEvents) event(flushEnded bool, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if flushEnded {
		f.pending, f.flushEnd = true, now
		f.flushed++
	} else {
		f.pending = false
		f.deleted++
	}
	f.notifyLocked()
}

// flushFailed records a failed flush.
func (f *flushEvents) flushFailed(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed++
	f.failErr, f.failing = err, true
	f.notifyLocked()
}

func (f *flushEvents) notifyLocked() {
	if f.ch != nil {
		close(f.ch)
		f.ch = nil
	}
}

// emptyFlush reports whether a flush "failed" only in that it wrote no
// table (Pebble v2.1.7 reports such a flush's end with its unexported
// errEmptyTable, compaction.go; the memtable is flushed all the same).
func emptyFlush(err error) bool { return err.Error() == "pebble: empty table" }

// listen adds f to the store's event listener.
func (f *flushEvents) listen(el *pebble.EventListener, now func() time.Time) {
	flushEnd, walDeleted := el.FlushEnd, el.WALDeleted
	el.FlushEnd = func(info pebble.FlushInfo) {
		if flushEnd != nil {
			flushEnd(info)
		}
		switch {
		case info.Err == nil:
			f.flushOK()
			f.event(true, now())
		case !emptyFlush(info.Err):
			f.flushFailed(info.Err)
		default:
			f.flushOK()
		}
	}
	el.WALDeleted = func(info pebble.WALDeleteInfo) {
		if walDeleted != nil {
			walDeleted(info)
		}
		f.event(false, now())
	}
}
