package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/routing"
)

// ChildStats measures the creation of a child shard.
type ChildStats struct {
	Shard routing.ShardID
	Flush time.Duration // flushing the parent's memtable before the checkpoint (0: too little to flush, or skipped)
	// Rotate is the part of Flush until Pebble's DB.AsyncFlush returned:
	// the memtable and WAL rotation, during which Pebble's commit pipeline
	// admits no write of the parent (a 4 GiB split's stall at the request
	// begins at the forced flush's start, design/2026-11-30-split-scale.md).
	Rotate time.Duration
	// SkippedFlush: the parent needed a flush but its L0 was at Pebble's
	// stop-writes depth, so the child copied its WAL instead.
	SkippedFlush bool
	// OmittedWAL: the checkpoint copied none of the parent's WAL (the
	// parent was flushed after its log hold began; the catch-up replays
	// the rest).
	OmittedWAL bool
	// Unflushed: the child was made from the parent's last flushed state,
	// without a flush, and History is how many operations above that
	// state it took from the parent's retained history (history.go).
	Unflushed  bool
	History    int
	Replay     time.Duration // applying History's writes to the child
	Checkpoint time.Duration // hard-linked checkpoint of the parent
	Open       time.Duration // opening the child's store
	Excise     time.Duration // dropping the foreign keys from the child
	Seq        uint64        // the parent's sequence number the child starts from (S)
	Linked     int64         // bytes hard-linked from the parent
	Copied     int64         // bytes copied (MANIFEST, OPTIONS, WAL)
	// IDs is the time the child took to drop the `_id` entries of the
	// documents it does not own (idindex.go), IDIndex what it did.
	IDs     time.Duration
	IDIndex IDIndexStats
}

// Total is the whole creation time.
func (c ChildStats) Total() time.Duration {
	return c.Flush + c.Checkpoint + c.Open + c.Excise + c.IDs + c.Replay
}

// flushBeforeCheckpoint is the unflushed WAL above which a child that copies
// the WAL (CreateChild, Options.CopyChildWAL) flushes the parent before its
// checkpoint.
//
// NB: a checkpoint copies the parent's live WAL, and opening the child
// replays it and flushes all of it, both halves of the keyspace, before
// Open returns (Pebble flushes replayed memtables at open). The parent's
// memtable is anywhere from empty to full (16 MiB) when a split starts: on
// a 4 GiB parent one child copied and flushed 15.5 MB (open 223 ms) and its
// sibling 1.4 MB (open 46 ms), and a flush that competes with the parent's
// large compactions for the disk took 3.25 s
// (design/2026-11-30-split-scale.md). Flushing the parent once writes the
// data once instead of once per child, lets every child open with an almost
// empty WAL, and the flushed table is hard-linked like the rest.
const flushBeforeCheckpoint = 2 << 20

// CreateChild makes shard child, owning span of parent's keyspace, from the live
// parent, and returns it with the sequence number S it reflects: every
// parent write up to S is in the child, none after. Writes after S are
// replayed by CatchUp.
//
// Per-shard layout: a checkpoint of the parent's store restricted to span,
// made with hard links (WithFlushedWAL, so every write acknowledged before
// the call is in it), opened as the child's store, and excised to exactly
// span, so no foreign key is ever visible through the child. The parent must
// hold its log (HoldLog) from before the call. Shared layout: nothing is
// copied; the child is a new span of the node's store with S = the parent's
// current sequence number.
//
// CreateChild copies the parent's WAL into the checkpoint, as Pebble's
// Checkpoint does (merge targets are made this way); CreateChildren, which
// splits use, copies none.
func (e *Engine) CreateChild(parent *Shard, child routing.ShardID, span routing.Span) (*Shard, ChildStats, error) {
	return e.createChild(parent, child, span, ChildExcise)
}

// ChildSpec is one child of a split: its shard and the span of the
// parent's keyspace it will own.
type ChildSpec struct {
	Shard routing.ShardID
	Span  routing.Span
}

