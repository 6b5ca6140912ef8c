package clusternode

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/replication"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// Stores opens copies on storage: each copy is an engine of its own in its
// directory, holding the one shard (per-shard layout), whose operation log
// is held for good as the copy's history.
//
// A replication sequence number is a storage sequence number minus one:
// storage numbers a shard's writes from 1, OpenSearch's _seq_no starts at
// 0, so a copy's local checkpoint is its storage sequence number - 1 (-1,
// NO_OPS_PERFORMED, when empty).
type Stores struct {
	FS         storage.FS
	Durability storage.Durability
	CacheBytes int64 // each copy's block cache; default 8 MiB
	Clock      clock.Clock
	Logger     *zap.Logger
}

// RecoveryDir is where a recovery writes a copy's files: the store
// directory of the engine in dir.
func (o Stores) RecoveryDir(dir string, shard routing.ShardID) string {
	return storage.ShardDirIn(dir, shard)
}

// Open opens the copy in dir.
func (o Stores) Open(dir string, shard, keyspace routing.ShardID, spans []routing.Span) (CopyStore, error) {
	eng, err := o.engine(dir)
	if err != nil {
		return nil, err
	}
	s, err := eng.OpenShard(shard, keyspace, spans)
	if err != nil {
		_ = eng.Close()
		return nil, err
	}
	s.HoldLog()
	return &pebbleStore{eng: eng, s: s}, nil
}

// OpenChild builds, in dir, the copy of a split's child shard that owns
// span of keyspace from from, a copy of its parent on this node: a
// checkpoint of the parent's store (hard links to its tables) opened as
// the child's, the other documents and the history excised
// (storage.Engine.AdoptCheckpoint). The child's local checkpoint is the
// parent's at the checkpoint.
func (o Stores) OpenChild(dir string, from CopyStore, parent, child, keyspace routing.ShardID, span routing.Span) (CopyStore, error) {
	p, ok := from.(*pebbleStore)
	if !ok {
		return nil, fmt.Errorf("clusternode: build child %d: the parent's store is a %T", child, from)
	}
	if err := o.FS.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if _, err := p.s.Checkpoint(storage.ShardDirIn(dir, child)); err != nil {
		return nil, fmt.Errorf("clusternode: build child %d: %w", child, err)
	}
	eng, err := o.engine(dir)
	if err != nil {
		return nil, err
	}
	s, _, err := eng.AdoptCheckpoint(parent, child, keyspace, span)
	if err != nil {
		_ = eng.Close()
		return nil, fmt.Errorf("clusternode: build child %d: %w", child, err)
	}
	s.HoldLog()
	return &pebbleStore{eng: eng, s: s}, nil
}

func (o Stores) engine(dir string) (*storage.Engine, error) {
	cache := o.CacheBytes
	if cache == 0 {
		cache = 8 << 20
	}
	return storage.Open(storage.Options{Dir: dir, FS: o.FS, Durability: o.Durability, CacheBytes: cache,
		Clock: o.Clock, Logger: o.Logger})
}

type pebbleStore struct {
	eng *storage.Engine
	s   *storage.Shard
}

func (p *pebbleStore) LocalCheckpoint() int64 { return int64(p.s.Seq()) - 1 }

func (p *pebbleStore) Apply(ops []replication.Op, undo bool) error {
	if len(ops) == 0 {
		return nil
	}
	if undo {
		entries := make([]storage.LogEntry, len(ops))
		for i, op := range ops {
			entries[i] = storage.LogEntry{Seq: uint64(op.Seq) + 1, Op: op.Doc, Removed: op.Removed}
		}
		return p.s.ApplyReplicated(entries, true)
	}
	docs := make([]storage.Op, len(ops))
	for i, op := range ops {
		docs[i] = op.Doc
	}
	last, err := p.s.Write(docs, nil)
	if err != nil {
		return err
	}
	if want := uint64(ops[len(ops)-1].Seq) + 1; last != want {
		return fmt.Errorf("clusternode: a primary's write landed at sequence number %d, not %d", last, want)
	}
	return nil
}

func (p *pebbleStore) ApplyNoWait(ops []replication.Op, undo bool) (func() error, error) {
	if len(ops) == 0 {
		return func() error { return nil }, nil
	}
	if undo {
		entries := make([]storage.LogEntry, len(ops))
		for i, op := range ops {
			entries[i] = storage.LogEntry{Seq: uint64(op.Seq) + 1, Op: op.Doc, Removed: op.Removed}
		}
		return p.s.ApplyReplicatedNoWait(entries, true)
	}
	docs := make([]storage.Op, len(ops))
	for i, op := range ops {
		docs[i] = op.Doc
	}
	last, wait, err := p.s.WriteNoWait(docs, nil)
	if err != nil {
		return nil, err
	}
	if want := uint64(ops[len(ops)-1].Seq) + 1; last != want {
		_ = wait()
		return nil, fmt.Errorf("clusternode: a primary's write landed at sequence number %d, not %d", last, want)
	}
	return wait, nil
}

func (p *pebbleStore) History(from, to int64, fn func(replication.Op) error) error {
	cur := int64(p.s.Seq()) - 1
	to = min(to, cur)
	if from > to {
		return nil
	}
	return p.s.LogSince(uint64(from), uint64(to)+1, nil, func(e storage.LogEntry) error {
		return fn(replication.Op{Seq: int64(e.Seq) - 1, Doc: e.Op, Removed: e.Removed})
	})
}

func (p *pebbleStore) Trim(seq int64) error { return p.s.Undo(uint64(seq + 1)) }

func (p *pebbleStore) SetGlobalCheckpoint(gcp int64) error {
	if gcp < 0 {
		return nil
	}
	return p.s.DropUndo(uint64(gcp + 1))
}

// GlobalCheckpoint is the shard's undo floor (storage.Shard.DropUndo), in
// replication's numbering.
func (p *pebbleStore) GlobalCheckpoint() int64 {
	floor, ok, err := p.s.UndoFloor()
	if err != nil || !ok {
		return replication.NoOpsPerformed
	}
	return int64(floor) - 1
}

func (p *pebbleStore) TrimHistory(seq int64) error {
	if seq < 0 {
		return nil
	}
	return p.s.TrimLogTo(uint64(seq + 1))
}

func (p *pebbleStore) Get(d storage.Op) (storage.Doc, bool, error) {
	return p.s.GetID(d.Root, p.spanOf(d.Key), d.Key, d.ID, d.Home)
}

// spanOf is the span of the copy that holds key.
func (p *pebbleStore) spanOf(key routing.Key) routing.Span {
	for _, sp := range p.s.Owned() {
		if sp.Contains(key) {
			return sp
		}
	}
	return routing.Span{}
}

func (p *pebbleStore) Scan(fn func(storage.Doc) error) error { return p.s.Scan(fn) }

func (p *pebbleStore) Checkpoint(dir string) (int64, error) {
	seq, err := p.s.Checkpoint(dir)
	return int64(seq) - 1, err
}

func (p *pebbleStore) Close() error {
	err := p.eng.Close()
	if errors.Is(err, storage.ErrShardClosed) {
		return nil
	}
	return err
}
