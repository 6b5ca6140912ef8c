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
// source's files and a later cleanup (DeleteForeign, MarkForeign or
// TrimToOwned) removes what it does not own. The target adopts the source's sequence number.
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
	Deleted int // deleted one by one (DeleteForeign) or marked (MarkForeign)
	Took    time.Duration
	Written uint64 // bytes the store wrote doing it
	// Kept and KeptBytes are the documents MarkForeign found the shard
	// keeps and their key and value bytes: what Lucene's merges rewrite
	// to reclaim the marked documents' space (ReclaimForeign).
	Kept      int
	KeptBytes int64
}

// DeleteForeign scans every document in the store, deletes each one keep
// rejects with a point delete, and its `_id` entry if it has one, and then
// compacts the whole document range. Each delete is a write (log,
// memtable, flush, compaction), where Lucene sets a bit: MarkForeign is
// Lucene's cost. keep runs inside the store's gate (store.enter): it must
// not use the shard.
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

// MarkForeign is the first half of Lucene's cleanup of a split target, the
// one OpenSearch runs before the target starts: IndexWriter.deleteDocuments
// of a ShardSplittingQuery, which routes every document by its _id or
// routing value against the target's metadata, sets the bit of each foreign
// one in its segment's live-docs bitset and commits (StoreRecovery
// .addIndices; Lucene's FrozenBufferedUpdates.applyQueryDeletes). Here: a
// scan of every document of the store, keep routing each (it runs inside
// the store's gate and must not use the shard), and the foreign ones marked
// deleted without rewriting any, with one range tombstone over each key
// range outside the owned spans, in one synced batch. A document whose
// routing and key disagree (kept but outside the owned spans, or the
// reverse) is an error: the marks would not be the routing's. The marked
// documents stay on disk until ReclaimForeign, as Lucene's stay in their
// segments until a merge.
func (s *Shard) MarkForeign(keep func(Doc) bool) (CleanupStats, error) {
	start, before := s.clock.Now(), s.st.bytesWritten()
	stats, err := markForeign(context.Background(), s, s.keyspace, s.Owned(), keep)
	if err == nil {
		// The `_id` index is ordered by _id, not by the spans: its foreign
		// entries go one by one (idindex.go).
		_, err = dropForeignIDEntries(context.Background(), s, s.keyspace, s.Owned(), 1024, func() {})
	}
	stats.Took, stats.Written = s.clock.Since(start), s.st.bytesWritten()-before
	return stats, err
}

// markForeign scans every document of s's store (until ctx is done), with
// keep (nil: the key decides) telling which of them the shard keeps, checks
// keep against the spans of keyspace, and then marks every document outside those spans
// deleted with a range tombstone per foreign range, in one synced batch.
func markForeign(ctx context.Context, s *Shard, keyspace routing.ShardID, spans []routing.Span, keep func(Doc) bool) (CleanupStats, error) {
	var stats CleanupStats
	if s.closed.Load() || !s.st.beginScan() {
		return stats, fmt.Errorf("storage: shard %d: mark foreign documents: %w", s.id, ErrShardClosed)
	}
	err := scanDocs(s.st.db, allDocs[0], allDocs[1], s.stopOnClose(func(d Doc) error {
		if stats.Scanned++; stats.Scanned%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		owned := d.Root == keyspace && inSpans(spans, d.Key)
		kept := owned
		if keep != nil {
			kept = keep(d)
		}
		if kept != owned {
			return fmt.Errorf("document %q (routing %q): the routing keeps it in the shard: %v, its key (routing key %d of keyspace %d) is in the shard's spans %v: %v",
				d.ID, d.Routing, kept, d.Key, d.Root, spans, owned)
		}
		if kept {
			stats.Kept++
			stats.KeptBytes += int64(docPrefixLen + len(d.ID) + len(d.Routing) + len(d.Source))
		} else {
			stats.Deleted++
		}
		return nil
	}))
	s.st.endScan()
	if err != nil {
		return stats, fmt.Errorf("storage: shard %d: mark foreign documents: %w", s.id, err)
	}
	if err := markRanges(s, foreignRanges(keyspace, spans)); err != nil {
		return stats, fmt.Errorf("storage: shard %d: mark %d foreign documents deleted: %w", s.id, stats.Deleted, err)
	}
	return stats, nil
}

// ReclaimForeign is the second half of Lucene's cleanup after MarkForeign:
// the merges that reclaim the marked documents' space, here a compaction of
// each foreign key range. It rewrites every table that overlaps a marked
// range: a bottom-level table inside one is dropped whole, one across its
// edge or holding recent writes of every range is rewritten. A Lucene
// segment holds every shard's documents in the order they were indexed, so
// its merge rewrites every live document of it: CleanupStats.KeptBytes of
// MarkForeign is what Lucene would rewrite.
func (s *Shard) ReclaimForeign() (CleanupStats, error) {
	var stats CleanupStats
	start, before := s.clock.Now(), s.st.bytesWritten()
	for _, r := range foreignRanges(s.keyspace, s.Owned()) {
		if err := compactRange(context.Background(), s, r[0], r[1], true); err != nil {
			return stats, fmt.Errorf("storage: shard %d: reclaim marked documents: %w", s.id, err)
		}
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