// CreateChildren makes the children of one split from the live parent,
// each as CreateChild makes one (with build), and returns them in specs' order,
// with their stats. On a failure it returns the children it did make (the
// failed ones are nil) with the error: the caller cleans them up as it
// would any child of a cancelled split.
//
// With concurrent (per-shard layout), the children are made at the same
// time: the parent is flushed once first if it needs it (the flush is
// counted in the first child's stats), and then each child's checkpoint,
// open and excise run on a goroutine of their own, the opens outside the
// engine's lock; every child is attempted and the errors are joined.
// Otherwise one after another, each deciding for itself whether to flush
// the parent, stopping at the first failure.
//
// Why: a child's creation waits mostly on fsyncs, not on the
// CPU, and made together the two children's waits overlap: in alternated
// probes the clone phase of an aligned 4 GiB split went from 120 to 58 ms
// (medians of 5; design/2026-11-30-split-scale.md). Both children's
// checkpoints also copy the same short stretch of WAL, where a second
// child made after the first copies what came in meanwhile.
//
// The children copy none of the parent's WAL (unless Options.CopyChildWAL)
// and the parent is not flushed: each checkpoint's WAL copies are left
// empty (cancelFS.omitWAL), so a child reflects the parent's last flushed
// tables, whose sequence number is the exact cut (every write batch
// carries it), and takes the writes above it up to the log hold's start
// from the parent's retained history (history.go); the child's S is the
// hold's start and CatchUp replays the rest from the log. No flush, memtable
// rotation or WAL unlink of the parent sits in the split's window. When
// the history cannot stand in for the memtables (a batch it did not
// record, such as a new child's adopted sequence number, is not yet in a
// table) or with Options.FlushChildren, the parent, whose log the caller
// holds, is flushed once after the hold, whatever its memtable holds, and
// the children reflect the freshly flushed tables.
// Pebble's Checkpoint copies the live WAL, and each child's open replays
// and flushes all of it, both halves of the keyspace, before it returns:
// after the parent's own flush 0.36-0.55 MiB per child at 100 MiB, written
// twice per child inside the split (opens 15-50 against 4-15 ms without,
// measured 2026-12-01, design/2026-11-30-split-scale.md). A parent whose
// flush would stall it (flushWouldStall) is not flushed, and its children
// copy the WAL.
//
// Serial or concurrent, the children take turns at the compaction debt
// they inherit once the split releases them: one compaction at a time
// among them, as their parent ran, until each has none waiting
// (compactionTurns).
func (e *Engine) CreateChildren(parent *Shard, specs []ChildSpec, build ChildBuild, concurrent bool) ([]*Shard, []ChildStats, error) {
	children := make([]*Shard, len(specs))
	stats := make([]ChildStats, len(specs))
	turns := &compactionTurns{} // made together, they pay their debt in turns
	concurrent = concurrent && e.opts.Layout != LayoutShared && len(specs) > 1
	omit := !e.opts.CopyChildWAL && e.opts.Layout != LayoutShared
	how := childFlush{first: true} // one after another, copying the WAL: each child decides
	var flushed, rotated time.Duration
	var skipped bool
	if omit {
		if _, held := parent.loggedAfter(); !held {
			return children, stats, fmt.Errorf("storage: create children of shard %d: its operation log is not held, so a checkpoint without its WAL would lose writes", parent.id)
		}
	}
	if omit && !e.opts.FlushChildren {
		// From the last flushed state: the retained history has every
		// operation above it, unless a batch it did not record is not
		// yet in a table (then the parent is flushed, below).
		floor, ok, err := parent.pinHistory()
		if err != nil {
			return children, stats, fmt.Errorf("storage: create children of shard %d: %w", parent.id, err)
		}
		if ok {
			defer parent.st.hist.unpin()
			how = childFlush{omitWAL: true, unflushed: true, floor: floor}
		}
	}
	if (concurrent || omit) && !how.unflushed {
		// One flush for all: goroutines deciding on their own would each
		// flush the parent, and a child without WAL needs the flush.
		var err error
		if flushed, rotated, skipped, err = e.flushForCheckpoint(parent, omit); err != nil {
			return children, stats, fmt.Errorf("storage: create children of shard %d: %w", parent.id, err)
		}
		how = childFlush{omitWAL: omit && !skipped}
	}
	made := func(i int) {
		if !how.first {
			stats[i].SkippedFlush = skipped
		}
	}
	if len(specs) > 0 {
		defer func() { stats[0].Flush, stats[0].Rotate = stats[0].Flush+flushed, stats[0].Rotate+rotated }() // counted in the first child's stats
	}
	if !concurrent {
		for i, c := range specs {
			var err error
			children[i], stats[i], err = e.makeChild(parent, c.Shard, c.Span, build, how, siblings{turns: turns})
			made(i)
			if err != nil {
				return children, stats, err
			}
		}
		return children, stats, nil
	}
	// Each child's open flushes the WAL its checkpoint copied, if any, all
	// at the same time: one pacer holds them to the split's rate together.
	sib := siblings{pacer: newFlushPacer(e.so.flushRate), turns: turns}
	errs := make([]error, len(specs))
	panics := make([]any, len(specs))
	stacks := make([][]byte, len(specs))
	var wg sync.WaitGroup
	for i, c := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					panics[i], stacks[i] = r, debug.Stack()
				}
			}()
			children[i], stats[i], errs[i] = e.makeChild(parent, c.Shard, c.Span, build, how, sib)
			made(i)
		}()
	}
	wg.Wait()
	for i, p := range panics {
		if p != nil {
			// As if the children had been made on the caller's goroutine
			// (Pebble panics on an fsync error it cannot recover from):
			// the caller sees the panic, with its value, after the
			// siblings are done. The stack where it happened is logged,
			// since the re-panic's own is CreateChildren's.
			e.logger.Error("a child's creation panicked; handing the panic to the caller",
				zap.Uint32("shard", uint32(specs[i].Shard)), zap.Any("panic", p), zap.ByteString("stack", stacks[i]))
			panic(p)
		}
	}
	return children, stats, errors.Join(errs...)
}

