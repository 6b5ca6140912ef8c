package storage

import (
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/internal/invariants"
)

// holdScheduler is a store's compaction scheduler: one compaction at a time,
// like Pebble's default, plus a hold. No compaction starts before
// pebble.Open returns (see opened). A new child is opened held and sealed:
// it inherits its parent's compaction debt with the linked files, and paying
// it while the parent is under load and the split is running starves the
// writers on few cores. Sealed, it runs no compaction until a manual one is
// asked for or its writes stall (see unseal); then, still held, a compaction
// runs only if Pebble says it is urgent (it raises the allowed concurrency
// above the normal 1 when L0 read amplification or compaction debt is
// high), so a held store can never stall its own writes for good. Release
// lifts both and lets the debt be paid; the children of one split pay it
// in turns (compactionTurns). A parent being split is held too (its
// compactions are wasted work once the children exist; see
// Engine.HoldCompactions).
type holdScheduler struct {
	mu      sync.Mutex
	db      pebble.DBForCompaction
	running int
	held    bool
	sealed  bool // a new child: no compaction at all until release or a write stall
	manual  int  // manual compactions being waited for (store.compact)
	opening bool // pebble.Open has not returned: no compaction may start
	closed  bool
	turns   *compactionTurns // shared with the children made with this one; nil once left
	// l0Urgent is the L0 read amplification at which Pebble runs a second
	// compaction (Options.Experimental.L0CompactionConcurrency): a member
	// of turns that deep leaves them (urgentL0).
	l0Urgent int32

	grantMu sync.Mutex // one granting loop at a time
	stop    chan struct{}
	done    chan struct{}
	clock   clock.Clock
}

// concurrencyRange lets Pebble signal urgency to a held scheduler: normal 1,
// up to 2 under L0 or debt pressure. An unheld store still runs at most
// normalConcurrency (Pebble's default range is 1–1): only a held store
// reads the signal.
func concurrencyRange() (int, int) { return normalConcurrency, 2 }

// normalConcurrency is how many compactions an unheld store runs at once.
const normalConcurrency = 1

func newHoldScheduler(held bool, c clock.Clock) *holdScheduler {
	return &holdScheduler{held: held, sealed: held, opening: true, stop: make(chan struct{}), done: make(chan struct{}), clock: c}
}

// unseal lets a held child run urgent compactions: its writes stalled.
//
// NB: a new child opens sealed, not merely held. Pebble's urgency signal
// also counts compaction debt in bytes, which never stalls a write, and a
// child of a 4 GiB parent inherits enough of it to start a compaction the
// moment it opens: two children and the parent then compacted beside the
// split's own flush, checkpoints and fsyncs on two cores. Before its
// handoff a child takes only the catch-up writes. If a child's writes
// do stall (its memtable fills over a deep L0), Pebble's WriteStallBegin
// unseals it and the held rule applies: urgent work runs, so the stall
// ends and a split can never wait on its own child.
//
// A store whose writes stall also leaves its turns (compactionTurns): its
// own compactions end the stall and must not wait for a sibling's.
func (s *holdScheduler) unseal() {
	s.mu.Lock()
	was := s.sealed || s.turns != nil
	s.sealed = false
	s.leaveTurnsLocked()
	s.mu.Unlock()
	if was {
		go s.grant()
	}
}

// beginManual admits, one at a time, the compactions a manual compaction
// needs, held or not, and grants at once; endManual ends it.
//
// NB: Pebble's manual backlog raises GetAllowedWithoutPermission, which
// lets a held store run it, but Pebble does not tell the scheduler: when it
// already has a compaction waiting (one this scheduler refused: a held
// store refuses whatever is not urgent) it enqueues the manual compaction
// and asks nothing. A grant that ran just before the enqueue then saw the
// old allowance, and only the 100 ms ticker granted it (under a manual
// clock, nothing did). Counting the manual compaction here, before Pebble
// enqueues it, makes the grant that follows see it. The compactions run
// one at a time, as Pebble's backlog signal would allow a held store.
//
// A store compacted by hand also leaves its turns (compactionTurns): its
// caller waits for the compaction, as the foreign-document cleanup of
// keep-all children does on both children at once (question 2's RFC data
// path, measured before the turns existed).
func (s *holdScheduler) beginManual() {
	s.mu.Lock()
	s.sealed = false
	s.manual++
	s.leaveTurnsLocked()
	s.mu.Unlock()
	go s.grant()
}

func (s *holdScheduler) endManual() {
	s.mu.Lock()
	s.manual--
	s.mu.Unlock()
}

