package storage

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/internal/invariants"
	"github.com/shardsplit/shardsplit/routing"
)

// OutOfSpanError is returned when a write or read names a document key
// outside the spans a shard currently owns (defence in depth under the
// node's routing check: a store never takes a key it does not own).
type OutOfSpanError struct {
	Shard routing.ShardID
	Root  routing.ShardID // the keyspace of the key
	Key   routing.Key
	Owned []routing.Span
}

func (e *OutOfSpanError) Error() string {
	return fmt.Sprintf("storage: shard %d does not own keyspace %d key %d (owns %v of keyspace %d)", e.Shard, e.Root, e.Key, e.Owned, e.Root)
}

// ErrShardClosed is returned by operations on a shard after Close or
// retirement.
var ErrShardClosed = errors.New("storage: shard closed")

// ErrSyncFailed is returned by a write whose WAL sync failed. The write was
// applied, so reads of the store may return it, yet it is not durable, and
// after a failed fsync it may never become so (the kernel may have dropped
// the dirty pages): the caller must stop serving from the store until a
// reopen replays what the disk really holds (PostgreSQL's and Pebble's
// rule that a failed fsync is fatal).
var ErrSyncFailed = errors.New("storage: WAL sync failed")

// Shard is a span of an engine: the documents of one shard, their sequence
// numbers and (while a split needs it) their operation log. In the
// per-shard layout it has a store of its own; in the shared layout it is a
// key range of the node's store. Callers cannot tell the difference.
//
// Concurrency: every method is safe for concurrent use. Writes are applied
// in sequence-number order under the shard's apply lock; a Write's guard runs
// under that lock, so a check it makes (the node's routing fence) holds for
// the write it admits.
type Shard struct {
	id         routing.ShardID
	keyspace   routing.ShardID
	st         *store
	durability Durability
	clock      clock.Clock
	ids        bool                  // keeps the `_id` index (Options.IDIndex is not IDIndexOff)
	beforeGet  func(routing.ShardID) // Options.BeforeGet

	mu      sync.Mutex    // the apply lock: commits happen under it, in sequence order
	seq     atomic.Uint64 // last sequence number applied; written under mu
	logHold int           // splits that need the operation log (> 0: log every write); under mu
	closed  atomic.Bool   // retired or engine closed

	// logged is 0 while no one holds the log, else 1 + the sequence
	// number after which every write is in it. Written under mu, read
	// without it (loggedAfter: a fenced parent's catch-up holds mu).
	logged atomic.Uint64

	ownMu sync.RWMutex // guards owned; never held while waiting for mu
	owned []routing.Span

	load loadStats // see load.go
}

// ID returns the shard's id.
func (s *Shard) ID() routing.ShardID { return s.id }

// Keyspace returns the keyspace the shard's documents live in
// (routing.Table.Keyspace of its root).
func (s *Shard) Keyspace() routing.ShardID { return s.keyspace }

// Seq returns the last sequence number applied.
func (s *Shard) Seq() uint64 { return s.seq.Load() }

// Owned returns the routing-key spans the shard currently owns.
func (s *Shard) Owned() []routing.Span {
	s.ownMu.RLock()
	defer s.ownMu.RUnlock()
	return slices.Clone(s.owned)
}

// SetOwned replaces the spans the shard owns. The splitter shrinks a
// parent's spans at handoff; from then on the shard refuses the moved keys.
// It may be called while the apply lock is held (inside Exclusive).
func (s *Shard) SetOwned(spans []routing.Span) {
	s.ownMu.Lock()
	defer s.ownMu.Unlock()
	s.owned = sortedSpans(spans)
}

// sortedSpans returns a copy of spans in key order, the order in which a
// shard keeps its owned spans: scans return documents in key order, and
// foreignRanges takes them sorted (spans out of order made every owned
// document foreign: TestTrimToOwnedWithSpansOutOfOrder).
func sortedSpans(spans []routing.Span) []routing.Span {
	return slices.SortedFunc(slices.Values(spans), func(a, b routing.Span) int { return cmp.Compare(a.Start, b.Start) })
}