// createChild is CreateChild with a choice of build (ChildKeepAll: see
// foreign.go). A merge target is always built with ChildExcise: documents
// of a merged sibling kept in it would come back after the sibling deleted
// them.
func (e *Engine) createChild(parent *Shard, child routing.ShardID, span routing.Span, build ChildBuild) (*Shard, ChildStats, error) {
	return e.makeChild(parent, child, span, build, childFlush{first: true}, siblings{})
}

// flushForCheckpoint flushes parent's memtable before its checkpoints if
// it holds more than flushBeforeCheckpoint of unflushed WAL, or whatever it
// holds with always, and returns how long the flush took and the part of
// it until the memtable was rotated (ChildStats.Rotate); skipped says a
// flush was needed but not made (flushWouldStall).
func (e *Engine) flushForCheckpoint(parent *Shard, always bool) (took, rotate time.Duration, skipped bool, err error) {
	m, err := parent.st.metrics()
	if err != nil {
		return 0, 0, false, fmt.Errorf("flush shard %d: %w", parent.id, err)
	}
	if !always && m.WAL.Size <= flushBeforeCheckpoint {
		return 0, 0, false, nil
	}
	if parent.st.flushWouldStall(m) {
		// Flushing would hold every writer of the parent until its L0
		// compaction: copy the WAL instead.
		return 0, 0, true, nil
	}
	if err := parent.st.probeCreate(); err != nil {
		// The flush rotates the WAL, and Pebble panics when it cannot
		// create the new log, with its mutex released: under
		// DB.AsyncFlush's deferred unlock that is a fatal error no
		// recover catches. A split that cannot create a file fails here
		// instead and leaves the parent serving (it meets the same wall
		// at its own next rotation: Pebble's model).
		return 0, 0, false, fmt.Errorf("flush shard %d: %w", parent.id, err)
	}
	start := e.opts.Clock.Now()
	unpace := parent.st.cfs.pace()
	err = parent.st.flushWith(func() { rotate = e.opts.Clock.Since(start) })
	unpace()
	if err != nil {
		return 0, 0, false, fmt.Errorf("flush shard %d: %w", parent.id, err)
	}
	return e.opts.Clock.Since(start), rotate, false, nil
}

// siblings is what the children of one split made together share.
type siblings struct {
	pacer *flushPacer      // the split's flush budget (concurrent children); nil: a pacer each
	turns *compactionTurns // their turns at the compaction debt they inherit; nil: none
}

// childFlush says how a child's checkpoint deals with the parent's
// unflushed writes.
type childFlush struct {
	// first: the child decides whether to flush the parent before its
	// checkpoint, and copies its WAL (CreateChild; children made one after
	// another with Options.CopyChildWAL).
	first bool
	// omitWAL: the checkpoint copies no WAL. The caller flushed the parent
	// after its log hold began, so the log has every write the flushed
	// tables lack, and the catch-up replays them; or, with unflushed, the
	// parent's history was pinned and holds every write above floor.
	omitWAL bool
	// unflushed: the parent was not flushed. The child takes the writes
	// between its tables' sequence number and the log hold's start from
	// the parent's retained history, pinned at floor (history.go).
	unflushed bool
	floor     uint64
}

