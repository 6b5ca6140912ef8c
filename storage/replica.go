package storage

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/batchrepr"

	"github.com/shardsplit/shardsplit/routing"
)

// A shard copy of a replicated index keeps two things beside its
// documents (package replication is their user):
//
//   - its history: every operation it applied, in the operation log, as a
//     split's log hold records them (HoldLog), until TrimLogTo drops what no
//     copy will need again. A primary records its writes there; a replica
//     its primary's operations (ApplyReplicated), so that once promoted it
//     can resync the others or serve a recovery.
//   - on a replica, an undo record per operation above the global
//     checkpoint: the value every key the operation changed had before, so
//     that a new primary can take back what it never had (Undo), as
//     OpenSearch resets a replica's engine to the global checkpoint.
//
// Undo records live under their own tag (tagUndo | shard u32 | seq u64).
const tagUndo byte = 0x22

func undoKey(shard routing.ShardID, seq uint64) []byte {
	b := binary.BigEndian.AppendUint32([]byte{tagUndo}, uint32(shard))
	return binary.BigEndian.AppendUint64(b, seq)
}

// undoRecord encodes, for every key entry sets or deletes, the value it
// has in r now: uvarint n | n × (uvarint len(key) | key | present byte |
// [uvarint len(value) | value]).
func undoRecord(r pebble.Reader, entry *pebble.Batch) ([]byte, error) {
	var keys [][]byte
	br := batchrepr.Read(entry.Repr())
	for {
		kind, ukey, _, ok, err := br.Next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		_ = kind
		keys = append(keys, append([]byte(nil), ukey...))
	}
	out := binary.AppendUvarint(nil, uint64(len(keys)))
	for _, k := range keys {
		out = binary.AppendUvarint(out, uint64(len(k)))
		out = append(out, k...)
		v, closer, err := r.Get(k)
		switch {
		case errors.Is(err, pebble.ErrNotFound):
			out = append(out, 0)
		case err != nil:
			return nil, err
		default:
			out = append(out, 1)
			out = binary.AppendUvarint(out, uint64(len(v)))
			out = append(out, v...)
			_ = closer.Close()
		}
	}
	return out, nil
}

// restoreUndo writes into b what an undo record says the keys held.
func restoreUndo(b *pebble.Batch, rec []byte) error {
	n, w := binary.Uvarint(rec)
	if w <= 0 {
		return errCorruptValue
	}
	rec = rec[w:]
	for range n {
		kl, w := binary.Uvarint(rec)
		if w <= 0 || uint64(len(rec)-w) < kl+1 {
			return errCorruptValue
		}
		k := rec[w : w+int(kl)]
		rec = rec[w+int(kl):]
		present := rec[0]
		rec = rec[1:]
		if present == 0 {
			_ = b.Delete(k, nil)
			continue
		}
		vl, w := binary.Uvarint(rec)
		if w <= 0 || uint64(len(rec)-w) < vl {
			return errCorruptValue
		}
		_ = b.Set(k, rec[w:w+int(vl)], nil)
		rec = rec[w+int(vl):]
	}
	return nil
}

// ApplyReplicated applies a primary's operations on a copy as ApplyLog
// does (their sequence numbers kept), records them in the copy's history,
// and, with undo, records what each changed; the batch is durable when it
// returns. The entries must follow the shard's sequence number without a
// gap.
func (s *Shard) ApplyReplicated(entries []LogEntry, undo bool) error {
	if len(entries) > 0 && entries[0].Seq != s.Seq()+1 {
		return fmt.Errorf("storage: shard %d: replicated operation %d does not follow %d", s.id, entries[0].Seq, s.Seq())
	}
	return s.applyLog(entries, true, undo)
}

// ApplyReplicatedNoWait is ApplyReplicated that returns once the entries
// are applied, before their fsync ends: wait returns once they are
// durable, and must be called, once. A node syncs several copies' batches
// at once this way, instead of one after another.
func (s *Shard) ApplyReplicatedNoWait(entries []LogEntry, undo bool) (wait func() error, err error) {
	if len(entries) > 0 && entries[0].Seq != s.Seq()+1 {
		return nil, fmt.Errorf("storage: shard %d: replicated operation %d does not follow %d", s.id, entries[0].Seq, s.Seq())
	}
	return s.applyLogNoWait(entries, true, undo)
}

