package storage

// The RFC's child build. OpenSearch's in-place split design
// (opensearch-project/OpenSearch#12918, #13923) makes each child a
// hard-linked copy of the parent's whole last commit and removes the
// documents the child does not own with a delete-by-query
// (ShardSplittingQuery); the space comes back only as merges rewrite the
// segments. ChildKeepAll builds a child the same way on Pebble: a
// checkpoint of every document of the parent, nothing excised, and after
// the handoff a background job that removes the foreign documents while the
// child serves writes (by the model below), then compacts the foreign key
// ranges so the space is reclaimed.
// ChildExcise (the default) excises the foreign spans at creation instead,
// in O(metadata).
//
// Reads never see a foreign document, whichever the build: a child serves
// gets and scans only inside the spans a table gives it (Shard.Get checks
// the owned spans, Node.Get the table's owner, Node.Search scans the
// table's span of each shard), and foreign documents lie outside them by
// construction of the key encoding.
//
// How the foreign documents go is ForeignCleanupOptions.Model: one by one
// with point tombstones in paced batches (ForeignPerDoc, the zero value,
// so an engine's default; the findings harness's strategy questions run
// it), or as Lucene removes them (ForeignMark: a scan that routes every
// document and marks the foreign ones deleted without rewriting any, then
// the compaction that reclaims their space, MarkForeign and
// ReclaimForeign's two halves; splitdemo compare's default, --cleanup
// mark), or by key range without reading them (ForeignRange).
//
// Crash safety. A keep-all child's store carries a durable marker (meta
// key 'f') from its creation until its cleanup has deleted every foreign
// document and the deletes are durable: the marker goes in a synced batch
// after the deletes' batches, so a store without it holds no foreign
// document. A cleanup interrupted by a crash or a close is redone from the
// start when the shard is served again (node.Open starts it for every
// active shard with the marker): deleting is idempotent, and the scan
// skips what earlier runs deleted. recovery.Check allows keys outside a
// shard's span only while the marker is there (INV-10).

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/routing"
)

// ChildBuild says how a split child's store is made from the parent's
// checkpoint (per-shard layout; in the shared layout a child is only a
// span of the node's store and there is nothing to build).
type ChildBuild uint8

const (
	// ChildExcise checkpoints only the child's span and excises everything
	// else at creation: no foreign document is ever in the child's store.
	// The zero value.
	ChildExcise ChildBuild = iota
	// ChildKeepAll checkpoints every document of the parent and keeps
	// them; the foreign ones are removed after the handoff
	// (StartForeignCleanup, by ForeignCleanupOptions.Model): the
	// OpenSearch RFC's data path.
	ChildKeepAll
)

func (b ChildBuild) String() string {
	switch b {
	case ChildExcise:
		return "excise"
	case ChildKeepAll:
		return "keep-all"
	}
	return fmt.Sprintf("ChildBuild(%d)", uint8(b))
}

// ParseChildBuild parses "excise" or "keep-all".
func ParseChildBuild(s string) (ChildBuild, error) {
	switch s {
	case "excise":
		return ChildExcise, nil
	case "keep-all":
		return ChildKeepAll, nil
	}
	return 0, fmt.Errorf("storage: unknown child build %q (want excise or keep-all)", s)
}

// metaForeign marks a store whose foreign documents are not all deleted
// yet; its value is the span the shard owned when it was made.
const metaForeign byte = 'f'

func encodeForeignMarker(keyspace routing.ShardID, sp routing.Span) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(keyspace))
	b = binary.BigEndian.AppendUint64(b, sp.Start)
	return binary.BigEndian.AppendUint64(b, sp.End)
}

func decodeForeignMarker(v []byte) (routing.ShardID, routing.Span, error) {
	if len(v) != 20 {
		return 0, routing.Span{}, fmt.Errorf("storage: corrupt foreign-cleanup marker %x", v)
	}
	return routing.ShardID(binary.BigEndian.Uint32(v)),
		routing.Span{Start: binary.BigEndian.Uint64(v[4:]), End: binary.BigEndian.Uint64(v[12:])}, nil
}