// makeChild is createChild; how says what it does with the parent's
// unflushed writes, and sib is what the child shares with its siblings.
func (e *Engine) makeChild(parent *Shard, child routing.ShardID, span routing.Span, build ChildBuild, how childFlush, sib siblings) (*Shard, ChildStats, error) {
	if e.opts.Layout == LayoutShared {
		return e.createSharedChild(parent, child, span)
	}
	stats := ChildStats{Shard: child}
	dir := e.ShardDir(child)
	if _, err := e.opts.FS.Stat(dir); err == nil {
		return nil, stats, fmt.Errorf("storage: create child %d: %s already exists", child, dir)
	}
	// From the checkpoint on, a failure removes the child's directory (and
	// closes its store if it was opened): a directory left behind would
	// make every later split that picks the same id fail.
	fail := func(err error) (*Shard, ChildStats, error) {
		return nil, stats, e.discardStore(child, dir, fmt.Errorf("storage: create child %d: %w", child, err))
	}
	lo, hi := SpanBounds(parent.keyspace, span)
	docs := pebble.CheckpointSpan{Start: lo, End: hi}
	if build == ChildKeepAll {
		docs = pebble.CheckpointSpan{Start: allDocs[0], End: allDocs[1]}
	}
	logged, _ := parent.loggedAfter() // held: CreateChildren refuses a parent whose log is not
	start := e.opts.Clock.Now()
	if how.first {
		flushed, rotated, skipped, err := e.flushForCheckpoint(parent, false)
		if err != nil {
			return nil, stats, fmt.Errorf("storage: create child %d: %w", child, err)
		}
		stats.Flush, stats.Rotate, stats.SkippedFlush = flushed, rotated, skipped
		start = e.opts.Clock.Now()
	}
	stats.OmittedWAL = how.omitWAL
	// Inside the parent's gate: a close waits for the checkpoint, which
	// holds a version of the parent's tables (and panics on a closed DB).
	if !parent.st.enter() {
		return nil, stats, fmt.Errorf("storage: create child %d: checkpoint of shard %d: %w", child, parent.id, ErrShardClosed)
	}
	endOmit := func() {}
	if how.omitWAL {
		endOmit = parent.st.cfs.omitWAL(dir)
	}
	// The `_id` index is ordered by _id, not by span: the child links all
	// of it and keeps its own entries (trimIDIndex; a keep-all child's
	// cleanup drops the others).
	// WithFlushedWAL syncs the parent's WAL, which only a child that
	// copies it needs.
	var flushedWAL []pebble.CheckpointOption
	if !how.omitWAL {
		flushedWAL = append(flushedWAL, pebble.WithFlushedWAL())
	}
	err := parent.st.db.Checkpoint(dir, append(flushedWAL,
		pebble.WithRestrictToSpans([]pebble.CheckpointSpan{docs, {Start: allIDs[0], End: allIDs[1]}, {Start: metaKey(metaSeq, parent.id), End: metaKey(metaSeq, parent.id+1)}}))...)
	endOmit()
	parent.st.exit()
	if err == nil {
		err = syncDir(e.opts.FS, e.opts.Dir) // the checkpoint directory's entry
	}
	stats.Checkpoint = e.opts.Clock.Since(start)
	if err != nil {
		return fail(fmt.Errorf("checkpoint of shard %d: %w", parent.id, err))
	}
	stats.Linked, stats.Copied = e.linkedBytes(dir)

	start = e.opts.Clock.Now()
	opened := false
	// Trimmed before the engine knows the store, so that a close cannot
	// close it under the excise. Compactions held until the handoff.
	_, err = e.openChildStore(dir, sib, func(st *store) error {
		stats.Open, opened = e.opts.Clock.Since(start), true
		start := e.opts.Clock.Now()
		var seq uint64
		var err error
		if build == ChildKeepAll {
			seq, err = keepChildStore(st, parent.id, child, parent.keyspace, span)
		} else {
			seq, err = trimChildStore(st, parent.id, child, lo, hi)
		}
		stats.Excise, stats.Seq = e.opts.Clock.Since(start), seq
		if err == nil && build != ChildKeepAll {
			start := e.opts.Clock.Now()
			stats.IDIndex, err = e.trimIDIndex(st, parent.keyspace, span, e.opts.IDIndex)
			stats.IDs = e.opts.Clock.Since(start)
		}
		switch {
		case err != nil:
		case how.unflushed && seq < how.floor:
			// Cannot be: the history is trimmed only of what a flush
			// installed before the pin put in the tables.
			err = fmt.Errorf("checkpoint of the flushed tables reflects shard %d up to sequence number %d, but its retained history holds only writes after %d: writes (%d, %d] are in neither", parent.id, seq, how.floor, seq, how.floor)
		case how.omitWAL && !how.unflushed && seq < logged:
			// The flushed tables end before the log begins: the writes
			// between are in neither (a flush made before the hold).
			err = fmt.Errorf("checkpoint without WAL reflects shard %d up to sequence number %d, but its operation log holds only writes after %d: writes (%d, %d] are in neither", parent.id, seq, logged, seq, logged)
		}
		return err
	})
	if !opened {
		stats.Open = e.opts.Clock.Since(start)
	}
	if err != nil {
		return fail(err)
	}
	s, err := e.OpenShard(child, parent.keyspace, []routing.Span{span})
	if err != nil {
		return fail(err)
	}
	stats.Unflushed = how.unflushed
	if how.unflushed && stats.Seq < logged {
		// The writes the tables lack up to the log's start: the log has
		// every later one, and the catch-up replays them.
		// The replay fills the child's young memtables (Pebble's first
		// is 256 KiB and each next one doubles), whose flushes are the
		// split's: paced like the parent's flush was, at the split's rate
		// shared with the siblings.
		start := e.opts.Clock.Now()
		unpace := s.st.cfs.pace()
		n, err := replayHistory(parent, s, stats.Seq, logged)
		unpace()
		stats.History, stats.Replay = n, e.opts.Clock.Since(start)
		if err != nil {
			return fail(fmt.Errorf("replay the retained history of shard %d after %d: %w", parent.id, stats.Seq, err))
		}
		stats.Seq = logged
	}
	seq := stats.Seq
	e.logger.Debug("child created", zap.Uint32("shard", uint32(child)), zap.Uint32("parent", uint32(parent.id)),
		zap.Uint64("seq", seq), zap.Duration("took", stats.Total()), zap.Duration("flush", stats.Flush), zap.Duration("rotate", stats.Rotate), zap.Duration("checkpoint", stats.Checkpoint),
		zap.Duration("open", stats.Open), zap.Duration("excise", stats.Excise),
		zap.Int64("linked_bytes", stats.Linked), zap.Int64("copied_bytes", stats.Copied), zap.Bool("skipped_flush", stats.SkippedFlush))
	return s, stats, nil
}