// owns reports whether the shard owns a key, and the spans it owns.
func (s *Shard) owns(keyspace routing.ShardID, k routing.Key) (bool, []routing.Span) {
	s.ownMu.RLock()
	defer s.ownMu.RUnlock()
	if keyspace != s.keyspace {
		return false, s.owned
	}
	for _, sp := range s.owned {
		if sp.Contains(k) {
			return true, nil
		}
	}
	return false, s.owned
}

// outOfSpan checks ops against the owned spans.
func (s *Shard) outOfSpan(keyspace routing.ShardID, k routing.Key) error {
	if ok, owned := s.owns(keyspace, k); !ok {
		return &OutOfSpanError{Shard: s.id, Root: keyspace, Key: k, Owned: slices.Clone(owned)}
	}
	return nil
}

// Write applies ops atomically with consecutive sequence numbers and
// returns the last one. guard, if not nil, runs first under the apply lock;
// its error aborts the write with nothing applied. A key outside the owned
// spans fails the whole write with *OutOfSpanError.
//
// An op acts on the shard's document of its _id, whatever routing value
// stored it (idindex.go): an index replaces it, moving it under the op's
// key, and a delete deletes it.
//
// With DurabilityRequest Write returns after the WAL fsync; concurrent
// writers share fsyncs, because the fsync wait happens outside the lock.
func (s *Shard) Write(ops []Op, guard func() error) (uint64, error) {
	return s.write(ops, guard, true)
}

// WriteNoWait is Write that returns once the ops are applied (readable,
// in sequence order; a read that sees them first syncs them, see
// store.readDurable), before their WAL fsync ends: wait returns once they
// are durable (at once without DurabilityRequest). wait must be called,
// once. A replication primary sends the ops to its replicas meanwhile, so
// that its fsync and theirs overlap.
func (s *Shard) WriteNoWait(ops []Op, guard func() error) (last uint64, wait func() error, err error) {
	return s.writeNoWait(ops, guard, true)
}

// write is Write; without resolve each op is stored under its key as it
// is (applyLocked).
func (s *Shard) write(ops []Op, guard func() error, resolve bool) (uint64, error) {
	last, wait, err := s.writeNoWait(ops, guard, resolve)
	if err != nil {
		return 0, err
	}
	return last, wait()
}

func (s *Shard) writeNoWait(ops []Op, guard func() error, resolve bool) (uint64, func() error, error) {
	// Enter the store only once the apply lock is ours: a write waiting
	// on a fence must not hold up the store's close.
	s.mu.Lock()
	if !s.st.enter() {
		s.mu.Unlock()
		return 0, nil, ErrShardClosed
	}
	b := s.st.db.NewBatch()
	if len(ops) > 1 && s.ids && resolve {
		// An op must see the ones before it in the batch: two ops of one
		// _id under two keys leave one document.
		b = s.st.db.NewIndexedBatch()
	}
	// Unless the wait takes them over, the batch and the gate are
	// released on the way out, a panic (an invariant) included.
	handed := false
	defer func() {
		if !handed {
			_ = b.Close()
			s.st.exit()
		}
	}()
	last, err := s.applyLocked(b, ops, guard, resolve)
	s.mu.Unlock()
	if err != nil {
		return 0, nil, err
	}
	handed = true
	s.load.countWrites(ops)
	// The store stays entered until the sync ends: a close waits for it.
	wait := func() error {
		defer s.st.exit()
		defer b.Close()
		if s.durability == DurabilityRequest {
			if err := s.st.syncWait(b); err != nil {
				return fmt.Errorf("storage: shard %d: %w: %w", s.id, ErrSyncFailed, err)
			}
		}
		return nil
	}
	return last, wait, nil
}

