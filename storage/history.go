package storage

import (
	"fmt"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shardsplit/shardsplit/internal/invariants"
	"github.com/shardsplit/shardsplit/routing"
)

// unflushed is a per-shard store's retained history: every operation of
// its shard that the store's flushed tables may lack, kept in memory from
// its commit until a flush puts it in a table. A split makes its children
// from the parent's last flushed state (a checkpoint of the tables, no WAL,
// no flush) and replays from here the operations above that state's
// sequence number: no flush of the parent sits in the split's window.
//
// OpenSearch's peer recovery does the same with a commit and the
// translog retained above its local checkpoint (a retention lease): here
// the "commit" is the flushed tables, whose sequence number is exact,
// because every write batch carries the shard's sequence number
// (metaSeq) and Pebble flushes whole batches in commit order; the
// retention is held from each commit until the flush that covers it,
// whether or not a split is coming, because the flushed state a split
// starts from is older than the split.
//
// The cut is made with Pebble's own sequence numbers. Every batch
// recorded here carries the range of Pebble sequence numbers it was given
// (Batch.SeqNum, Count); a flush's end reports the largest sequence
// number in its output tables, and since Pebble assigns sequence numbers
// in commit order and flushes memtables oldest first, every batch at or
// below it is in a table: its operations leave the history. A batch that
// changed the store without being recorded (a child's adopted sequence
// number, a merge's copies, an undo, an excise's ingest) leaves a gap in
// the recorded ranges: until a flush covers the gap, the history cannot
// stand in for the memtable and a split flushes the parent as before.
//
// Memory: what the memtables hold, at most Pebble's stop-writes size of
// memtables (MemTableSize × MemTableStopWritesThreshold) of operations,
// plus what a split pins while it builds its children.
type unflushed struct {
	mu sync.Mutex
	// on: the store's shard keeps the history (per-shard layout, from
	// OpenShard). The shared layout's children copy nothing.
	on bool
	// floor: every operation of the shard with a sequence number above it
	// is in ops.
	floor uint64
	ops   []histOp // ascending sequence numbers
	// nextP is the Pebble sequence number after the last batch recorded or
	// probed; gapP the highest Pebble sequence number known to belong to a
	// batch not recorded (0: none); flushedP the highest known to be in
	// the store's tables.
	nextP, gapP, flushedP uint64
	// pins are the splits reading ops; ops are not trimmed while one is.
	pins int
}

// histOp is one retained operation and the last Pebble sequence number of
// the batch that committed it.
type histOp struct {
	e LogEntry
	p uint64
}

// batchSeqs returns the Pebble sequence numbers a committed batch was
// given, first and count.
func batchSeqs(b *pebble.Batch) (first, count uint64) {
	return uint64(b.SeqNum()), uint64(b.Count())
}

// probeSeq returns the next Pebble sequence number db will give a batch:
// every batch committed or committing before the call has a lower one. It
// commits a batch of no operations (a WAL record, not synced).
func probeSeq(db *pebble.DB) (uint64, error) {
	b := db.NewBatch()
	defer b.Close()
	_ = b.LogData(nil, nil)
	if err := db.Apply(b, pebble.NoSync); err != nil {
		return 0, err
	}
	return uint64(b.SeqNum()), nil
}

// opened starts the history at the store's open: Pebble's Open flushed
// every replayed memtable before returning, so every batch below next
// (probeSeq right after it) is in a table.
func (h *unflushed) opened(next uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nextP = next
}

// start makes the history the shard's, whose sequence number is seq.
func (h *unflushed) start(seq uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.on, h.floor, h.ops = true, seq, nil
}

// seeBatchLocked notes a batch given Pebble sequence numbers
// [first, first+count): anything between the last batch seen and it was
// not recorded.
func (h *unflushed) seeBatchLocked(first, count uint64) {
	if first > h.nextP {
		h.gapP = max(h.gapP, first-1)
	}
	h.nextP = max(h.nextP, first+count)
}