// keepChildStore prepares a fresh whole-parent checkpoint as the child's
// store: the parent's operation log is excised (it is not the child's),
// every document is kept, the foreign-cleanup marker is written, and the
// parent's sequence number becomes the child's. It returns S.
func keepChildStore(st *store, parent, child, keyspace routing.ShardID, span routing.Span) (uint64, error) {
	seq, err := readSeq(st.db, parent)
	if err != nil {
		return 0, err
	}
	if err := st.excise([]byte{tagLog}, []byte{tagEnd}); err != nil {
		return 0, err
	}
	b := st.db.NewBatch()
	defer b.Close()
	_ = b.Set(metaKey(metaForeign, child), encodeForeignMarker(keyspace, span), nil)
	if err := st.applySynced(b); err != nil {
		return 0, fmt.Errorf("storage: shard %d: write foreign-cleanup marker: %w", child, err)
	}
	return seq, adoptSeq(st, parent, child, seq)
}

// foreignMarker reads a shard's marker: ok is false when the shard has no
// foreign documents left to delete (or never had any).
func (s *Shard) foreignMarker() (keyspace routing.ShardID, sp routing.Span, ok bool, err error) {
	if !s.st.enter() {
		return 0, sp, false, ErrShardClosed
	}
	defer s.st.exit()
	v, c, err := s.st.db.Get(metaKey(metaForeign, s.id))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, sp, false, nil
	}
	if err != nil {
		return 0, sp, false, fmt.Errorf("storage: shard %d: read foreign-cleanup marker: %w", s.id, err)
	}
	defer c.Close()
	keyspace, sp, err = decodeForeignMarker(v)
	return keyspace, sp, err == nil, err
}

// ForeignPending reports whether the shard's store may still hold foreign
// documents: it was built with ChildKeepAll and its cleanup has not
// finished durably.
func (s *Shard) ForeignPending() (bool, error) {
	_, _, ok, err := s.foreignMarker()
	return ok, err
}