// applyLocked builds and commits the batch. The commit happens under the
// apply lock so that Pebble's commit order (and so any checkpoint's prefix)
// equals sequence-number order. With resolve, each op acts on the shard's
// document of its _id (indexOpLocked); without, it is stored under its key
// as it is (CopyFrom's copies), its `_id` entry with it.
func (s *Shard) applyLocked(b *pebble.Batch, ops []Op, guard func() error, resolve bool) (uint64, error) {
	if s.closed.Load() {
		return 0, ErrShardClosed
	}
	if guard != nil {
		if err := guard(); err != nil {
			return 0, err
		}
	}
	for _, op := range ops {
		if err := s.outOfSpan(op.Root, op.Key); err != nil {
			return 0, err
		}
	}
	seq := s.seq.Load()
	var dk, val, lk, lv, ik []byte
	var r pebble.Reader = s.st.db
	if b.Indexed() {
		r = b
	}
	entries := make([]LogEntry, 0, len(ops)) // the retained history's (history.go)
	for _, op := range ops {
		seq++
		var removed []routing.Key
		switch {
		case !s.ids:
		case resolve:
			var err error
			if removed, ik, err = s.indexOpLocked(b, r, op, ik); err != nil {
				return 0, err
			}
		default:
			ik = s.putEntryLocked(b, op.Root, op.ID, op.Key, op.Kind == OpIndex && op.Routing != "", ik)
		}
		dk = DocKey(dk, op.Root, op.Key, op.ID)
		switch op.Kind {
		case OpIndex:
			val = docValue(val, seq, op.Routing, op.Source)
			_ = b.Set(dk, val, nil)
		case OpDelete:
			_ = b.Delete(dk, nil)
		default:
			return 0, fmt.Errorf("storage: unknown op kind %d", op.Kind)
		}
		if s.logHold > 0 {
			lk = logKey(lk, s.id, seq)
			lv = logValue(lv, op, seq, dk, removed)
			_ = b.Set(lk, lv, nil)
		}
		entries = append(entries, LogEntry{Seq: seq, Op: op, Removed: removed})
	}
	_ = b.Set(metaKey(metaSeq, s.id), binary.BigEndian.AppendUint64(nil, seq), nil)
	if err := s.commitLocked(b); err != nil {
		return 0, fmt.Errorf("storage: shard %d: commit %d ops: %w", s.id, len(ops), err)
	}
	s.st.hist.record(b, entries)
	s.seq.Store(seq)
	return seq, nil
}

func (s *Shard) commitLocked(b *pebble.Batch) error {
	if s.durability == DurabilityRequest {
		return s.st.commitSyncNoWait(b)
	}
	return s.st.db.Apply(b, pebble.NoSync)
}

// Get returns a document, or false if it does not exist.
func (s *Shard) Get(keyspace routing.ShardID, key routing.Key, id string) (Doc, bool, error) {
	if err := s.outOfSpan(keyspace, key); err != nil {
		return Doc{}, false, err
	}
	return s.GetAny(keyspace, key, id)
}

// Scan calls fn for every document in the shard's owned spans, in key
// order. It reads a consistent snapshot taken when it starts. fn must not
// keep doc.Source after it returns.
func (s *Shard) Scan(fn func(Doc) error) error {
	if s.closed.Load() || !s.st.beginScan() {
		return ErrShardClosed
	}
	defer s.st.endScan()
	s.load.reads.Add(1)
	snap := s.st.db.NewSnapshot()
	defer snap.Close()
	if err := s.st.readDurable(); err != nil {
		return fmt.Errorf("storage: shard %d: scan: %w", s.id, err)
	}
	fn = s.stopOnClose(fn)
	for _, sp := range s.Owned() {
		if err := scanSpan(snap, s.keyspace, sp, fn); err != nil {
			return fmt.Errorf("storage: shard %d: scan %s: %w", s.id, sp, err)
		}
	}
	return nil
}

// stopOnClose wraps a scan's callback so the scan ends with ErrShardClosed
// at its next document once the store is closing (see store.beginScan).
func (s *Shard) stopOnClose(fn func(Doc) error) func(Doc) error {
	return func(d Doc) error {
		if s.st.closing.Load() {
			return ErrShardClosed
		}
		return fn(d)
	}
}

// reader is what scans need of a DB or snapshot.
type reader interface {
	NewIter(*pebble.IterOptions) (*pebble.Iterator, error)
}

func scanSpan(r reader, keyspace routing.ShardID, sp routing.Span, fn func(Doc) error) error {
	lo, hi := SpanBounds(keyspace, sp)
	return scanDocs(r, lo, hi, fn)
}

// scanDocs calls fn for every document with a key in [lo, hi).
func scanDocs(r reader, lo, hi []byte, fn func(Doc) error) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		d, err := decodeDoc(it.Key(), it.Value())
		if err != nil {
			_ = it.Close()
			return err
		}
		if err := fn(d); err != nil {
			_ = it.Close()
			return err
		}
	}
	return it.Close()
}

