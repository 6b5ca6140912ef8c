package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/shardsplit/shardsplit/routing"
)

// RaiseSeqTo makes shard id's persisted sequence number at least that of
// each shard in from, durably (shared layout; in the per-shard layout each
// shard's documents are its own and it does nothing).
//
// Recovery calls it before it deletes the children of a rolled-back split
// (the target of a rolled-back merge): in the shared layout their documents
// are the parent's (the sources') keys, so a write a child took after the
// publish, never acknowledged, may survive the roll-back with the child's
// sequence number, above the parent's. Without it the parent numbered its
// next write of that document below the surviving version (INV-11).
func (e *Engine) RaiseSeqTo(id routing.ShardID, from []routing.ShardID) error {
	if e.opts.Layout != LayoutShared || len(from) == 0 {
		return nil
	}
	dir := e.storeDir(id)
	e.mu.Lock()
	st, open := e.stores[dir]
	if !open {
		if _, err := e.opts.FS.Stat(dir); err != nil {
			e.mu.Unlock()
			if errors.Is(err, os.ErrNotExist) {
				return nil // no store: no shard ever wrote
			}
			return fmt.Errorf("storage: raise sequence number of shard %d: %w", id, err)
		}
		var err error
		if st, err = e.storeLocked(dir); err != nil {
			e.mu.Unlock()
			return fmt.Errorf("storage: raise sequence number of shard %d: %w", id, err)
		}
	}
	s := e.shards[id]
	e.mu.Unlock()
	top, raised, err := raiseStoredSeq(st, id, from)
	if err != nil || !raised {
		return err
	}
	if s != nil {
		return s.RaiseSeq(top) // after the gate: RaiseSeq enters it itself
	}
	return nil
}

// raiseStoredSeq writes shard id's sequence number as the largest of its
// own and from's, durably, inside st's gate (the shared store may close
// beside it: Engine.Close), and reports whether it raised it.
func raiseStoredSeq(st *store, id routing.ShardID, from []routing.ShardID) (uint64, bool, error) {
	if !st.enter() {
		return 0, false, fmt.Errorf("storage: raise sequence number of shard %d: %w", id, ErrShardClosed)
	}
	defer st.exit()
	own, err := readSeq(st.db, id)
	if err != nil {
		return 0, false, err
	}
	top := own
	for _, f := range from {
		seq, err := readSeq(st.db, f)
		if err != nil {
			return 0, false, err
		}
		top = max(top, seq)
	}
	if top == own {
		return top, false, nil
	}
	b := st.db.NewBatch()
	defer b.Close()
	_ = b.Set(metaKey(metaSeq, id), binary.BigEndian.AppendUint64(nil, top), nil)
	if err := st.applySynced(b); err != nil {
		return 0, false, fmt.Errorf("storage: raise sequence number of shard %d to %d: %w", id, top, err)
	}
	return top, true, nil
}