// record notes a committed batch of the shard's and retains its
// operations above the last one retained. A batch with operations is
// recorded under the shard's apply lock, so operations arrive in commit
// order; one without (nil entries) changes nothing a child copies (the
// operation log, undo records, a raised sequence number) and may be
// recorded from anywhere: batches seen out of order only make a gap
// appear where there is none. Sources and removed keys are copied: the
// caller's buffers are its own.
func (h *unflushed) record(b *pebble.Batch, entries []LogEntry) {
	first, count := batchSeqs(b)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seeBatchLocked(first, count)
	if !h.on {
		return
	}
	top := h.floor
	if n := len(h.ops); n > 0 {
		top = h.ops[n-1].e.Seq
	}
	last := first + count - 1
	for _, e := range entries {
		if e.Seq <= top {
			continue // a replayed entry the shard has (ApplyLog)
		}
		e.Op.Source = slices.Clone(e.Op.Source)
		e.Removed = slices.Clone(e.Removed)
		h.ops = append(h.ops, histOp{e: e, p: last})
		top = e.Seq
	}
	if last <= h.flushedP && h.pins == 0 {
		h.trimLocked() // flushed before it was recorded
	}
}

// undone drops the operations above seq (Shard.Undo took them back).
func (h *unflushed) undone(seq uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	i, _ := slices.BinarySearchFunc(h.ops, seq+1, func(o histOp, s uint64) int { return cmpU64(o.e.Seq, s) })
	h.ops = h.ops[:i]
	h.floor = min(h.floor, seq)
}

// flushed notes a flush's end: every batch at or below largest, the
// largest Pebble sequence number in its output tables, is in a table.
func (h *unflushed) flushed(largest uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.flushedP = max(h.flushedP, largest)
	if h.pins == 0 {
		h.trimLocked()
	}
}

// trimLocked drops the operations whose batches are in a table.
func (h *unflushed) trimLocked() {
	i := 0
	for i < len(h.ops) && h.ops[i].p <= h.flushedP {
		i++
	}
	if i == 0 {
		return
	}
	h.floor = max(h.floor, h.ops[i-1].e.Seq)
	// A fresh slice: dropping a prefix in place keeps the old sources
	// reachable through the backing array.
	h.ops = append(make([]histOp, 0, len(h.ops)-i), h.ops[i:]...)
}

// pin stops the trimming until unpin and reports whether the history
// stands in for the store's memtables: every batch below next (probeSeq
// under the shard's apply lock, so no write of the shard is committing)
// is recorded or in a table. It returns the floor: every operation above
// it is retained until unpin.
func (h *unflushed) pin(next uint64) (floor uint64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seeBatchLocked(next, 0)
	h.pins++
	return h.floor, h.on && h.gapP <= h.flushedP
}

func (h *unflushed) unpin() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pins--; h.pins == 0 {
		h.trimLocked()
	}
	if h.pins < 0 {
		panic(invariants.AssertionFailedf("storage: history unpinned more often than pinned"))
	}
}

// since returns the retained operations in (after, upTo] whose key or one
// of whose removed keys is in spans. The caller pinned the history at a
// floor at or below after.
func (h *unflushed) since(after, upTo uint64, spans []routing.Span) ([]LogEntry, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if after < h.floor {
		return nil, fmt.Errorf("storage: retained history begins after %d, not at or before %d", h.floor, after)
	}
	if h.pins == 0 {
		return nil, invariants.AssertionFailedf("storage: read of an unpinned history")
	}
	var out []LogEntry
	for _, o := range h.ops {
		if o.e.Seq <= after {
			continue
		}
		if o.e.Seq > upTo {
			break
		}
		e := o.e
		if !inSpans(spans, e.Op.Key) && !slices.ContainsFunc(e.Removed, func(k routing.Key) bool { return inSpans(spans, k) }) {
			continue
		}
		out = append(out, e)
	}
	return out, nil
}

// listen adds the history's trimming to a store's event listener: a
// flush's end reports the largest Pebble sequence number of its output
// tables. A flush of ingested tables (an excise queued behind unflushed
// writes) is passed over: its tables' sequence numbers are the ingest's,
// which says nothing of the memtables around it.
func (h *unflushed) listen(el *pebble.EventListener) {
	flushEnd := el.FlushEnd
	el.FlushEnd = func(info pebble.FlushInfo) {
		if flushEnd != nil {
			flushEnd(info)
		}
		if info.Err != nil || info.Ingest {
			return
		}
		largest := uint64(0)
		for _, t := range info.Output {
			largest = max(largest, uint64(t.LargestSeqNum))
		}
		if largest > 0 {
			h.flushed(largest)
		}
	}
}

// retained returns how many operations the history holds.
func (h *unflushed) retained() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