// replayHistory applies to child the operations of parent's retained
// history in (after, upTo] that fall in its span, and returns how many.
// The caller pinned the history.
func replayHistory(parent, child *Shard, after, upTo uint64) (int, error) {
	entries, err := parent.st.hist.since(after, upTo, child.Owned())
	if err != nil {
		return 0, err
	}
	for i := 0; i < len(entries); i += 256 {
		if err := child.ApplyLog(entries[i:min(i+256, len(entries))]); err != nil {
			return i, err
		}
	}
	return len(entries), nil
}

// pinHistory pins the shard's retained history for a split's children
// and reports whether it stands in for the store's memtables (history.go:
// every batch committed so far is recorded or in a table), with its
// floor; on false it is not pinned. The probe of Pebble's sequence number
// is made under the apply lock, so no write of the shard is committing.
func (s *Shard) pinHistory() (floor uint64, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() || !s.st.enter() {
		return 0, false, ErrShardClosed
	}
	defer s.st.exit()
	next, err := probeSeq(s.st.db)
	if err != nil {
		return 0, false, fmt.Errorf("storage: shard %d: read its store's sequence number: %w", s.id, err)
	}
	if floor, ok = s.st.hist.pin(next); !ok {
		s.st.hist.unpin()
	}
	return floor, ok, nil
}

// discardStore undoes a failed creation of shard id's store in dir: it
// forgets the shard and the store if they were registered, closes the
// store, and removes dir durably. It returns cause, with the cleanup's
// failure attached if there was one.
func (e *Engine) discardStore(id routing.ShardID, dir string, cause error) error {
	e.mu.Lock()
	if s, ok := e.shards[id]; ok && s.st.dir == dir {
		delete(e.shards, id)
		s.closed.Store(true)
	}
	st, open := e.stores[dir]
	delete(e.stores, dir)
	e.mu.Unlock()
	var errs []error
	if open {
		errs = append(errs, st.close())
	}
	if err := e.opts.FS.RemoveAll(dir); err != nil {
		errs = append(errs, fmt.Errorf("storage: remove %s: %w", dir, err))
	} else {
		errs = append(errs, syncDir(e.opts.FS, e.opts.Dir))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w (and cleaning up %s failed: %w)", cause, dir, err)
	}
	return cause
}

