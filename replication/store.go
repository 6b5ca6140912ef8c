package replication

import (
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// NoOpsPerformed is the local checkpoint of a copy that holds no operation
// (OpenSearch's SequenceNumbers.NO_OPS_PERFORMED).
const NoOpsPerformed int64 = -1

// Op is one operation of a shard's history: a document write or delete
// with the sequence number and primary term the primary gave it.
type Op struct {
	Seq  int64      `json:"seq"`
	Term uint64     `json:"term"`
	Doc  storage.Op `json:"doc"`
	// Removed are the keys of other documents of the op's _id that the
	// op replaced or deleted on the primary (a shard keeps one document
	// per _id, whatever routing stored it): a copy applies them as the
	// primary did.
	Removed []routing.Key `json:"removed,omitempty"`
}

// Store is what a copy keeps on disk: its documents, the history of the
// operations it applied (retained while a copy may need them), and, on a
// replica, the documents each operation above the global checkpoint
// replaced, so that a new primary's resync can undo what it never had.
//
// Sequence numbers are a copy's own prefix: Apply takes operations at
// LocalCheckpoint()+1 on, in order, so a copy holds every operation up to
// its local checkpoint and none above it.
type Store interface {
	// LocalCheckpoint is the highest sequence number applied, or
	// NoOpsPerformed.
	LocalCheckpoint() int64
	// Apply applies ops, which follow the local checkpoint without a
	// gap, durably and atomically, recording each in the history and,
	// with undo, the document it replaced.
	Apply(ops []Op, undo bool) error
	// History calls fn for every operation with a sequence number in
	// [from, to] still retained, in order.
	History(from, to int64, fn func(Op) error) error
	// Trim undoes every operation above seq, newest first, and drops it
	// from the history: the local checkpoint becomes seq. It needs the
	// undo records of those operations.
	Trim(seq int64) error
	// SetGlobalCheckpoint records the global checkpoint: no copy will be
	// asked to undo an operation at or below it, so its undo record goes.
	// The record is kept with the copy (OpenSearch's translog checkpoint
	// carries the global checkpoint) and durable with its next durable
	// Apply.
	SetGlobalCheckpoint(gcp int64) error
	// GlobalCheckpoint returns the global checkpoint last recorded, or
	// NoOpsPerformed: a copy opened again starts from it, as OpenSearch's
	// IndexShard reads it back from the translog on opening its engine.
	GlobalCheckpoint() int64
	// TrimHistory drops retained operations at or below seq: no copy
	// will be sent them again.
	TrimHistory(seq int64) error
	// Get returns the copy's document of d's _id, as a write of d would
	// find it: under d's key, or under another routing value that reached
	// the same shard (the shard keeps one document per _id).
	Get(d storage.Op) (storage.Doc, bool, error)
}

// NoWaitApplier is a Store that can apply operations without waiting for
// them to be durable: ApplyNoWait applies ops as Apply does and returns
// once they are readable; wait returns once they are durable, and must be
// called, once. A node's copies start their fsyncs together this way
// (Copy.FlushStart). A primary sends the
// operations to its replicas in between, so that its own fsync and theirs
// overlap, as OpenSearch's primary replicates an operation before its
// translog sync (a write is acknowledged only once every in-sync copy, the
// primary too, made it durable).
type NoWaitApplier interface {
	ApplyNoWait(ops []Op, undo bool) (wait func() error, err error)
}
