package storage

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shardsplit/shardsplit/routing"
)

// The primitives of OpenSearch's new-index resize (_split, _shrink,
// _clone), on the same stores the in-place split uses.

// LinkShard makes shard id of engine dst from a hard-linked checkpoint of
// src's store restricted to spans, owning spans, and WITHOUT removing
// foreign keys: like OpenSearch's resize, the target starts from the
// source's files and a later cleanup (DeleteForeign or TrimToOwned) removes
// what it does not own. The target adopts the source's sequence number.
// Per-shard layout only.
func LinkShard(dst *Engine, src *Shard, id, keyspace routing.ShardID, spans []routing.Span) (*Shard, ChildStats, error) {
	var stats ChildStats
	if dst.opts.Layout != LayoutPerShard {
		return nil, stats, fmt.Errorf("storage: link shard %d: the %s layout has no per-shard stores", id, dst.opts.Layout)
	}
	dir := dst.ShardDir(id)
	var restrict []pebble.CheckpointSpan
	for _, sp := range spans {
		lo, hi := SpanBounds(keyspace, sp)
		restrict = append(restrict, pebble.CheckpointSpan{Start: lo, End: hi})
	}
	restrict = append(restrict, pebble.CheckpointSpan{Start: allIDs[0], End: allIDs[1]}, // ordered by _id: all of it (idindex.go)
		pebble.CheckpointSpan{Start: metaKey(metaSeq, src.id), End: metaKey(metaSeq, src.id+1)})
	if _, err := dst.opts.FS.Stat(dir); err == nil {
		return nil, stats, fmt.Errorf("storage: link shard %d: %s already exists", id, dir)
	}
	// From the checkpoint on, a failure removes the target's directory.
	fail := func(err error) (*Shard, ChildStats, error) {
		return nil, stats, dst.discardStore(id, dir, fmt.Errorf("storage: link shard %d: %w", id, err))
	}
	start := dst.opts.Clock.Now()
	// The source is write-blocked: flush it, so the target links tables
	// instead of copying and replaying the WAL (OpenSearch resizes from the
	// source's last commit, too).
	if err := src.st.flush(); err != nil {
		return nil, stats, fmt.Errorf("storage: link shard %d: flush source %d: %w", id, src.id, err)
	}
	// Inside the source's gate: a close or destroy of the source waits for
	// the checkpoint, which holds a version of its tables (and panics on a
	// closed DB).
	if !src.st.enter() {
		return nil, stats, fmt.Errorf("storage: link shard %d: checkpoint of shard %d: %w", id, src.id, ErrShardClosed)
	}
	err := src.st.db.Checkpoint(dir, pebble.WithFlushedWAL(), pebble.WithRestrictToSpans(restrict))
	src.st.exit()
	if err != nil {
		return fail(fmt.Errorf("checkpoint of shard %d: %w", src.id, err))
	}
	if err := syncDir(dst.opts.FS, dst.opts.Dir); err != nil {
		return fail(err)
	}
	stats.Checkpoint = dst.opts.Clock.Since(start)
	stats.Linked, stats.Copied = dst.linkedBytes(dir)
	start = dst.opts.Clock.Now()
	// The source's log dropped and its sequence number adopted before the
	// engine knows the store, so that the engine's close cannot close it
	// under them (openChildStore).
	opened := false
	st, err := dst.openChildStore(dir, siblings{}, func(st *store) error {
		stats.Open, opened = dst.opts.Clock.Since(start), true
		seq, err := readSeq(st.db, src.id)
		if err != nil {
			return err
		}
		if err := st.db.DeleteRange([]byte{tagLog}, []byte{tagEnd}, pebble.NoSync); err != nil {
			return fmt.Errorf("drop the source's log: %w", err)
		}
		stats.Seq = seq
		return adoptSeq(st, src.id, id, seq)
	})
	if !opened {
		stats.Open = dst.opts.Clock.Since(start)
	}
	if err != nil {
		return fail(err)
	}
	// openChildStore holds a new store's compactions (a child's, until its
	// handoff); a resize target serves as soon as it is built.
	st.sched.release()
	s, err := dst.OpenShard(id, keyspace, spans)
	if err != nil {
		return fail(err)
	}
	return s, stats, nil
}

