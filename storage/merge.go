package storage

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/routing"
)

// MergeStats measures the creation of a merge target.
type MergeStats struct {
	Largest routing.ShardID // the source whose checkpoint the target was made from
	Seqs    []uint64        // per source (in the order given): the sequence number the target reflects
	Linked  int64           // bytes hard-linked from the largest source
	Copied  int64           // bytes written: the checkpoint's non-linked files plus the tables built of the other sources
	Docs    int             // documents copied from the other sources
	Tables  int             // sstables built of the other sources and ingested
	Took    time.Duration
	// IDIndex is what the checkpoint of the largest source did to the
	// `_id` index it linked (its tables are not among Tables).
	IDIndex IDIndexStats
}

// CreateMergeTarget makes shard target, owning span (the union of the
// sources' spans, all in one keyspace), from the live sources, and returns
// it with, for each source, the sequence number S_i it reflects: every
// write of source i up to S_i is in the target, none after. Writes after
// S_i are replayed by CatchUp(sources[i], target, S_i).
//
// Per-shard layout: a hard-linked checkpoint of the largest source (by
// Pebble's estimated disk usage of its span: sstables, not memtables; the
// first source on a tie), excised to that source's span (as CreateChild
// does), then every other source's documents, read from a consistent
// snapshot that also gives its S_i, built into sstables and ingested
// (bytes written ≈ the copied side). Every source must hold its log
// (HoldLog) from before the call. Shared layout: nothing is copied; the
// target is a new span of the node's store and S_i is source i's current
// sequence number.
//
// The target's own sequence number is meaningless until the handoff raises
// it above every source's (RaiseSeq).
func (e *Engine) CreateMergeTarget(sources []*Shard, target routing.ShardID, span routing.Span) (*Shard, MergeStats, error) {
	var stats MergeStats
	start := e.opts.Clock.Now()
	if len(sources) < 2 {
		return nil, stats, fmt.Errorf("storage: create merge target %d: %d sources", target, len(sources))
	}
	keyspace := sources[0].keyspace
	var spans []routing.Span
	for _, s := range sources {
		if s.keyspace != keyspace {
			return nil, stats, fmt.Errorf("storage: create merge target %d: source %d is in keyspace %d, source %d in %d",
				target, sources[0].id, keyspace, s.id, s.keyspace)
		}
		spans = append(spans, s.Owned()...)
	}
	// The target takes its sources' documents by checkpoint and ingest,
	// past the span check of every write (INV-6): spans outside its own
	// would leave it documents it does not own, and overlapping ones two
	// versions of a document, one silently dropped.
	spans = sortedSpans(spans)
	for i, sp := range spans {
		if sp.Start < span.Start || sp.End > span.End || i > 0 && sp.Start < spans[i-1].End {
			return nil, stats, fmt.Errorf("storage: create merge target %d: its sources own %v, which are not disjoint spans inside its span %s", target, spans, span)
		}
	}
	if e.opts.Layout == LayoutShared {
		return e.createSharedMergeTarget(sources, target, span)
	}
	largest := 0
	var sizes []uint64
	for i, s := range sources {
		size, err := s.EstimateSize()
		if err != nil {
			return nil, stats, fmt.Errorf("storage: create merge target %d: size of source %d: %w", target, s.id, err)
		}
		sizes = append(sizes, size)
		if size > sizes[largest] {
			largest = i
		}
	}
	big := sources[largest]
	owned := big.Owned()
	if len(owned) != 1 {
		return nil, stats, fmt.Errorf("storage: create merge target %d: source %d owns %d spans, want 1", target, big.id, len(owned))
	}
	stats.Largest = big.id
	// The largest source's own checkpoint, excised to its span: a child of
	// it that owns its whole span.
	t, cs, err := e.CreateChild(big, target, owned[0])
	if err != nil {
		return nil, stats, fmt.Errorf("storage: create merge target %d: %w", target, err)
	}
	stats.Linked, stats.Copied, stats.IDIndex = cs.Linked, cs.Copied+cs.IDIndex.Written, cs.IDIndex
	stats.Seqs = make([]uint64, len(sources))
	stats.Seqs[largest] = cs.Seq
	dir := e.ShardDir(target)
	docs, n, tables, err := e.ingestSources(sources, largest, t, dir, stats.Seqs)
	if err != nil {
		return nil, stats, e.discardStore(target, dir, fmt.Errorf("storage: create merge target %d: %w", target, err))
	}
	stats.Docs, stats.Copied, stats.Tables = docs, stats.Copied+n, tables
	if err := t.st.sync(); err != nil {
		return nil, stats, e.discardStore(target, dir, fmt.Errorf("storage: create merge target %d: %w", target, err))
	}
	t.SetOwned([]routing.Span{span})
	stats.Took = e.opts.Clock.Since(start)
	e.logger.Debug("merge target created", zap.Uint32("shard", uint32(target)), zap.Uint32("largest", uint32(big.id)),
		zap.Int("docs_copied", stats.Docs), zap.Int("tables", stats.Tables), zap.Int64("linked_bytes", stats.Linked), zap.Int64("copied_bytes", stats.Copied),
		zap.Duration("took", stats.Took))
	return t, stats, nil
}