func decodeDoc(k, v []byte) (Doc, error) {
	keyspace, key, id, err := DecodeDocKey(k)
	if err != nil {
		return Doc{}, err
	}
	seq, r, src, err := decodeDocValue(v)
	if err != nil {
		return Doc{}, fmt.Errorf("key %x: %w", k, err)
	}
	return Doc{Root: keyspace, Key: key, ID: id, Routing: r, Seq: seq, Source: src}, nil
}

// CountKeys returns the number of documents in a span of the shard's keyspace
// stored in the shard's store, owned or not (used by tests and metrics to
// prove that no foreign key is visible).
func (s *Shard) CountKeys(sp routing.Span) (int, error) {
	if s.closed.Load() || !s.st.beginScan() {
		return 0, ErrShardClosed
	}
	defer s.st.endScan()
	n := 0
	err := scanSpan(s.st.db, s.keyspace, sp, s.stopOnClose(func(Doc) error { n++; return nil }))
	return n, err
}

// CountKeysOutside returns the number of documents stored in the shard's
// store outside a span of its keyspace: in every other keyspace, and in its
// own around the span. A store whose shard owns sp must hold none (INV-6;
// recovery.Check). Like CountKeys it reads the shard's whole store, which
// only the per-shard layout gives a shard to itself.
func (s *Shard) CountKeysOutside(sp routing.Span) (int, error) {
	if s.closed.Load() || !s.st.beginScan() {
		return 0, ErrShardClosed
	}
	defer s.st.endScan()
	n := 0
	count := s.stopOnClose(func(Doc) error { n++; return nil })
	for _, r := range foreignRanges(s.keyspace, []routing.Span{sp}) {
		if err := scanDocs(s.st.db, r[0], r[1], count); err != nil {
			return n, err
		}
	}
	return n, nil
}

// HoldLog makes every later write also append to the shard's operation
// log, until the matching ReleaseLog. A split holds the log from before its
// checkpoint until its handoff, so every write after the checkpoint can be
// replayed into the children.
func (s *Shard) HoldLog() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logHold == 0 {
		s.logged.Store(s.seq.Load() + 1)
	}
	s.logHold++
}

// loggedAfter returns the sequence number after which every write of the
// shard is in its operation log, and false if no one holds the log. It
// does not take the apply lock, which a fenced shard's caller holds.
func (s *Shard) loggedAfter() (uint64, bool) {
	v := s.logged.Load()
	if v == 0 {
		return 0, false
	}
	return v - 1, true
}

// dropLogHoldLocked drops one hold; s.mu is held.
func (s *Shard) dropLogHoldLocked() {
	if s.logHold--; s.logHold == 0 {
		s.logged.Store(0)
	}
}

// ReleaseLog drops a hold; when none remain the log is trimmed, because no
// split needs it (the trimming rule). The last hold is dropped only once the
// trim is durable: if the trim fails, the hold stays and ReleaseLog may be
// called again.
func (s *Shard) ReleaseLog() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logHold == 0 {
		return fmt.Errorf("storage: shard %d: release of an operation log nobody holds", s.id)
	}
	if s.logHold > 1 || s.closed.Load() {
		s.dropLogHoldLocked()
		return nil
	}
	if err := s.trimLogLocked(); err != nil {
		return err
	}
	s.dropLogHoldLocked()
	return nil
}

// trimLogLocked deletes the shard's whole operation log, durably. The
// deletion is synced so that a failed fsync comes back as an error (Pebble
// treats any other failed write as fatal) and the caller can retry it.
func (s *Shard) trimLogLocked() error {
	if !s.st.enter() { // see ApplyLog
		return fmt.Errorf("storage: shard %d: trim operation log: %w", s.id, ErrShardClosed)
	}
	defer s.st.exit()
	lo, hi := logBounds(s.id)
	b := s.st.db.NewBatch()
	defer b.Close()
	_ = b.DeleteRange(lo, hi, nil)
	if err := s.st.applySynced(b); err != nil {
		return fmt.Errorf("storage: shard %d: trim operation log: %w", s.id, err)
	}
	s.st.hist.record(b, nil) // the log is no child's: the tables' documents are the same with or without it
	return nil
}

