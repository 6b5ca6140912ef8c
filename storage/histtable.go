package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/internal/invariants"
)

// historyTableDir is where a child's history table is written, inside the
// child's store directory, before its ingest links it into the store.
const historyTableDir = "history-ingest"

// HistoryTableStats measures the table a child made of its parent's
// retained history (Engine.CreateChildren).
type HistoryTableStats struct {
	Keys    int   // keys in the table: documents, `_id` entries and tombstones of both
	Bytes   int64 // the table's size
	Overlap int   // tables Pebble found overlapping the child's memtable (each forces a flush of it)
}

// ingestHistory gives child the operations of parent's retained history
// in (after, upTo] that fall in its span, and returns how many. The
// caller pinned the history.
//
// The operations are written once, as one table that Pebble ingests,
// instead of through the child's WAL and memtables and their flushes,
// which wrote them twice inside the split's window (a memtable of 13-16
// MB at 1 and 4 GiB). The table holds what ApplyLog would have written
// (ingestLogLocked).
func (e *Engine) ingestHistory(parent, child *Shard, after, upTo uint64) (int, HistoryTableStats, error) {
	entries, err := parent.st.hist.since(after, upTo, child.Owned())
	if err != nil {
		return 0, HistoryTableStats{}, err
	}
	if len(entries) == 0 {
		return 0, HistoryTableStats{}, nil
	}
	opts := e.so.pebbleOptions(nil, nil)
	stats, err := child.ingestLog(entries, opts.MakeWriterOptions(0, child.st.db.TableFormat()))
	return len(entries), stats, err
}

// ingestLog is ApplyLog for a store that nothing else writes to yet (a
// child being made): the documents and `_id` entries the entries leave
// (their last state per key, deletes as tombstones) are written to one
// table, synced, and ingested; the shard's sequence number then follows
// in a batch of its own, as ApplyLog's, and the entries are recorded in
// the store's history as ApplyLog's batch would record them.
//
// The table is paced like a flush output while the store is paced
// (cancelFS.pace): it stands in for the replay's flushes. Its keys are
// documents and `_id` entries only: the child's memtable holds its
// adopted sequence number (metadata keys, below every document key), so
// the ingest overlaps nothing in it and needs no flush of it.
//
// NB: the table lies in the store's directory until the ingest has linked
// it and is removed after; a crash in between leaves it in the directory
// of a child that was never published, which recovery removes whole
// (removeOrphans, a split's rollback), and Pebble ignores it if the store
// is opened.
func (s *Shard) ingestLog(entries []LogEntry, wopts sstable.WriterOptions) (HistoryTableStats, error) {
	var stats HistoryTableStats
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() || !s.st.enter() { // see ApplyLog
		return stats, ErrShardClosed
	}
	defer s.st.exit()
	b := s.st.db.NewBatch()
	defer b.Close()
	var dk, val, ik []byte
	last := s.seq.Load()
	for i, e := range entries {
		// As ApplyLog: entries in their log's order.
		if i > 0 && e.Seq <= entries[i-1].Seq {
			return stats, invariants.AssertionFailedf("storage: shard %d: log entry %d has sequence number %d after %d", s.id, i, e.Seq, entries[i-1].Seq)
		}
		last = max(last, e.Seq)
		if e.Op.Kind == OpNoop {
			continue
		}
		var err error
		if dk, val, ik, err = s.entryWritesLocked(b, e, dk, val, ik); err != nil {
			return stats, err
		}
	}
	writes, err := lastWrites(b)
	if err != nil {
		return stats, fmt.Errorf("storage: shard %d: read back the writes of %d log entries: %w", s.id, len(entries), err)
	}
	if len(writes) > 0 {
		if stats, err = s.st.ingestWrites(writes, wopts); err != nil {
			return stats, fmt.Errorf("storage: shard %d: ingest %d log entries: %w", s.id, len(entries), err)
		}
	}
	mb := s.st.db.NewBatch()
	defer mb.Close()
	_ = mb.Set(metaKey(metaSeq, s.id), binary.BigEndian.AppendUint64(nil, last), nil)
	if err := s.st.db.Apply(mb, pebble.NoSync); err != nil {
		return stats, fmt.Errorf("storage: shard %d: apply %d log entries: %w", s.id, len(entries), err)
	}
	s.st.hist.record(mb, entries)
	s.seq.Store(last)
	return stats, nil
}

// keyWrite is the last write of a key in a batch: a set of value, or a
// delete.
type keyWrite struct {
	key, value []byte
	del        bool
}

// lastWrites returns the last write of each key b holds, in key order. b
// holds sets and deletes only.
func lastWrites(b *pebble.Batch) ([]keyWrite, error) {
	at := map[string]int{}
	var writes []keyWrite
	r := b.Reader()
	for {
		kind, k, v, ok, err := r.Next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		var w keyWrite
		switch kind {
		case pebble.InternalKeyKindSet:
			w = keyWrite{key: k, value: v}
		case pebble.InternalKeyKindDelete:
			w = keyWrite{key: k, del: true}
		default:
			return nil, invariants.AssertionFailedf("storage: a log entry wrote a %s of %x", kind, k)
		}
		if i, seen := at[string(k)]; seen {
			writes[i] = w
			continue
		}
		at[string(k)] = len(writes)
		writes = append(writes, w)
	}
	slices.SortFunc(writes, func(a, b keyWrite) int { return bytes.Compare(a.key, b.key) })
	return writes, nil
}

// ingestWrites writes writes (in key order, one per key) to a table in the
// store's directory, syncs it, and ingests it. Pebble gives the table's
// keys a sequence number above everything in the store.
func (st *store) ingestWrites(writes []keyWrite, wopts sstable.WriterOptions) (HistoryTableStats, error) {
	stats := HistoryTableStats{Keys: len(writes)}
	tmp := st.cfs.PathJoin(st.dir, historyTableDir)
	if err := st.cfs.MkdirAll(tmp, 0o755); err != nil {
		return stats, fmt.Errorf("storage: create %s: %w", tmp, err)
	}
	path := st.cfs.PathJoin(tmp, "history.sst")
	// Created as a flush output: paced while the store is (cancelFS.Create).
	f, err := st.cfs.Create(path, flushWriteCategory)
	if err != nil {
		return stats, fmt.Errorf("storage: create %s: %w", path, err)
	}
	f = vfs.NewSyncingFile(f, vfs.SyncingFileOptions{BytesPerSync: mergeBytesPerSync})
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), wopts)
	for _, kw := range writes {
		if kw.del {
			err = w.Delete(kw.key)
		} else {
			err = w.Set(kw.key, kw.value)
		}
		if err != nil {
			_ = w.Close()
			return stats, fmt.Errorf("storage: build %s: %w", path, err)
		}
	}
	// Close writes the index and footer, fsyncs the file (the sync
	// Ingest requires of its caller) and closes it.
	if err := w.Close(); err != nil {
		return stats, fmt.Errorf("storage: build %s: %w", path, err)
	}
	m, err := w.Metadata()
	if err != nil {
		return stats, fmt.Errorf("storage: build %s: %w", path, err)
	}
	stats.Bytes = int64(m.Size)
	is, err := st.db.IngestWithStats(context.Background(), []string{path})
	stats.Overlap = is.MemtableOverlappingFiles
	if err != nil {
		return stats, fmt.Errorf("storage: ingest %s: %w", path, err)
	}
	if err := st.cfs.RemoveAll(tmp); err != nil {
		return stats, fmt.Errorf("storage: remove %s: %w", tmp, err)
	}
	return stats, syncDir(st.cfs, st.dir)
}