// Building a merge target's copied side. Each source other than the
// largest is read from one snapshot (which also gives its S_i) and its
// documents are written, in key order and with the values the write path
// stores, into sstables with Pebble's sstable writer, which are then
// ingested into the target in one Ingest: no WAL, no memtable, no flush and
// no compaction, so the bytes written are the tables themselves. The
// tables hold only the sources' documents: the target's sequence number is
// the checkpoint's (adoptSeq), and the sources' logs are read by CatchUp.
//
// The tables are disjoint from the excised checkpoint (the sources' spans
// are disjoint), so Ingest puts them in the lowest level: it waits for no
// flush and no compaction, which matters because the target's compactions
// are held (holdScheduler) until the handoff.

// mergeTableSize is where a table built for a merge target is cut. Pebble
// would make L6 tables of 2 GiB here (targetFileSize doubled per level); a
// smaller cut bounds what one later compaction of part of the span must
// rewrite, and a handful of files costs a checkpoint of the target a
// handful of links.
const mergeTableSize = 128 << 20

// mergeBytesPerSync is how often a table being built is synced in the
// background (Pebble's BytesPerSync default): bounding the dirty pages
// keeps the final fsync, and the writers' WAL fsyncs queued behind it on
// the same disk, short.
const mergeBytesPerSync = 512 << 10

// mergeTableDir is the directory, inside the target's store directory, the
// tables are built in. Inside the target's directory every way the merge
// can fail takes them with it: a failed CreateMergeTarget removes the
// directory (discardStore), a crash leaves a target that recovery destroys
// whole (an uncommitted merge's, or an orphan), and the driver removes a
// leftover store before building again. Pebble ignores subdirectories of
// its store.
const mergeTableDir = "merge-ingest"

// tableBuilder writes documents, in key order, into a sequence of sstables
// in dir, cut at limit bytes.
type tableBuilder struct {
	fs    vfs.FS
	dir   string
	opts  sstable.WriterOptions
	limit uint64

	w     *sstable.Writer
	paths []string
	bytes int64 // bytes of the finished tables
}

func (b *tableBuilder) add(k, v []byte) error {
	if b.w == nil {
		if err := b.open(); err != nil {
			return err
		}
	}
	if err := b.w.Set(k, v); err != nil {
		return fmt.Errorf("storage: build %s: %w", b.paths[len(b.paths)-1], err)
	}
	if b.w.Raw().EstimatedSize() >= b.limit {
		return b.finish()
	}
	return nil
}

func (b *tableBuilder) open() error {
	path := filepath.Join(b.dir, fmt.Sprintf("%06d.sst", len(b.paths)))
	f, err := b.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("storage: create %s: %w", path, err)
	}
	f = vfs.NewSyncingFile(f, vfs.SyncingFileOptions{BytesPerSync: mergeBytesPerSync})
	b.w = sstable.NewWriter(objstorageprovider.NewFileWritable(f), b.opts)
	b.paths = append(b.paths, path)
	return nil
}