// trimChildStore makes a fresh checkpoint hold exactly the child's span:
// every document outside [lo, hi) and the whole operation log are excised,
// and the parent's sequence number becomes the child's. It returns S.
func trimChildStore(st *store, parent, child routing.ShardID, lo, hi []byte) (uint64, error) {
	seq, err := readSeq(st.db, parent)
	if err != nil {
		return 0, err
	}
	for _, r := range [][2][]byte{{allDocs[0], lo}, {hi, allDocs[1]}, {{tagLog}, {tagEnd}}} {
		if string(r[0]) < string(r[1]) {
			if err := st.excise(r[0], r[1]); err != nil {
				return 0, err
			}
		}
	}
	return seq, adoptSeq(st, parent, child, seq)
}

// adoptSeq makes a copied store's sequence number the new shard's: the
// source shard's metadata key is replaced by the new shard's, durably.
func adoptSeq(st *store, from, to routing.ShardID, seq uint64) error {
	b := st.db.NewBatch()
	defer b.Close()
	_ = b.Delete(metaKey(metaSeq, from), nil)
	_ = b.Set(metaKey(metaSeq, to), binary.BigEndian.AppendUint64(nil, seq), nil)
	if err := st.applySynced(b); err != nil {
		return fmt.Errorf("storage: shard %d adopts sequence number %d of shard %d: %w", to, seq, from, err)
	}
	return nil
}

// destroySharedShard deletes a shard's sequence number and operation log
// from the node's store, opening the store if it exists and is not open.
func (e *Engine) destroySharedShard(id routing.ShardID) error {
	dir := e.storeDir(id)
	e.mu.Lock()
	st, open := e.stores[dir]
	if !open {
		if _, err := e.opts.FS.Stat(dir); err != nil {
			e.mu.Unlock()
			if errors.Is(err, os.ErrNotExist) {
				return nil // no store: nothing of the shard's was ever written
			}
			return fmt.Errorf("storage: destroy shard %d: %w", id, err)
		}
		var err error
		if st, err = e.storeLocked(dir); err != nil {
			e.mu.Unlock()
			return fmt.Errorf("storage: destroy shard %d: %w", id, err)
		}
	}
	e.mu.Unlock()
	if !st.enter() { // the node's store, which Engine.Close may close beside us
		return fmt.Errorf("storage: destroy shard %d: %w", id, ErrShardClosed)
	}
	defer st.exit()
	lo, hi := logBounds(id)
	b := st.db.NewBatch()
	defer b.Close()
	_ = b.DeleteRange(lo, hi, nil)
	_ = b.Delete(metaKey(metaSeq, id), nil)
	if err := st.applySynced(b); err != nil {
		return fmt.Errorf("storage: destroy shard %d: %w", id, err)
	}
	return nil
}

func (e *Engine) createSharedChild(parent *Shard, child routing.ShardID, span routing.Span) (*Shard, ChildStats, error) {
	seq := parent.Seq()
	if !parent.st.enter() { // a closed Pebble panics
		return nil, ChildStats{}, fmt.Errorf("storage: create child %d: %w", child, ErrShardClosed)
	}
	b := parent.st.db.NewBatch()
	defer b.Close()
	_ = b.Set(metaKey(metaSeq, child), binary.BigEndian.AppendUint64(nil, seq), nil)
	err := parent.st.db.Apply(b, pebble.Sync)
	parent.st.exit()
	if err != nil {
		return nil, ChildStats{}, fmt.Errorf("storage: create child %d: %w", child, err)
	}
	s, err := e.OpenShard(child, parent.keyspace, []routing.Span{span})
	return s, ChildStats{Shard: child, Seq: seq}, err
}

