package storage

import (
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// AwaitOwnFlush waits, at most max, for shard s's store to flush on its
// own past a hold of s's operation log: until the WAL that was the store's
// newest when the hold began is obsolete (logCoversUnflushed). Every write
// the store's tables then lack came after the hold and is in the log, so a
// split that begins then forces no flush of s: its children link the
// tables, and the catch-up replays the rest from the log (CreateChildren).
//
// It takes that hold itself (HoldLog) before it returns, whatever it
// returns; the caller releases it (ReleaseLog) once the split that follows
// has ended. It takes it late: once s's memtable is holdAtFill full (or at
// once if the log is already held), so that the writes the log doubles are
// the memtable's last ones and those its flush leaves behind, not a whole
// memtable's.
//
// Why (issue 15): a forced flush puts a memtable rotation (the commit
// pipeline held across the old WAL's sync, a new WAL and a directory
// fsync), the table writes and the old WAL's unlink inside the split's
// window, and on this project's machines each of them delays the writers'
// WAL fsyncs (probes of 100 MiB and 4 GiB splits: 5–12 ms with no
// acknowledgement, against 1.5–5 ms in steady windows as long). The store
// flushes its memtable anyway every MemTableSize bytes of writes (about
// every 3 s at 5,000 writes/s of 1 KiB); waiting for that flush moves no
// work and adds none, where forcing one adds a flush to the writers'
// cycle. Until the twelfth session the wait held nothing, and the split
// still forced a flush of what had come in since the store's own one
// (8–16 ms, with its rotation). A hold taken at the wait's start doubled a
// whole memtable of writes, and in question 11 two of five 4 GiB waits
// ended inside 15–36 ms writer stalls.
//
// It returns how long it waited and whether s's log covers its unflushed
// writes; on false the split flushes s as before. It gives up early if s
// had no write in progress or applied for alignIdle with no flush running:
// an idle store does not flush on its own, and forcing its flush delays no
// writer. In the shared layout a child copies nothing, and it returns at
// once (holding the log all the same).
func (e *Engine) AwaitOwnFlush(s *Shard, max time.Duration) (waited time.Duration, ready bool, err error) {
	held := false
	if _, already := s.loggedAfter(); already {
		s.HoldLog() // another hold is older: wait for the flush past that one
		held = true
	}
	defer func() {
		if !held {
			s.HoldLog()
		}
	}()
	if e.opts.Layout == LayoutShared {
		return 0, true, nil
	}
	start := e.opts.Clock.Now()
	// One ticker, stopped on return: an After per poll stays registered
	// with a manual clock until it is advanced past it (a simulation
	// would count it as a waiter).
	poll := e.opts.Clock.NewTicker(alignPoll)
	defer poll.Stop()
	seq, lastWrite := s.Seq(), start
	for {
		changed := s.st.flushes.changed()
		if !s.st.enter() {
			return e.opts.Clock.Since(start), false, fmt.Errorf("storage: wait for shard %d's own flush: %w", s.id, ErrShardClosed)
		}
		m := s.st.db.Metrics()
		s.st.exit()
		if !held && m.MemTable.Count == 1 && float64(m.WAL.Size) >= holdAtFill*float64(m.MemTable.Size) {
			s.HoldLog()
			held = true
		}
		if held && s.logCoversUnflushed() {
			// The deleted WAL's blocks are freed (and, on a filesystem
			// mounted with discard, trimmed) at the next journal commit,
			// which a writer's fsync would otherwise pay inside the
			// split: commit it now, as the end of the store's own flush,
			// then sync the WAL behind every write queued meanwhile.
			err := s.st.settle(e.opts.FS)
			return e.opts.Clock.Since(start), err == nil, err // not settled: the split may still pay for the flush
		}
		if e.opts.Clock.Since(start) >= max {
			return e.opts.Clock.Since(start), false, nil
		}
		select {
		case <-changed:
		case <-poll.C():
			if now := s.Seq(); now != seq || s.writing.Load() > 0 {
				seq, lastWrite = now, e.opts.Clock.Now()
			} else if e.opts.Clock.Since(lastWrite) >= alignIdle && !s.st.flushing() {
				return e.opts.Clock.Since(start), false, nil // idle: no flush of its own is coming
			}
		}
	}
}

// holdAtFill is how full (live WAL bytes against the one memtable's size)
// AwaitOwnFlush lets the memtable get before it holds the log: short of the
// point where Pebble rotates it (the memtable also holds its skiplist's
// nodes) by more than a poll's writes (20 ms, ~100 KiB at 5,000 writes/s)
// for memtables of 1 MiB and up. If the rotation comes first, the wait
// holds at the next memtable's fill.
const holdAtFill = 0.75

// FlushOwn flushes shard s's store as the store flushes on its own when
// its memtable fills, and returns once that flush has ended (a failed
// flush is an error; Pebble goes on retrying it, as it would its own). It
// is the hook of tests and simulations whose stores never fill a 16 MiB
// memtable: taken after a log hold, it is the own flush AwaitOwnFlush
// waits for. Not paced (an own flush is not the split's), but probed like
// the split's forced flush: Pebble dies when a WAL rotation cannot create
// its log.
func (e *Engine) FlushOwn(s *Shard) error {
	if !s.st.enter() {
		return fmt.Errorf("storage: own flush of shard %d: %w", s.id, ErrShardClosed)
	}
	err := s.st.probeCreate()
	s.st.exit()
	if err != nil {
		return fmt.Errorf("storage: own flush of shard %d: %w", s.id, err)
	}
	if err := s.st.flush(); err != nil {
		return fmt.Errorf("storage: own flush of shard %d: %w", s.id, err)
	}
	return nil
}

// alignPoll is how often AwaitOwnFlush looks at the store between its
// flush events (the memtable's size has no event); a wait past its
// bound ends at the next poll, up to alignPoll late.
const alignPoll = 20 * time.Millisecond

// alignIdle is how long AwaitOwnFlush waits for a write, with none in
// progress and no flush running, before it calls the store idle. Writes in
// progress count: writers held in a WAL fsync or Pebble's write stall
// apply nothing for up to hundreds of milliseconds at 4 GiB (a probe's
// wait gave up after 223 ms behind a 160 ms stall when only applied
// writes counted, issue 15, twelfth session).
const alignIdle = 100 * time.Millisecond

// flushing reports whether the store is flushing a memtable (false if it
// is closed).
func (st *store) flushing() bool {
	if !st.enter() {
		return false
	}
	defer st.exit()
	return st.db.Metrics().Flush.NumInProgress > 0
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
	mu      sync.Mutex
	deleted uint64        // WAL deletions seen
	flushed uint64        // flushes ended
	failed  uint64        // flushes failed
	failErr error         // the last failure's error
	failing bool          // the last flush to end failed (Pebble is retrying it)
	ch      chan struct{} // closed and replaced at each event
	// newestWAL is the number of the newest WAL Pebble created, and
	// obsoleteWAL the highest it deleted (logCoversUnflushed). Pebble
	// deletes a WAL only once every memtable written to it is flushed and
	// the MANIFEST says so, and every WAL below the lowest one a memtable
	// still needs with it: a deleted number says all WALs up to it are
	// flushed. Its numbers are never reused, and recycling is off
	// (noRecycleCleaner), so each one is created and deleted once.
	newestWAL, obsoleteWAL uint64
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

// wals returns the newest WAL created and the highest deleted.
func (f *flushEvents) wals() (newest, obsolete uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.newestWAL, f.obsoleteWAL
}

func (f *flushEvents) walCreated(num uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.newestWAL = max(f.newestWAL, num)
}

// flushEnded records a flush that ended; walDeleted a WAL Pebble deleted
// (or tried to: a failed unlink is still an obsolete WAL).
func (f *flushEvents) flushEnded() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flushed++
	f.notifyLocked()
}

func (f *flushEvents) walDeleted(num uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted++
	f.obsoleteWAL = max(f.obsoleteWAL, num)
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
func (f *flushEvents) listen(el *pebble.EventListener) {
	flushEnd, walCreated, walDeleted := el.FlushEnd, el.WALCreated, el.WALDeleted
	el.FlushEnd = func(info pebble.FlushInfo) {
		if flushEnd != nil {
			flushEnd(info)
		}
		switch {
		case info.Err == nil:
			f.flushOK()
			f.flushEnded()
		case !emptyFlush(info.Err):
			f.flushFailed(info.Err)
		default:
			f.flushOK()
		}
	}
	el.WALCreated = func(info pebble.WALCreateInfo) {
		// Before any write reaches the new WAL: Pebble calls this while
		// it rotates, with its commit pipeline held (DB.rotateWAL).
		f.walCreated(uint64(info.FileNum))
		if walCreated != nil {
			walCreated(info)
		}
	}
	el.WALDeleted = func(info pebble.WALDeleteInfo) {
		if walDeleted != nil {
			walDeleted(info)
		}
		f.walDeleted(uint64(info.FileNum))
	}
}