// opened lets compactions start once pebble.Open has returned.
//
// NB: Pebble's Open registers the scheduler before it flushes the replayed
// WAL, and the flush's end asks for compactions; later in the same Open,
// scanObsoleteFiles waits for every running compaction to finish. A store
// that inherits compaction debt (a child of a parent with a deep L0) gets an
// urgent compaction there, so its Open would wait for a whole compaction:
// 1.4 and 6.7 s for the two children of a freshly loaded 4 GiB parent
// (TestScaleProbe's stacks: 347 samples of 20 ms in that wait). Nothing
// writes to a store before its Open returns, so holding every compaction
// until then cannot stall a writer.
func (s *holdScheduler) opened() {
	s.mu.Lock()
	s.opening = false
	s.mu.Unlock()
	go s.grant()
}

// abandon stops the scheduler of a store whose pebble.Open failed.
//
// NB: Pebble's Open registers the scheduler before its last steps (the
// replayed WAL's flush, the OPTIONS file, the obsolete-file scan) and
// unregisters it only in Close, which a failed Open never reaches: without
// this the ticker, and the half-opened DB it points to, outlived the open.
// No compaction can be running (opening admits none), so Unregister waits
// for nothing but the ticker.
func (s *holdScheduler) abandon() {
	s.mu.Lock()
	registered := s.db != nil && !s.closed
	s.leaveTurnsLocked()
	s.mu.Unlock()
	if registered {
		s.Unregister()
	}
}

// Register implements pebble.CompactionScheduler.
func (s *holdScheduler) Register(_ int, db pebble.DBForCompaction) {
	s.mu.Lock()
	s.db = db
	s.mu.Unlock()
	// The ticker exists when Register returns (a manual clock counts it).
	go s.tick(s.clock.NewTicker(100 * time.Millisecond))
}

// Unregister implements pebble.CompactionScheduler.
func (s *holdScheduler) Unregister() {
	close(s.stop)
	<-s.done
	s.grantMu.Lock() // wait out a grant in progress
	s.mu.Lock()
	s.closed = true
	s.leaveTurnsLocked()
	s.mu.Unlock()
	s.grantMu.Unlock()
}

// permitLocked reports whether one more compaction may run now.
func (s *holdScheduler) permitLocked() bool {
	if s.closed || s.opening || s.sealed || s.db == nil {
		return false
	}
	allowed := s.db.GetAllowedWithoutPermission()
	if s.held {
		if s.manual > 0 && s.running == 0 {
			return true // someone waits for a manual compaction
		}
		return allowed > 1 && s.running < allowed-1 // urgent work only
	}
	return s.running < min(allowed, normalConcurrency)
}

// TrySchedule implements pebble.CompactionScheduler.
func (s *holdScheduler) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.permitLocked() {
		return false, nil
	}
	if !s.takeTurnLocked() {
		// Pebble holds its DB's mutex here, so the depth of L0 is read
		// by a grant of its own (urgentL0): this may be a flush that took
		// it to Pebble's urgency.
		go s.grant()
		return false, nil
	}
	s.running++
	return true, s
}

// UpdateGetAllowedWithoutPermission implements pebble.CompactionScheduler.
func (s *holdScheduler) UpdateGetAllowedWithoutPermission() { go s.grant() }

// Started, MeasureCPU and CumulativeStats implement pebble.CompactionGrantHandle.
func (s *holdScheduler) Started()                                          {}
func (s *holdScheduler) MeasureCPU(pebble.CompactionGoroutineKind)         {}
func (s *holdScheduler) CumulativeStats(pebble.CompactionGrantHandleStats) {}

// Done implements pebble.CompactionGrantHandle.
func (s *holdScheduler) Done() {
	s.mu.Lock()
	if s.running <= 0 {
		// A Done without its grant: the count would let one compaction
		// too many run, or a turn be held for good. Loud in tests.
		_ = invariants.AssertionFailedf("storage: compaction done with %d running", s.running)
	}
	s.running--
	s.endTurnLocked()
	s.mu.Unlock()
	go s.grant()
}

// hold stops new compactions except urgent ones (running ones go on).
func (s *holdScheduler) hold() {
	s.mu.Lock()
	s.held = true
	s.mu.Unlock()
}

// release lifts the hold and lets waiting compactions run.
func (s *holdScheduler) release() {
	s.mu.Lock()
	s.held, s.sealed = false, false
	s.mu.Unlock()
	go s.grant()
}