// CatchUp replays into the children every parent write after sequence
// number after that falls in their spans, and returns the parent sequence
// number it covered and how many operations it applied. In the shared
// layout the children already see the parent's writes (same keys, same
// store), so it applies nothing.
func (e *Engine) CatchUp(parent *Shard, children []*Shard, after uint64) (uint64, int, error) {
	if e.opts.Layout == LayoutShared {
		return parent.Seq(), 0, nil
	}
	// NB: one bound for every child. Reading the parent's sequence number
	// per child let a later child's bound run ahead of an earlier child's,
	// and the next round (which starts after the bound returned) skipped
	// the difference for the earlier child: acknowledged writes were lost.
	// TestSplitUnderConcurrentWrites and TestSplitLinearizable caught it.
	upTo := parent.Seq()
	// INV-8: the log has every write after S only while a hold taken at
	// or before S lasts. Without one, the writes of the gap are in no log
	// and the children would silently lack them.
	if from, held := parent.loggedAfter(); after < upTo && !held {
		return 0, 0, fmt.Errorf("storage: catch up from shard %d after %d: its operation log is not held, so writes (%d, %d] are in no log", parent.id, after, after, upTo)
	} else if after < upTo && after < from {
		return 0, 0, fmt.Errorf("storage: catch up from shard %d after %d: its operation log holds only writes after %d, so writes (%d, %d] are in no log", parent.id, after, from, after, from)
	}
	applied := 0
	for _, c := range children {
		var batch []LogEntry
		err := parent.LogSince(after, upTo, c.Owned(), func(le LogEntry) error {
			batch = append(batch, le)
			if len(batch) < 256 {
				return nil
			}
			err := c.ApplyLog(batch)
			applied += len(batch)
			batch = batch[:0]
			return err
		})
		if err == nil {
			err = c.ApplyLog(batch)
			applied += len(batch)
		}
		if err != nil {
			return 0, applied, fmt.Errorf("storage: catch up child %d from shard %d after %d: %w", c.id, parent.id, after, err)
		}
	}
	return upTo, applied, nil
}

// DropMethod says how a store drops a span it no longer owns.
type DropMethod uint8

const (
	// DropExcise removes the span in O(metadata) with Pebble's Excise.
	DropExcise DropMethod = iota + 1
	// DropRangeDeleteCompact writes a range tombstone and compacts the span:
	// the classic way, for comparison.
	DropRangeDeleteCompact
)

func (d DropMethod) String() string {
	switch d {
	case DropExcise:
		return "excise"
	case DropRangeDeleteCompact:
		return "range-delete+compact"
	}
	return fmt.Sprintf("DropMethod(%d)", uint8(d))
}

// DropSpans removes the documents of spans from shard's store. In the
// shared layout the keys now belong to other shards of the same store, so
// nothing is removed. After an ErrExciseUnverified the store may have lost
// documents outside spans and must be discarded (store.excise); only the
// storage benchmarks drop spans from a live store.
func (e *Engine) DropSpans(s *Shard, spans []routing.Span, how DropMethod) error {
	if e.opts.Layout == LayoutShared {
		return nil
	}
	for _, sp := range spans {
		lo, hi := SpanBounds(s.keyspace, sp)
		var err error
		if how == DropRangeDeleteCompact {
			err = s.st.deleteRangeAndCompact(lo, hi)
		} else {
			err = s.st.excise(lo, hi)
		}
		if err != nil {
			return fmt.Errorf("storage: shard %d: drop %s: %w", s.id, sp, err)
		}
	}
	return nil
}

// HoldCompactions is for a parent whose split begins (per-shard layout):
// its store starts no compaction unless Pebble calls it urgent, and the
// compactions it runs are paused at their next output write (see
// cancelFS.pause). Once the children exist, compacting the parent is
// wasted work that competes with the split's checkpoints, opens and
// excises, and with the writers, for the disk and the cores. A cancelled
// split gives the store back its compactions with ReleaseCompactions (a
// paused one goes on where it stopped); a split that hands off retires the
// parent, which cancels them. In the shared layout the store is the node's:
// nothing is held.
//
// NB: pausing, not cancelling. A cancelled compaction deletes its partial
// outputs at once, and at 4 GiB those are hundreds of MB whose unlink
// stalls the writers (cancelFS.pause). Not cancelled for that reason, a
// store under pressure (L0 or compaction debt: Pebble allows more than the
// normal concurrency) would keep its running compaction, which competed
// with the split at every 4 GiB split measured. A pause stops it without
// either cost. A write stall ends the pause (store.go): a parent whose L0
// fills during the split compacts at once, as it would without the split.
func (e *Engine) HoldCompactions(s *Shard) {
	if e.opts.Layout == LayoutShared {
		return
	}
	holdCompactions(s.st.sched, s.st.cfs)
}

// holdCompactions holds sched, pauses cfs's compactions and parks its WAL
// deletions (waldefer.go).
func holdCompactions(sched *holdScheduler, cfs *cancelFS) {
	sched.hold()
	cfs.pause()
	cfs.holdWALDeletes()
}

// RetireStats measures the destruction of an open shard's store.
type RetireStats struct {
	Close  time.Duration // closing the store (Pebble waits for its running flush and compactions)
	Remove time.Duration // removing its directory and syncing the parent directory
}

// retireStatsKept bounds the destructions TakeRetireStats remembers.
const retireStatsKept = 64