// Undo takes back every operation above seq, newest first, with its undo
// record, and drops it from the history: the shard's sequence number
// becomes seq. It fails, changing nothing, if an undo record is missing.
func (s *Shard) Undo(seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() || !s.st.enter() {
		return ErrShardClosed
	}
	defer s.st.exit()
	cur := s.seq.Load()
	if seq >= cur {
		return nil
	}
	b := s.st.db.NewBatch()
	defer b.Close()
	for q := cur; q > seq; q-- {
		rec, closer, err := s.st.db.Get(undoKey(s.id, q))
		if err != nil {
			return fmt.Errorf("storage: shard %d: undo operation %d: %w", s.id, q, err)
		}
		err = restoreUndo(b, rec)
		_ = closer.Close()
		if err != nil {
			return fmt.Errorf("storage: shard %d: undo operation %d: %w", s.id, q, err)
		}
		_ = b.Delete(undoKey(s.id, q), nil)
		_ = b.Delete(logKey(nil, s.id, q), nil)
	}
	_ = b.Set(metaKey(metaSeq, s.id), binary.BigEndian.AppendUint64(nil, seq), nil)
	if err := s.st.applySynced(b); err != nil {
		return fmt.Errorf("storage: shard %d: undo to %d: %w", s.id, seq, err)
	}
	// The batch itself is not recorded: the history stands in for the
	// memtables again only once a flush holds it.
	s.st.hist.undone(seq)
	s.seq.Store(seq)
	return nil
}

// metaUndoFloor records the highest sequence number DropUndo was given:
// no operation at or below it will be taken back (replication's global
// checkpoint, kept with the copy as OpenSearch's translog checkpoint keeps
// it).
const metaUndoFloor byte = 'g'

// DropUndo deletes the undo records at or below seq and records seq as
// the shard's undo floor (UndoFloor): those operations will never be
// taken back. The record is durable with the shard's next synced write.
func (s *Shard) DropUndo(seq uint64) error {
	return s.deleteRange(undoKey(s.id, 0), undoKey(s.id, seq+1), func(b *pebble.Batch) {
		_ = b.Set(metaKey(metaUndoFloor, s.id), binary.BigEndian.AppendUint64(nil, seq), nil)
	})
}

// UndoFloor returns the last sequence number DropUndo recorded, and
// whether there is one.
func (s *Shard) UndoFloor() (uint64, bool, error) {
	if s.closed.Load() || !s.st.enter() {
		return 0, false, ErrShardClosed
	}
	defer s.st.exit()
	v, c, err := s.st.db.Get(metaKey(metaUndoFloor, s.id))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("storage: shard %d: read the undo floor: %w", s.id, err)
	}
	defer c.Close()
	if len(v) != 8 {
		return 0, false, fmt.Errorf("storage: shard %d: undo floor: %w", s.id, errCorruptValue)
	}
	return binary.BigEndian.Uint64(v), true, nil
}

// TrimLogTo deletes the history at or below seq.
func (s *Shard) TrimLogTo(seq uint64) error {
	return s.deleteRange(logKey(nil, s.id, 0), logKey(nil, s.id, seq+1), nil)
}

// deleteRange deletes [lo, hi) of the shard's undo records or operation
// log, with what also (if not nil) adds to the batch: keys no split's
// child copies, so the retained history (history.go) notes the batch
// without operations.
func (s *Shard) deleteRange(lo, hi []byte, also func(*pebble.Batch)) error {
	if s.closed.Load() || !s.st.enter() {
		return ErrShardClosed
	}
	defer s.st.exit()
	b := s.st.db.NewBatch()
	defer b.Close()
	_ = b.DeleteRange(lo, hi, nil)
	if also != nil {
		also(b)
	}
	if err := s.st.db.Apply(b, pebble.NoSync); err != nil {
		return fmt.Errorf("storage: shard %d: delete range: %w", s.id, err)
	}
	s.st.hist.record(b, nil)
	return nil
}

// Checkpoint writes a consistent copy of the shard's store into dir (hard
// links to its tables, its unflushed WAL copied) and returns the sequence
// number it holds: a peer recovery's files. It holds the apply lock, so no
// write lands between the copy and the number.
func (s *Shard) Checkpoint(dir string) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() || !s.st.enter() {
		return 0, ErrShardClosed
	}
	defer s.st.exit()
	if err := s.st.db.Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		return 0, fmt.Errorf("storage: shard %d: checkpoint to %s: %w", s.id, dir, err)
	}
	return s.seq.Load(), nil
}
