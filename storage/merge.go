package storage

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/routing"
)

// MergeStats measures the creation of a merge target.
type MergeStats struct {
	Largest routing.ShardID // the source whose checkpoint the target was made from
	Seqs    []uint64        // per source (in the order given): the sequence number the target reflects
	Linked  int64           // bytes hard-linked from the largest source
	Copied  int64           // bytes copied: the checkpoint's non-linked files plus the other sources' documents
	Docs    int             // documents copied from the other sources
	Took    time.Duration
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
// does), then every other source's documents copied in from a consistent
// snapshot that also gives its S_i. Every source must hold its log
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
	for _, s := range sources {
		if s.keyspace != keyspace {
			return nil, stats, fmt.Errorf("storage: create merge target %d: source %d is in keyspace %d, source %d in %d",
				target, sources[0].id, keyspace, s.id, s.keyspace)
		}
	}
	if e.opts.Layout == LayoutShared {
		return e.createSharedMergeTarget(sources, target, span)
	}
	largest := 0
	var sizes []uint64
	for i, s := range sources {
		var size uint64
		for _, sp := range s.Owned() {
			lo, hi := SpanBounds(keyspace, sp)
			n, err := s.st.db.EstimateDiskUsage(lo, hi)
			if err != nil {
				return nil, stats, fmt.Errorf("storage: create merge target %d: size of source %d: %w", target, s.id, err)
			}
			size += n
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
	stats.Linked, stats.Copied = cs.Linked, cs.Copied
	stats.Seqs = make([]uint64, len(sources))
	stats.Seqs[largest] = cs.Seq
	dir := e.ShardDir(target)
	for i, s := range sources {
		if i == largest {
			continue
		}
		seq, docs, n, err := copyDocs(s, t)
		if err != nil {
			return nil, stats, e.discardStore(target, dir, fmt.Errorf("storage: create merge target %d: copy source %d: %w", target, s.id, err))
		}
		stats.Seqs[i], stats.Docs, stats.Copied = seq, stats.Docs+docs, stats.Copied+n
	}
	if err := t.st.sync(); err != nil {
		return nil, stats, e.discardStore(target, dir, fmt.Errorf("storage: create merge target %d: %w", target, err))
	}
	t.SetOwned([]routing.Span{span})
	stats.Took = e.opts.Clock.Since(start)
	e.logger.Debug("merge target created", zap.Uint32("shard", uint32(target)), zap.Uint32("largest", uint32(big.id)),
		zap.Int("docs_copied", stats.Docs), zap.Int64("linked_bytes", stats.Linked), zap.Int64("copied_bytes", stats.Copied),
		zap.Duration("took", stats.Took))
	return t, stats, nil
}

// copyDocs copies every document of src's owned spans into dst's store
// from one snapshot, and returns the sequence number of src that snapshot
// reflects, the documents and bytes copied. Documents keep their values
// (and so the sequence numbers of the writes that stored them).
func copyDocs(src, dst *Shard) (seq uint64, docs int, bytes int64, err error) {
	snap := src.st.db.NewSnapshot()
	defer snap.Close()
	v, c, err := snap.Get(metaKey(metaSeq, src.id))
	switch {
	case err == pebble.ErrNotFound:
	case err != nil:
		return 0, 0, 0, err
	default:
		if len(v) != 8 {
			c.Close()
			return 0, 0, 0, fmt.Errorf("corrupt sequence number of shard %d: %x", src.id, v)
		}
		seq = binary.BigEndian.Uint64(v)
		c.Close()
	}
	b := dst.st.db.NewBatch()
	defer func() { _ = b.Close() }()
	for _, sp := range src.Owned() {
		lo, hi := SpanBounds(src.keyspace, sp)
		it, err := snap.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return 0, 0, 0, err
		}
		for it.First(); it.Valid(); it.Next() {
			_ = b.Set(it.Key(), it.Value(), nil)
			docs++
			bytes += int64(len(it.Key()) + len(it.Value()))
			if b.Len() >= 1<<20 {
				if err := dst.st.db.Apply(b, pebble.NoSync); err != nil {
					_ = it.Close()
					return 0, 0, 0, err
				}
				b.Reset()
			}
		}
		if err := it.Close(); err != nil {
			return 0, 0, 0, err
		}
	}
	if err := dst.st.db.Apply(b, pebble.NoSync); err != nil {
		return 0, 0, 0, err
	}
	return seq, docs, bytes, nil
}

func (e *Engine) createSharedMergeTarget(sources []*Shard, target routing.ShardID, span routing.Span) (*Shard, MergeStats, error) {
	stats := MergeStats{Largest: sources[0].id, Seqs: make([]uint64, len(sources))}
	top := uint64(0)
	for i, s := range sources {
		stats.Seqs[i] = s.Seq()
		top = max(top, stats.Seqs[i])
	}
	st := sources[0].st
	b := st.db.NewBatch()
	defer b.Close()
	_ = b.Set(metaKey(metaSeq, target), binary.BigEndian.AppendUint64(nil, top), nil)
	if err := st.db.Apply(b, pebble.Sync); err != nil {
		return nil, stats, fmt.Errorf("storage: create merge target %d: %w", target, err)
	}
	s, err := e.OpenShard(target, sources[0].keyspace, []routing.Span{span})
	return s, stats, err
}