// TakeRetireStats returns (and forgets) what the destruction of shard id's
// open store measured, if DestroyShard destroyed one.
func (e *Engine) TakeRetireStats(id routing.ShardID) (RetireStats, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st, ok := e.retireStats[id]
	delete(e.retireStats, id)
	return st, ok
}

// DestroyShard closes a shard and removes what belongs only to it, whether
// or not the shard is open (recovery destroys shards it never opened): its
// store directory in the per-shard layout (files hard-linked into other
// stores live on through their other links), its sequence number and its
// operation log in the shared layout.
//
// In the shared layout a shard's documents are not its own: a child's keys
// are its parent's keys (a split changes only metadata), so a rolled-back
// child's documents belong to the parent again and a rolled-forward
// parent's to its children. DestroyShard leaves them.
func (e *Engine) DestroyShard(id routing.ShardID) error {
	e.stopForeignCleanup(id)
	e.mu.Lock()
	s, ok := e.shards[id]
	delete(e.shards, id)
	e.mu.Unlock()
	if ok {
		// Under the apply lock: no write is committing when the store may
		// go away.
		s.mu.Lock()
		s.closed.Store(true)
		s.mu.Unlock()
	}
	if e.opts.Layout == LayoutShared {
		return e.destroySharedShard(id)
	}
	dir := e.ShardDir(id)
	e.mu.Lock()
	st, open := e.stores[dir]
	delete(e.stores, dir)
	if open {
		e.retiredWritten += st.bytesWritten()
	}
	e.mu.Unlock()
	start := e.opts.Clock.Now()
	if open {
		// The store's data is going and its readers are gone: a
		// compaction it runs would only make close wait for it (seconds
		// on a multi-GiB store).
		if err := st.retireAndClose(); err != nil {
			return fmt.Errorf("storage: destroy shard %d: %w", id, err)
		}
	}
	closed := e.opts.Clock.Now()
	if err := e.opts.FS.RemoveAll(dir); err != nil {
		return fmt.Errorf("storage: destroy shard %d: %w", id, err)
	}
	removed := e.opts.Clock.Now()
	err := syncDir(e.opts.FS, e.opts.Dir)
	rs := RetireStats{Close: closed.Sub(start), Remove: e.opts.Clock.Since(closed)}
	if open && err == nil {
		e.mu.Lock()
		if e.retireStats == nil || len(e.retireStats) >= retireStatsKept {
			e.retireStats = map[routing.ShardID]RetireStats{}
		}
		e.retireStats[id] = rs
		e.mu.Unlock()
	}
	e.logger.Debug("shard destroyed", zap.Uint32("shard", uint32(id)), zap.Duration("close", rs.Close),
		zap.Duration("remove", removed.Sub(closed)), zap.Duration("sync", e.opts.Clock.Since(removed)))
	return err
}

// AdoptCheckpoint opens, as shard child owning span of keyspace, the store
// that a checkpoint of shard parent's store (made on another engine: a
// split's child copy built from its parent's copy beside it) left in
// ShardDir(child): every document outside span and the whole operation
// log are excised and the parent's sequence number becomes the child's, as
// CreateChild leaves a child. It returns the shard and that sequence
// number. A store that already is the child's (its sequence number moved)
// is opened as it is.
func (e *Engine) AdoptCheckpoint(parent, child, keyspace routing.ShardID, span routing.Span) (*Shard, uint64, error) {
	e.mu.Lock()
	st, err := e.storeLocked(e.storeDir(child))
	e.mu.Unlock()
	if err != nil {
		return nil, 0, fmt.Errorf("storage: adopt the checkpoint of shard %d as %d: %w", parent, child, err)
	}
	if pseq, err := readSeq(st.db, parent); err != nil {
		return nil, 0, err
	} else if pseq > 0 {
		lo, hi := SpanBounds(keyspace, span)
		if _, err := trimChildStore(st, parent, child, lo, hi); err != nil {
			return nil, 0, fmt.Errorf("storage: adopt the checkpoint of shard %d as %d: %w", parent, child, err)
		}
		if _, err := e.trimIDIndex(st, keyspace, span, e.opts.IDIndex); err != nil {
			return nil, 0, fmt.Errorf("storage: adopt the checkpoint of shard %d as %d: %w", parent, child, err)
		}
	}
	s, err := e.OpenShard(child, keyspace, []routing.Span{span})
	if err != nil {
		return nil, 0, err
	}
	return s, s.Seq(), nil
}