// grant offers the DB as many compactions as it may run now.
func (s *holdScheduler) grant() {
	s.grantMu.Lock()
	defer s.grantMu.Unlock()
	for {
		s.mu.Lock()
		ok := s.permitLocked()
		db := s.db
		s.mu.Unlock()
		if !ok {
			return
		}
		if waiting, _ := db.GetWaitingCompaction(); !waiting {
			s.mu.Lock()
			if !s.held && s.running == 0 {
				// Its inherited debt is paid (or there was none): the
				// siblings no longer wait for it.
				s.leaveTurnsLocked()
			}
			s.mu.Unlock()
			return
		}
		s.mu.Lock()
		if !s.takeTurnLocked() {
			s.mu.Unlock()
			if !s.urgentL0(db) {
				return // a sibling's compaction ends with a grant of ours
			}
			s.mu.Lock()
			s.leaveTurnsLocked()
			s.mu.Unlock()
			continue
		}
		s.running++
		s.mu.Unlock()
		if !db.Schedule(s) {
			s.mu.Lock()
			s.running--
			s.endTurnLocked()
			s.mu.Unlock()
			return
		}
	}
}

// tick grants periodically: flushes change what may run without telling us.
func (s *holdScheduler) tick(t clock.Ticker) {
	defer close(s.done)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C():
			s.grant()
		}
	}
}

// urgentL0 reports whether db's L0 is as deep as Pebble's own urgency
// (l0Urgent): its writes are a flush or two from stopping, and its
// compaction must not wait for a sibling's. Called without s.mu: Metrics
// takes the DB's mutex.
func (s *holdScheduler) urgentL0(db pebble.DBForCompaction) bool {
	d, ok := db.(*pebble.DB)
	if !ok || s.l0Urgent <= 0 {
		return false
	}
	return d.Metrics().Levels[0].Sublevels >= s.l0Urgent
}

// takeTurnLocked reports whether s may start a compaction as far as its
// siblings are concerned, and if so holds the turn until its compactions
// end (endTurnLocked). s.mu is held.
func (s *holdScheduler) takeTurnLocked() bool {
	return s.turns == nil || s.turns.take(s)
}

// endTurnLocked gives the turn back once s runs no compaction, and lets
// the siblings that were refused try again. s.mu is held.
func (s *holdScheduler) endTurnLocked() {
	if s.turns != nil && s.running == 0 {
		s.turns.put(s)
	}
}

// leaveTurnsLocked takes s out of its turns for good. s.mu is held.
func (s *holdScheduler) leaveTurnsLocked() {
	if s.turns != nil {
		s.turns.leave(s)
		s.turns = nil
	}
}

// compactionTurns makes the children of one split take turns paying the
// compaction debt they inherited from their parent: while one runs a
// compaction, its siblings start none. A child leaves the turns when it
// has no compaction waiting (its debt is paid), when its L0 is as deep as
// Pebble's urgency (urgentL0: urgent work always runs, as for a held
// store, so that a store never stalls its own writes: a child held to its
// turn there would wait until its writes stopped), when its writes stall
// all the same (unseal) and when its store closes; the last one left runs
// as any store does.
//
// Why: the split releases its children's compactions together
// (splitter's cleanup), and each child of a parent with L0 tables starts
// at once an L0 → L5 compaction of tens of MB: two such, side by side on
// two cores and one disk, beside the writers' fsyncs, put 7–20 ms gaps
// between acknowledgements in the 100 ms after a 100 MiB parent's
// handoff. The parent compacted one at a time; its children, together,
// keep to that until their debt is paid.
//
// Lock order: a scheduler's mu, then its turns' mu; the turns never take a
// scheduler's mu, and wake the siblings on goroutines of their own.
type compactionTurns struct {
	mu      sync.Mutex
	members []*holdScheduler
	busy    *holdScheduler // the member whose compactions are running, or nil
}

// join adds s to t. Call before s is registered with Pebble.
func (t *compactionTurns) join(s *holdScheduler) {
	s.mu.Lock()
	s.turns = t
	s.mu.Unlock()
	t.mu.Lock()
	t.members = append(t.members, s)
	t.mu.Unlock()
}

// take gives s the turn if no sibling holds it.
func (t *compactionTurns) take(s *holdScheduler) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.busy != nil && !slices.Contains(t.members, t.busy) {
		// A member that left still holding the turn would keep its
		// siblings from compacting for good.
		_ = invariants.AssertionFailedf("storage: compaction turn held by a scheduler that left")
	}
	if t.busy != nil && t.busy != s {
		return false
	}
	t.busy = s
	return true
}

// put frees the turn s held, if it held it, and wakes the siblings.
func (t *compactionTurns) put(s *holdScheduler) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.busy != s {
		return
	}
	t.busy = nil
	t.wakeLocked(s)
}

// leave takes s out of t and wakes the siblings.
func (t *compactionTurns) leave(s *holdScheduler) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i := slices.Index(t.members, s); i >= 0 {
		t.members = slices.Delete(t.members, i, i+1)
	}
	if t.busy == s {
		t.busy = nil
	}
	t.wakeLocked(s)
}

// wakeLocked asks every member but s to grant again.
func (t *compactionTurns) wakeLocked(s *holdScheduler) {
	for _, m := range t.members {
		if m != s {
			go m.grant()
		}
	}
}