// finish completes the table being written: Close writes its index and
// footer, fsyncs it (the sync Ingest requires of its caller) and closes
// the file.
func (b *tableBuilder) finish() error {
	if b.w == nil {
		return nil
	}
	w, path := b.w, b.paths[len(b.paths)-1]
	b.w = nil
	if err := w.Close(); err != nil {
		return fmt.Errorf("storage: build %s: %w", path, err)
	}
	m, err := w.Metadata()
	if err != nil {
		return fmt.Errorf("storage: build %s: %w", path, err)
	}
	b.bytes += int64(m.Size)
	return nil
}

// abort closes the table being written, if any; its file is left for the
// caller to remove with the directory.
func (b *tableBuilder) abort() {
	if b.w != nil {
		_ = b.w.Close()
		b.w = nil
	}
}

// ingestSources builds every source but sources[skip] into tables and
// ingests them into t, whose store is in dir. It returns each built
// source's S_i (seqs[skip] is left alone), the documents and table bytes
// written and the number of tables. On failure the tables built so far are
// left in dir's table directory, which the caller removes with dir.
func (e *Engine) ingestSources(sources []*Shard, skip int, t *Shard, dir string, seqs []uint64) (docs int, bytes int64, tables int, err error) {
	tmp := filepath.Join(dir, mergeTableDir)
	if err := e.opts.FS.MkdirAll(tmp, 0o755); err != nil {
		return 0, 0, 0, fmt.Errorf("storage: create %s: %w", tmp, err)
	}
	opts := e.so.pebbleOptions(nil, nil)
	b := &tableBuilder{
		fs: e.opts.FS, dir: tmp, limit: mergeTableSize,
		// The lowest level's options: that is where the tables land.
		opts: opts.MakeWriterOptions(len(opts.Levels)-1, t.st.db.TableFormat()),
	}
	if e.mergeCut > 0 {
		b.limit = e.mergeCut
	}
	defer b.abort()
	// The sources' `_id` entries interleave (they are ordered by _id) with
	// one another's and the checkpoint's, and Pebble ingests no tables
	// that overlap: they go in as writes, made durable with the target.
	ib := newEntryWriter(t.st)
	defer ib.close()
	for i, s := range sources {
		if i == skip {
			continue
		}
		seq, n, err := buildSource(s, b, ib.add)
		if err == nil {
			// A source's last table ends with it: the sources come in the
			// caller's order, not necessarily in key order, and a table's
			// keys must ascend.
			err = b.finish()
		}
		if err == nil {
			err = ib.flush()
		}
		if err != nil {
			return 0, 0, 0, fmt.Errorf("copy source %d: %w", s.id, err)
		}
		seqs[i], docs = seq, docs+n
	}
	if len(b.paths) > 0 {
		if !t.st.enter() {
			return 0, 0, 0, ErrShardClosed
		}
		st, err := t.st.db.IngestWithStats(context.Background(), b.paths)
		t.st.exit()
		if err != nil {
			return 0, 0, 0, fmt.Errorf("storage: ingest %d tables into %s: %w", len(b.paths), dir, err)
		}
		if st.ApproxIngestedIntoL0Bytes > 0 {
			e.logger.Warn("merge target tables ingested into l0", zap.String("store", dir),
				zap.Uint64("l0_bytes", st.ApproxIngestedIntoL0Bytes), zap.Uint64("bytes", st.Bytes))
		}
	}
	// Ingest moved the tables into the store (linked them and removed the
	// originals); the directory goes, durably, so no target that survives
	// a crash keeps it.
	if err := e.opts.FS.RemoveAll(tmp); err != nil {
		return 0, 0, 0, fmt.Errorf("storage: remove %s: %w", tmp, err)
	}
	if err := syncDir(e.opts.FS, dir); err != nil {
		return 0, 0, 0, err
	}
	return docs, b.bytes, len(b.paths), nil
}