// LogSince calls fn for every logged operation with a sequence number in
// (after, upTo], in order, for the spans given (nil = all): those whose key
// or one of whose removed keys (LogEntry.Removed) is in them. upTo must not
// exceed Seq(): every write up to Seq() is visible.
func (s *Shard) LogSince(after, upTo uint64, spans []routing.Span, fn func(LogEntry) error) error {
	if after >= upTo {
		return nil
	}
	if cur := s.Seq(); upTo > cur {
		return fmt.Errorf("storage: shard %d: log read up to %d beyond last sequence number %d", s.id, upTo, cur)
	}
	// Registered like a scan: a close waits for the iterator, which pins
	// the store's tables in the engine's shared file cache (closing under
	// it panicked the process), and stops the read at its next entry.
	if s.closed.Load() || !s.st.beginScan() {
		return fmt.Errorf("storage: shard %d: read operation log: %w", s.id, ErrShardClosed)
	}
	defer s.st.endScan()
	lo, hi := logKey(nil, s.id, after+1), logKey(nil, s.id, upTo+1)
	it, err := s.st.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("storage: shard %d: read operation log: %w", s.id, err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		if s.st.closing.Load() {
			return fmt.Errorf("storage: shard %d: read operation log: %w", s.id, ErrShardClosed)
		}
		e, err := decodeLogEntry(it.Key(), it.Value())
		if err != nil {
			return err
		}
		if spans != nil && !inSpans(spans, e.Op.Key) && !slices.ContainsFunc(e.Removed, func(k routing.Key) bool { return inSpans(spans, k) }) {
			continue
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return it.Error()
}

func inSpans(spans []routing.Span, k routing.Key) bool {
	for _, sp := range spans {
		if sp.Contains(k) {
			return true
		}
	}
	return false
}

// ApplyLog applies operations replayed from a parent's log, keeping their
// sequence numbers, and raises the shard's sequence number to the last one.
// Replaying an entry twice is harmless: entries are applied in ascending
// order (an assertion: entries out of order are refused) and each sets the document to the state it had at that sequence
// number. Of an entry, the shard applies what falls in its spans: the
// op's own key, and the deletes of the other documents of its _id
// (LogEntry.Removed), which may have moved to another child; an entry of
// which nothing is in its spans is refused (*OutOfSpanError).
func (s *Shard) ApplyLog(entries []LogEntry) error {
	return s.applyLog(entries, false, false)
}

// applyLog is ApplyLog; with history it also records each entry in the
// shard's operation log, and with undo the value each key it changes had
// before (replica.go). Either makes the batch durable before it returns.
func (s *Shard) applyLog(entries []LogEntry, history, undo bool) error {
	wait, err := s.applyLogNoWait(entries, history, undo)
	if err != nil {
		return err
	}
	return wait()
}

// applyLogNoWait is applyLog that returns once the entries are applied,
// before the fsync that makes them durable (with history or undo) ends:
// wait returns once it did, and must be called, once.
func (s *Shard) applyLogNoWait(entries []LogEntry, history, undo bool) (func() error, error) {
	if len(entries) == 0 {
		return func() error { return nil }, nil
	}
	var b *pebble.Batch
	if undo {
		b = s.st.db.NewIndexedBatch() // an entry's undo reads what the ones before it left
	} else {
		b = s.st.db.NewBatch()
	}
	s.mu.Lock()
	// The store's gate too, as Write: Engine.Close sets closed without
	// the apply lock, and closes the store once no one is inside the gate.
	if s.closed.Load() || !s.st.enter() {
		s.mu.Unlock()
		_ = b.Close()
		return nil, ErrShardClosed
	}
	// Unless the wait takes them over, the batch and the gate are
	// released on the way out, a panic (an invariant) included.
	handed := false
	defer func() {
		if !handed {
			_ = b.Close()
			s.st.exit()
		}
	}()
	synced, err := func() (bool, error) {
		defer s.mu.Unlock()
		return s.applyLogLocked(b, entries, history, undo)
	}()
	if err != nil {
		return nil, err
	}
	handed = true
	// The store stays entered until the sync ends: a close waits for it.
	return func() error {
		defer s.st.exit()
		defer b.Close()
		if synced {
			if err := s.st.syncWait(b); err != nil {
				return fmt.Errorf("storage: shard %d: apply %d log entries: %w: %w", s.id, len(entries), ErrSyncFailed, err)
			}
		}
		return nil
	}, nil
}

// applyLogLocked builds and commits applyLog's batch, and reports whether
// it was committed with a sync to wait for.
func (s *Shard) applyLogLocked(b *pebble.Batch, entries []LogEntry, history, undo bool) (bool, error) {
	var dk, val, ik, lk, lv []byte
	last := s.seq.Load()
	eb := s.st.db.NewBatch()
	defer eb.Close()
	for i, e := range entries {
		// A log holds one entry per sequence number, read in key order:
		// entries out of order would leave an older state of a document.
		if i > 0 && e.Seq <= entries[i-1].Seq {
			return false, invariants.AssertionFailedf("storage: shard %d: log entry %d has sequence number %d after %d", s.id, i, e.Seq, entries[i-1].Seq)
		}
		eb.Reset()
		if e.Op.Kind == OpNoop {
			if undo {
				_ = b.Set(undoKey(s.id, e.Seq), binary.AppendUvarint(nil, 0), nil) // nothing to take back
			}
			if history {
				lk = logKey(lk, s.id, e.Seq)
				lv = logValue(lv, e.Op, e.Seq, nil, nil)
				_ = b.Set(lk, lv, nil)
			}
			last = max(last, e.Seq)
			continue
		}
		err := s.outOfSpan(e.Op.Root, e.Op.Key)
		mine := err == nil
		for _, k := range e.Removed {
			if ok, _ := s.owns(e.Op.Root, k); ok {
				mine = true
				_ = eb.Delete(DocKey(nil, e.Op.Root, k, e.Op.ID), nil)
				if s.ids && s.st.idEntries.Load() {
					_ = eb.Delete(idKey(nil, e.Op.Root, e.Op.ID, k), nil)
				}
			}
		}
		if !mine {
			return false, err
		}
		dk = DocKey(dk, e.Op.Root, e.Op.Key, e.Op.ID)
		if err == nil {
			if e.Op.Kind == OpIndex {
				val = docValue(val, e.Seq, e.Op.Routing, e.Op.Source)
				_ = eb.Set(dk, val, nil)
			} else {
				_ = eb.Delete(dk, nil)
			}
			if s.ids {
				ik = s.putEntryLocked(eb, e.Op.Root, e.Op.ID, e.Op.Key, e.Op.Kind == OpIndex && e.Op.Routing != "", ik)
			}
		}
		if undo {
			rec, err := undoRecord(b, eb)
			if err != nil {
				return false, fmt.Errorf("storage: shard %d: undo record of %d: %w", s.id, e.Seq, err)
			}
			_ = b.Set(undoKey(s.id, e.Seq), rec, nil)
		}
		if err := b.Apply(eb, nil); err != nil {
			return false, fmt.Errorf("storage: shard %d: apply log entry %d: %w", s.id, e.Seq, err)
		}
		if history {
			lk = logKey(lk, s.id, e.Seq)
			lv = logValue(lv, e.Op, e.Seq, dk, e.Removed)
			_ = b.Set(lk, lv, nil)
		}
		last = max(last, e.Seq)
	}
	_ = b.Set(metaKey(metaSeq, s.id), binary.BigEndian.AppendUint64(nil, last), nil)
	synced := history || undo
	var err error
	if synced {
		err = s.st.commitSyncNoWait(b)
	} else {
		err = s.st.db.Apply(b, pebble.NoSync)
	}
	if err != nil {
		return false, fmt.Errorf("storage: shard %d: apply %d log entries: %w", s.id, len(entries), err)
	}
	s.st.hist.record(b, entries)
	s.seq.Store(last)
	return synced, nil
}

// RaiseSeq makes the shard's next sequence number exceed seq, also after a
// restart once the shard is synced: the raised number is written to the
// store with the shard's other writes. A child does this at handoff so its
// sequence numbers stay above every parent write, a merge target so they
// stay above every source's. (In memory only, a merge target reopened
// before its first write numbered writes from the largest source's
// checkpoint, below documents copied from the other sources.)
func (s *Shard) RaiseSeq(seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq <= s.seq.Load() {
		return nil
	}
	if s.closed.Load() || !s.st.enter() { // see ApplyLog
		return ErrShardClosed
	}
	defer s.st.exit()
	b := s.st.db.NewBatch()
	defer b.Close()
	_ = b.Set(metaKey(metaSeq, s.id), binary.BigEndian.AppendUint64(nil, seq), nil)
	if err := s.st.db.Apply(b, pebble.NoSync); err != nil {
		return fmt.Errorf("storage: shard %d: raise sequence number to %d: %w", s.id, seq, err)
	}
	// No operation: a flushed state with or without the raise is the
	// same operations, and every later one is numbered above it.
	s.st.hist.record(b, nil)
	s.seq.Store(seq)
	return nil
}

// ReleaseCompactions lets a child's store pay the compaction debt it
// inherited (its compactions are held from creation until the split hands
// off; see holdScheduler), and gives a parent whose split was cancelled its
// compactions back, the paused ones where they stopped. Harmless on any
// other shard.
func (s *Shard) ReleaseCompactions() {
	s.st.sched.release()
	s.st.cfs.resume()
	if err := s.st.cfs.releaseWALDeletes(); err != nil {
		s.st.logger.Warn("obsolete WALs left for the next open to delete", zap.Uint32("shard", uint32(s.id)), zap.Error(err))
	}
}

// CompactionsHeld reports whether the shard's store runs only urgent
// compactions (a child before its handoff, a parent being split).
func (s *Shard) CompactionsHeld() bool {
	s.st.sched.mu.Lock()
	defer s.st.sched.mu.Unlock()
	return s.st.sched.held
}

// Backlog is a store's compaction backlog, from Pebble's metrics.
type Backlog struct {
	L0Sublevels int    // L0's read amplification: the sublevels a read may visit
	Debt        uint64 // Pebble's estimated compaction debt (all of L0 counts, even below its compaction threshold)
	Running     int    // compactions and flushes in progress
	Ended       int64  // compactions and flushes ended since the store opened
}

// Backlog returns the compaction backlog of the shard's store (shared by
// every shard in the shared layout).
func (s *Shard) Backlog() (Backlog, error) {
	if s.closed.Load() || !s.st.enter() {
		return Backlog{}, ErrShardClosed
	}
	defer s.st.exit()
	m := s.st.db.Metrics()
	return Backlog{L0Sublevels: int(m.Levels[0].Sublevels), Debt: m.Compact.EstimatedDebt,
		Running: int(m.Compact.NumInProgress + m.Flush.NumInProgress), Ended: m.Compact.Count + m.Flush.Count}, nil
}

// FlushesEnded counts the memtable flushes of the shard's store that have
// ended since it opened, its own and forced ones alike.
func (s *Shard) FlushesEnded() uint64 {
	_, flushed := s.st.flushes.counts()
	return flushed
}

// WriteStalled reports whether Pebble holds a write to the shard's store in
// a write stall now (its memtables full, or L0 at the stop-writes depth):
// until a flush or a compaction ends it, the writes in flight on the shard
// cannot drain, and a handoff's fence times out.
func (s *Shard) WriteStalled() bool { return s.st.cfs.stalls.Load() > 0 }

// AwaitWriteStallEnd waits up to limit, or until stop is closed (nil:
// never), for the shard's store to leave its write stall (WriteStalled
// false), and returns how long it waited and whether the stall ended. The
// bound is wall-clock time (pauseClock), a liveness guard that must fire
// under a manual clock too.
func (s *Shard) AwaitWriteStallEnd(limit time.Duration, stop <-chan struct{}) (waited time.Duration, ended bool) {
	start := pauseClock.Now()
	for s.WriteStalled() {
		waited = pauseClock.Since(start)
		if waited >= limit {
			return waited, false
		}
		select {
		case <-stop:
			return waited, false
		case <-pauseClock.After(min(stallPoll, limit-waited)):
		}
	}
	return pauseClock.Since(start), true
}

// stallPoll is how often AwaitWriteStallEnd looks at the store's stall: a
// write stall lasts a flush or a compaction (tens of milliseconds and up).
const stallPoll = 2 * time.Millisecond

// Flush writes the memtable of the shard's store to a table and waits for
// it (OpenSearch's flush, which commits the Lucene index): a split's
// children made after it have every document so far in their tables.
func (s *Shard) Flush() error {
	if s.closed.Load() {
		return ErrShardClosed
	}
	if err := s.st.flush(); err != nil {
		return fmt.Errorf("storage: shard %d: flush: %w", s.id, err)
	}
	return nil
}

// Sync makes every write applied to the shard's store so far durable.
func (s *Shard) Sync() error {
	if s.closed.Load() {
		return ErrShardClosed
	}
	return s.st.sync()
}

// readSeq reads a shard's persisted last sequence number.
func readSeq(db *pebble.DB, id routing.ShardID) (uint64, error) {
	v, c, err := db.Get(metaKey(metaSeq, id))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("storage: corrupt sequence number of shard %d: %x", id, v)
	}
	return binary.BigEndian.Uint64(v), nil
}

// ErrLockTimeout is returned by Exclusive when the apply lock could not be
// taken in time: writes in flight did not drain within the bound.
var ErrLockTimeout = errors.New("storage: apply lock not acquired in time")

// Exclusive runs fn holding the shard's apply lock, so no write is applied
// while fn runs and every write applied before it is visible. It waits at
// most wait for writes in flight to drain (polling), then gives up with
// ErrLockTimeout without running fn. The wait and the polling run on the
// engine's clock: on a manual clock each poll waits for the clock to move.
func (s *Shard) Exclusive(wait time.Duration, fn func() error) error {
	if err := s.Fence(wait); err != nil {
		return err
	}
	defer s.Unfence()
	return fn()
}

// ScanSpan calls fn for every document of the shard's store in a span of its
// keyspace, owned or not, in key order, from a consistent snapshot. A reader that
// resolved ownership at one table version scans exactly that version's span.
// As with Scan, fn must not keep doc.Source after it returns: it is the
// iterator's buffer.
func (s *Shard) ScanSpan(sp routing.Span, fn func(Doc) error) error {
	if s.closed.Load() || !s.st.beginScan() {
		return ErrShardClosed
	}
	defer s.st.endScan()
	s.load.reads.Add(1)
	snap := s.st.db.NewSnapshot()
	defer snap.Close()
	if err := s.st.readDurable(); err != nil {
		return fmt.Errorf("storage: shard %d: scan %s: %w", s.id, sp, err)
	}
	if err := scanSpan(snap, s.keyspace, sp, s.stopOnClose(fn)); err != nil {
		return fmt.Errorf("storage: shard %d: scan %s: %w", s.id, sp, err)
	}
	return nil
}

// GetAny reads a document regardless of the spans the shard owns now. The
// node uses it for reads it has already checked against a table version.
func (s *Shard) GetAny(keyspace routing.ShardID, key routing.Key, id string) (Doc, bool, error) {
	if s.closed.Load() || !s.st.enter() {
		return Doc{}, false, ErrShardClosed
	}
	defer s.st.exit()
	s.load.reads.Add(1)
	v, c, err := s.st.db.Get(DocKey(nil, keyspace, key, id))
	if errors.Is(err, pebble.ErrNotFound) {
		// An absence is read too: a delete not yet durable is undone by
		// a power loss.
		if err := s.st.readDurable(); err != nil {
			return Doc{}, false, fmt.Errorf("storage: shard %d: get %q: %w", s.id, id, err)
		}
		return Doc{}, false, nil
	}
	if err != nil {
		return Doc{}, false, fmt.Errorf("storage: shard %d: get %q: %w", s.id, id, err)
	}
	defer c.Close()
	if err := s.st.readDurable(); err != nil {
		return Doc{}, false, fmt.Errorf("storage: shard %d: get %q: %w", s.id, id, err)
	}
	seq, r, src, err := decodeDocValue(v)
	if err != nil {
		return Doc{}, false, fmt.Errorf("storage: shard %d: get %q: %w", s.id, id, err)
	}
	return Doc{Root: keyspace, Key: key, ID: id, Routing: r, Seq: seq, Source: slices.Clone(src)}, true, nil
}