// ForeignDocs counts the documents in the shard's store outside the spans
// it owns (tests and checks: zero for an excised child, and for a
// keep-all child once its cleanup has ended).
func (s *Shard) ForeignDocs() (int, error) {
	if s.closed.Load() || !s.st.enter() {
		return 0, ErrShardClosed
	}
	defer s.st.exit()
	n := 0
	for _, r := range foreignRanges(s.keyspace, s.Owned()) {
		it, err := s.st.db.NewIter(&pebble.IterOptions{LowerBound: r[0], UpperBound: r[1]})
		if err != nil {
			return 0, err
		}
		for it.First(); it.Valid(); it.Next() {
			n++
		}
		if err := it.Close(); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// foreignRanges returns the document key ranges outside spans (sorted,
// non-overlapping spans of keyspace, as a shard keeps them: sortedSpans).
func foreignRanges(keyspace routing.ShardID, spans []routing.Span) [][2][]byte {
	var out [][2][]byte
	next := allDocs[0]
	for _, sp := range spans {
		lo, hi := SpanBounds(keyspace, sp)
		if bytes.Compare(next, lo) < 0 {
			out = append(out, [2][]byte{next, lo})
		}
		next = hi
	}
	if bytes.Compare(next, allDocs[1]) < 0 {
		out = append(out, [2][]byte{next, allDocs[1]})
	}
	return out
}

// ForeignModel is how a keep-all child's cleanup removes its foreign
// documents.
type ForeignModel uint8

const (
	// ForeignPerDoc deletes each foreign document with a point delete, in
	// paced batches, then compacts the foreign ranges. The zero value.
	ForeignPerDoc ForeignModel = iota
	// ForeignMark scans every document, routes it (Keep) and marks the
	// foreign ones deleted with a range tombstone per foreign range, as
	// Lucene marks them in live-docs bitsets (MarkForeign), then compacts
	// the foreign ranges, as Lucene's merges reclaim them (ReclaimForeign).
	ForeignMark
	// ForeignRange writes the range tombstones without reading the
	// documents (what key-ordered storage allows), then compacts.
	ForeignRange
)

func (m ForeignModel) String() string {
	switch m {
	case ForeignPerDoc:
		return "per-doc"
	case ForeignMark:
		return "mark"
	case ForeignRange:
		return "range"
	}
	return fmt.Sprintf("ForeignModel(%d)", uint8(m))
}

// ForeignCleanupOptions paces the deletion of a keep-all child's foreign
// documents, a background job like OpenSearch's delete-by-query.
type ForeignCleanupOptions struct {
	// Model is how the documents go (default ForeignPerDoc). A cleanup
	// redone when a store is opened again uses the engine's options.
	Model ForeignModel
	// Keep routes a document for ForeignMark: whether shard keeps it (the
	// split's table; OpenSearch's ShardSplittingQuery hashes the _id or
	// routing value of every document). nil: the document's key decides.
	// It runs inside the store's gate and must not use the shard.
	Keep func(shard routing.ShardID, d Doc) bool
	// Batch is the number of point deletes per batch (default 1000, as
	// the new-index split's per-document cleanup).
	Batch int
	// Pause is the wait between batches (default 5 ms: at most 200,000
	// deletes a second, and the writers' commits interleave with them).
	Pause time.Duration
}

func (o ForeignCleanupOptions) withDefaults() ForeignCleanupOptions {
	if o.Batch <= 0 {
		o.Batch = 1000
	}
	if o.Pause == 0 {
		o.Pause = 5 * time.Millisecond
	}
	return o
}

// ForeignCleanup is what one shard's cleanup of foreign documents did.
type ForeignCleanup struct {
	Shard   routing.ShardID
	Model   ForeignModel
	Started time.Time // on the engine's clock
	Deleted int       // point deletes written
	// DeletedIDs are the `_id` entries deleted: the index is ordered by
	// _id, so the child scans all of it (idindex.go).
	DeletedIDs int
	Batches    int
	// Marked is what the mark pass marked deleted (ForeignMark), Kept and
	// KeptBytes what it found the shard keeps: the documents a Lucene
	// merge would rewrite (MarkForeign).
	Marked, Kept int
	KeptBytes    int64
	// Deletes is the time the delete (or mark) pass took, Compact the
	// compaction of the foreign ranges after it, and CompactWritten what
	// the store wrote while it ran.
	Deletes, Compact time.Duration
	CompactWritten   uint64
	// Written is what the shard's store wrote (flushes and compactions)
	// while the cleanup ran: the cleanup's own tombstones and compactions,
	// and the flushes and compactions of the writes it served meanwhile.
	Written uint64
	Ended   time.Time
	Done    bool  // every foreign document deleted, durably, marker removed
	Err     error // why it stopped early (context.Canceled when closed or retired)
}

// maxEndedCleanups bounds the ended cleanups an engine remembers.
const maxEndedCleanups = 1024

// foreignCleaners tracks an engine's running cleanups.
type foreignCleaners struct {
	mu      sync.Mutex
	running map[routing.ShardID]*foreignCleaner
	ended   []ForeignCleanup
	closed  bool
}

type foreignCleaner struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// StartForeignCleanup starts deleting, in the background, the foreign
// documents of a shard built with ChildKeepAll, if its store still has
// them (its marker). It reports whether a cleanup runs for the shard now
// (one already running counts). The splitter calls it for each child once
// the split's table is durable, node.Open for every shard it opens, so an
// interrupted cleanup is redone. DestroyShard and Close stop it.
func (e *Engine) StartForeignCleanup(s *Shard) (bool, error) {
	if e.opts.Layout == LayoutShared {
		return false, nil
	}
	keyspace, sp, ok, err := s.foreignMarker()
	if err != nil || !ok {
		return false, err
	}
	f := &e.foreign
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false, ErrShardClosed
	}
	if _, ok := f.running[s.id]; ok {
		return true, nil
	}
	if f.running == nil {
		f.running = map[routing.ShardID]*foreignCleaner{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &foreignCleaner{cancel: cancel, done: make(chan struct{})}
	f.running[s.id] = c
	go func() {
		defer close(c.done)
		r := e.cleanForeign(ctx, s, keyspace, sp)
		f.mu.Lock()
		delete(f.running, s.id)
		if len(f.ended) == maxEndedCleanups {
			f.ended = f.ended[1:]
		}
		f.ended = append(f.ended, r)
		f.mu.Unlock()
	}()
	return true, nil
}

// stopForeignCleanup stops shard id's cleanup, if one runs, and waits for
// it: the store may then be closed.
func (e *Engine) stopForeignCleanup(id routing.ShardID) {
	f := &e.foreign
	f.mu.Lock()
	c, ok := f.running[id]
	f.mu.Unlock()
	if ok {
		c.cancel()
		<-c.done
	}
}

// stopForeignCleanups stops every cleanup and refuses new ones (Close).
func (e *Engine) stopForeignCleanups() {
	f := &e.foreign
	f.mu.Lock()
	f.closed = true
	var cs []*foreignCleaner
	for _, c := range f.running {
		cs = append(cs, c)
	}
	f.mu.Unlock()
	for _, c := range cs {
		c.cancel()
		<-c.done
	}
}

// ForeignCleanups returns the cleanups that ended (the last
// maxEndedCleanups), in the order they ended, and the shards whose
// cleanup still runs.
func (e *Engine) ForeignCleanups() (ended []ForeignCleanup, running []routing.ShardID) {
	f := &e.foreign
	f.mu.Lock()
	defer f.mu.Unlock()
	ended = append(ended, f.ended...)
	for id := range f.running {
		running = append(running, id)
	}
	return ended, running
}

// WaitForeignCleanups waits until no cleanup runs, or ctx is done.
func (e *Engine) WaitForeignCleanups(ctx context.Context) error {
	for {
		f := &e.foreign
		f.mu.Lock()
		var c *foreignCleaner
		for _, r := range f.running {
			c = r
			break
		}
		f.mu.Unlock()
		if c == nil {
			return nil
		}
		select {
		case <-c.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// cleanForeign deletes every document of s's store outside span (the
// span the shard owned when it was made; it may own less later, if it is
// split again, but no reader ever resolves a key outside span to it),
// batch by batch, then compacts those ranges and removes the marker.
func (e *Engine) cleanForeign(ctx context.Context, s *Shard, keyspace routing.ShardID, span routing.Span) ForeignCleanup {
	o := e.opts.ForeignCleanup.withDefaults()
	clk := e.opts.Clock
	r := ForeignCleanup{Shard: s.id, Model: o.Model, Started: clk.Now()}
	before := s.st.bytesWritten()
	log := e.logger.With(zap.Uint32("shard", uint32(s.id)))
	finish := func(err error) ForeignCleanup {
		r.Ended, r.Err, r.Done = clk.Now(), err, err == nil
		if s.st.enter() {
			r.Written = s.st.bytesWritten() - before
			s.st.exit()
		}
		log.Debug("foreign cleanup ended", zap.Stringer("model", r.Model), zap.Bool("done", r.Done), zap.Int("deleted", r.Deleted), zap.Int("marked", r.Marked),
			zap.Duration("deletes", r.Deletes), zap.Duration("compact", r.Compact), zap.Uint64("written", r.Written), zap.Error(err))
		return r
	}
	ranges := foreignRanges(keyspace, []routing.Span{span})
	deletes := ranges // one by one: the per-document model; the others mark
	if o.Model != ForeignPerDoc {
		deletes = nil
		var err error
		if o.Model == ForeignMark {
			var keep func(Doc) bool
			if o.Keep != nil {
				keep = func(d Doc) bool { return o.Keep(s.id, d) }
			}
			var m CleanupStats
			m, err = markForeign(ctx, s, keyspace, []routing.Span{span}, keep)
			r.Marked, r.Kept, r.KeptBytes = m.Deleted, m.Kept, m.KeptBytes
		} else {
			err = markRanges(s, ranges)
		}
		if err != nil {
			return finish(err)
		}
	}
	for _, rg := range deletes {
		from := rg[0]
		for from != nil {
			if err := ctx.Err(); err != nil {
				return finish(err)
			}
			n, next, err := deleteBatch(s, from, rg[1], o.Batch)
			r.Deleted += n
			r.Batches++
			if err != nil {
				return finish(err)
			}
			from = next
			if from != nil && o.Pause > 0 {
				select {
				case <-ctx.Done():
				case <-clk.After(o.Pause):
				}
			}
		}
	}
	pause := func() {
		if o.Pause > 0 {
			select {
			case <-ctx.Done():
			case <-clk.After(o.Pause):
			}
		}
	}
	n, idErr := dropForeignIDEntries(ctx, s, keyspace, []routing.Span{span}, o.Batch, pause)
	r.DeletedIDs = n
	if idErr != nil {
		return finish(idErr)
	}
	r.Deletes = clk.Since(r.Started)
	compactStart := clk.Now()
	if n > 0 {
		ranges = append(ranges, allIDs)
	}
	compactBefore := s.st.bytesWritten()
	for _, rg := range ranges {
		if err := compactRange(ctx, s, rg[0], rg[1], false); err != nil {
			return finish(err)
		}
	}
	r.Compact, r.CompactWritten = clk.Since(compactStart), s.st.bytesWritten()-compactBefore
	// The marker goes after every delete: its synced batch makes the
	// deletes before it in the WAL durable too.
	if !s.st.enter() {
		return finish(ErrShardClosed)
	}
	b := s.st.db.NewBatch()
	_ = b.Delete(metaKey(metaForeign, s.id), nil)
	err := s.st.applySynced(b)
	_ = b.Close()
	s.st.exit()
	if err != nil {
		return finish(fmt.Errorf("storage: shard %d: remove foreign-cleanup marker: %w", s.id, err))
	}
	return finish(nil)
}

// markRanges marks every document of ranges deleted with one range
// tombstone each, in one synced batch, reading none.
func markRanges(s *Shard, ranges [][2][]byte) error {
	if s.closed.Load() || !s.st.enter() {
		return ErrShardClosed
	}
	defer s.st.exit()
	b := s.st.db.NewBatch()
	defer b.Close()
	for _, r := range ranges {
		_ = b.DeleteRange(r[0], r[1], nil)
	}
	if err := s.st.applySynced(b); err != nil {
		return fmt.Errorf("storage: shard %d: mark foreign ranges deleted: %w", s.id, err)
	}
	return nil
}

// deleteBatch deletes up to limit documents of [from, to) one by one and
// returns how many, and where the next batch starts (nil: the range is
// done). It holds the store open only for the batch.
func deleteBatch(s *Shard, from, to []byte, limit int) (int, []byte, error) {
	if s.closed.Load() || !s.st.enter() {
		return 0, nil, ErrShardClosed
	}
	defer s.st.exit()
	b := s.st.db.NewBatch()
	defer b.Close()
	_, n, next, err := deleteWhere(s.st.db, b, from, to, limit, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("storage: shard %d: scan foreign documents: %w", s.id, err)
	}
	if n > 0 {
		if err := s.st.db.Apply(b, pebble.NoSync); err != nil {
			return 0, nil, fmt.Errorf("storage: shard %d: delete %d foreign documents: %w", s.id, n, err)
		}
	}
	return n, next, nil
}

// deleteWhere adds to b a point delete of each document in [from, to)
// that keep (nil: none) does not keep, at most limit of them, and returns
// how many documents it scanned and deleted and the first key it did not
// look at (nil if none). It is the per-document deleter of both cleanups:
// the new-index split's (DeleteForeign) and a keep-all child's.
func deleteWhere(r reader, b *pebble.Batch, from, to []byte, limit int, keep func(Doc) bool) (scanned, deleted int, next []byte, err error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: from, UpperBound: to})
	if err != nil {
		return 0, 0, nil, err
	}
	for it.First(); it.Valid(); it.Next() {
		if deleted == limit {
			next = bytes.Clone(it.Key())
			break
		}
		scanned++
		if keep != nil {
			d, err := decodeDoc(it.Key(), it.Value())
			if err != nil {
				_ = it.Close()
				return scanned, deleted, nil, err
			}
			if keep(d) {
				continue
			}
			if d.Routing != "" {
				_ = b.Delete(idKey(nil, d.Root, d.ID, d.Key), nil)
			}
		}
		_ = b.Delete(bytes.Clone(it.Key()), nil)
		deleted++
	}
	return scanned, deleted, next, it.Close()
}

// compactRange compacts [lo, hi) of s's store, so the deleted documents'
// space is reclaimed.
func compactRange(ctx context.Context, s *Shard, lo, hi []byte, parallelize bool) error {
	if s.closed.Load() || !s.st.enter() {
		return ErrShardClosed
	}
	defer s.st.exit()
	if err := s.st.compact(ctx, lo, hi, parallelize); err != nil {
		return fmt.Errorf("storage: shard %d: compact foreign range: %w", s.id, err)
	}
	return nil
}