// buildSource adds every document of src's owned spans to b from one
// snapshot, and returns the sequence number of src that snapshot reflects
// and the documents added. Documents keep their values (and so the
// sequence numbers of the writes that stored them). The `_id` entries of
// those documents, from the same snapshot, go to entry.
//
// The snapshot is registered with src's store like a scan's: a close waits
// for it and stops the copy at its next document (ErrShardClosed).
func buildSource(src *Shard, b *tableBuilder, entry func([]byte) error) (seq uint64, docs int, err error) {
	if src.closed.Load() || !src.st.beginScan() {
		return 0, 0, ErrShardClosed
	}
	defer src.st.endScan()
	snap := src.st.db.NewSnapshot()
	defer snap.Close()
	v, c, err := snap.Get(metaKey(metaSeq, src.id))
	switch {
	case err == pebble.ErrNotFound:
	case err != nil:
		return 0, 0, err
	default:
		if len(v) != 8 {
			c.Close()
			return 0, 0, fmt.Errorf("corrupt sequence number of shard %d: %x", src.id, v)
		}
		seq = binary.BigEndian.Uint64(v)
		c.Close()
	}
	spans := src.Owned()
	slices.SortFunc(spans, func(a, b routing.Span) int { return cmp.Compare(a.Start, b.Start) })
	for _, sp := range spans {
		lo, hi := SpanBounds(src.keyspace, sp)
		it, err := snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return 0, 0, err
		}
		for it.First(); it.Valid(); it.Next() {
			if src.st.closing.Load() {
				_ = it.Close()
				return 0, 0, ErrShardClosed
			}
			if err := b.add(it.Key(), it.Value()); err != nil {
				_ = it.Close()
				return 0, 0, err
			}
			docs++
		}
		if err := it.Close(); err != nil {
			return 0, 0, err
		}
	}
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: allIDs[0], UpperBound: allIDs[1]})
	if err != nil {
		return 0, 0, err
	}
	for it.First(); it.Valid(); it.Next() {
		ks, _, key, err := decodeIDKey(it.Key())
		if err == nil && ks == src.keyspace && inSpans(spans, key) {
			err = entry(it.Key())
		}
		if err != nil {
			_ = it.Close()
			return 0, 0, err
		}
	}
	if err := it.Close(); err != nil {
		return 0, 0, err
	}
	return seq, docs, nil
}

// entryWriter writes `_id` entries into a store that serves no one yet, a
// batch at a time, unsynced (its caller syncs the store).
type entryWriter struct {
	st *store
	b  *pebble.Batch
	n  int
}

func newEntryWriter(st *store) *entryWriter { return &entryWriter{st: st, b: st.db.NewBatch()} }

func (w *entryWriter) add(k []byte) error {
	_ = w.b.Set(k, nil, nil)
	if w.n++; w.n == 1000 {
		return w.flush()
	}
	return nil
}

func (w *entryWriter) flush() error {
	if w.n == 0 {
		return nil
	}
	if !w.st.enter() {
		return ErrShardClosed
	}
	w.st.idEntries.Store(true)
	err := w.st.db.Apply(w.b, pebble.NoSync)
	w.st.exit()
	if err != nil {
		return fmt.Errorf("storage: write %d _id entries into %s: %w", w.n, w.st.dir, err)
	}
	_ = w.b.Close()
	w.b, w.n = w.st.db.NewBatch(), 0
	return nil
}

func (w *entryWriter) close() { _ = w.b.Close() }

func (e *Engine) createSharedMergeTarget(sources []*Shard, target routing.ShardID, span routing.Span) (*Shard, MergeStats, error) {
	stats := MergeStats{Largest: sources[0].id, Seqs: make([]uint64, len(sources))}
	top := uint64(0)
	for i, s := range sources {
		stats.Seqs[i] = s.Seq()
		top = max(top, stats.Seqs[i])
	}
	st := sources[0].st
	if !st.enter() { // a closed Pebble panics
		return nil, stats, fmt.Errorf("storage: create merge target %d: %w", target, ErrShardClosed)
	}
	b := st.db.NewBatch()
	defer b.Close()
	_ = b.Set(metaKey(metaSeq, target), binary.BigEndian.AppendUint64(nil, top), nil)
	err := st.db.Apply(b, pebble.Sync)
	st.exit()
	if err != nil {
		return nil, stats, fmt.Errorf("storage: create merge target %d: %w", target, err)
	}
	s, err := e.OpenShard(target, sources[0].keyspace, []routing.Span{span})
	return s, stats, err
}