// CleanupStats measures the removal of foreign documents.
type CleanupStats struct {
	Scanned int
	Deleted int
	Took    time.Duration
	Written uint64 // bytes the store wrote doing it
}

// DeleteForeign is the faithful cost of OpenSearch's split cleanup: it
// scans every document in the store, deletes each one keep rejects with a
// point delete (as Lucene marks deleted documents), and its `_id` entry if
// it has one, and then compacts the whole document range (as merges
// reclaim the deleted documents). keep runs inside the store's gate
// (store.enter): it must not use the shard.
func (s *Shard) DeleteForeign(keep func(Doc) bool) (CleanupStats, error) {
	var stats CleanupStats
	start, before := s.clock.Now(), s.st.bytesWritten()
	for from := allDocs[0]; from != nil; {
		// Inside the store's gate a batch at a time, as a keep-all
		// child's cleanup (deleteBatch): a closed Pebble panics.
		if s.closed.Load() || !s.st.enter() {
			return stats, fmt.Errorf("storage: shard %d: delete foreign documents: %w", s.id, ErrShardClosed)
		}
		b := s.st.db.NewBatch()
		scanned, deleted, next, err := deleteWhere(s.st.db, b, from, allDocs[1], 1000, keep)
		stats.Scanned, stats.Deleted = stats.Scanned+scanned, stats.Deleted+deleted
		if err == nil && deleted > 0 {
			err = s.st.db.Apply(b, pebble.NoSync)
		}
		_ = b.Close()
		s.st.exit()
		if err != nil {
			return stats, err
		}
		from = next
	}
	if err := s.st.sync(); err != nil {
		return stats, err
	}
	if err := compactRange(context.Background(), s, allDocs[0], allIDs[1], true); err != nil {
		return stats, fmt.Errorf("storage: shard %d: compact after deletes: %w", s.id, err)
	}
	stats.Took, stats.Written = s.clock.Since(start), s.st.bytesWritten()-before
	return stats, nil
}

// TrimToOwned removes every document outside the shard's owned spans in
// O(metadata) with Excise: what key-ordered storage allows instead of
// per-document deletes. The `_id` index is ordered by _id: its foreign
// entries are deleted one by one (counted in Deleted).
func (s *Shard) TrimToOwned() (CleanupStats, error) {
	var stats CleanupStats
	start, before := s.clock.Now(), s.st.bytesWritten()
	owned := s.Owned()
	for _, r := range foreignRanges(s.keyspace, owned) {
		if err := s.st.excise(r[0], r[1]); err != nil {
			return stats, err
		}
	}
	n, err := dropForeignIDEntries(context.Background(), s, s.keyspace, owned, 1000, nil)
	stats.Deleted += n
	if err != nil {
		return stats, err
	}
	stats.Took, stats.Written = s.clock.Since(start), s.st.bytesWritten()-before
	return stats, nil
}

// CopyFrom copies every document src owns into s, in batches (a shrink's
// second and later sources: Pebble cannot merge stores by linking files),
// under their keys as they are: a document of an _id that s holds under
// another key does not replace it (OpenSearch's shrink copies every
// document of every source too).
func (s *Shard) CopyFrom(src *Shard) (int, error) {
	var ops []Op
	n := 0
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		_, err := s.write(ops, nil, false) // every copy kept, as Lucene's addIndexes keeps them
		n += len(ops)
		ops = ops[:0]
		return err
	}
	err := src.Scan(func(d Doc) error {
		ops = append(ops, Op{Kind: OpIndex, Root: d.Root, Key: d.Key, ID: d.ID, Routing: d.Routing, Source: bytes.Clone(d.Source)})
		if len(ops) == 500 {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return n, fmt.Errorf("storage: copy shard %d into %d: %w", src.id, s.id, err)
	}
	return n, nil
}
