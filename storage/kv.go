package storage

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"
)

// WriteCategoryUnspecified is the write category of files storage's users
// create on an FS (Pebble tags its own writes by category).
const WriteCategoryUnspecified = vfs.WriteCategoryUnspecified

// NewMemFS returns an in-memory filesystem that a test can crash
// (vfs.NewCrashableMem).
func NewMemFS() *vfs.MemFS { return vfs.NewCrashableMem() }

// KV is a small ordered key-value store with synced batches: the durable
// home of a node's cluster-coordination state (its raft log, hard state and
// snapshots, and its identity). It is a Pebble store of its own, apart from
// the shard stores, so that the cluster manager's fsyncs never wait behind
// a shard's writes.
//
// Concurrency: safe for concurrent use; a batch is applied atomically.
type KV struct {
	db  *pebble.DB
	dir string
}

// ErrNotFound is returned by KV.Get for a missing key.
var ErrNotFound = errors.New("storage: key not found")

// OpenKV opens (or creates) the key-value store in dir on fs (nil = DefaultFS).
func OpenKV(fs FS, dir string, logger *zap.Logger) (*KV, error) {
	if fs == nil {
		fs = DefaultFS()
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	if err := mkdirAllDurable(fs, dir); err != nil {
		return nil, fmt.Errorf("storage: open kv %s: %w", dir, err)
	}
	opts := &pebble.Options{
		FS:                          fs,
		Logger:                      zapPebbleLogger{logger.Sugar()},
		MemTableSize:                4 << 20,
		L0CompactionThreshold:       4,
		DisableAutomaticCompactions: false,
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("storage: open kv %s: %w", dir, err)
	}
	return &KV{db: db, dir: dir}, nil
}

// Get returns a copy of key's value, or ErrNotFound.
func (kv *KV) Get(key []byte) ([]byte, error) {
	v, closer, err := kv.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("storage: kv get %q: %w", key, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// Scan calls fn for every key in [lo, hi) in order; key and value are only
// valid during the call.
func (kv *KV) Scan(lo, hi []byte, fn func(key, value []byte) error) error {
	it, err := kv.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("storage: kv scan: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			return err
		}
	}
	return it.Error()
}

// KVBatch collects writes that KV.Commit applies atomically.
type KVBatch struct{ b *pebble.Batch }

// NewBatch returns an empty batch.
func (kv *KV) NewBatch() *KVBatch { return &KVBatch{b: kv.db.NewBatch()} }

// Set sets key to value.
func (b *KVBatch) Set(key, value []byte) { _ = b.b.Set(key, value, nil) }

// Delete deletes key.
func (b *KVBatch) Delete(key []byte) { _ = b.b.Delete(key, nil) }

// DeleteRange deletes every key in [lo, hi).
func (b *KVBatch) DeleteRange(lo, hi []byte) { _ = b.b.DeleteRange(lo, hi, nil) }

// Empty reports whether the batch holds no write.
func (b *KVBatch) Empty() bool { return b.b.Empty() }

// Commit applies b atomically, after an fsync of the store's WAL when sync
// is set, and releases it.
func (kv *KV) Commit(b *KVBatch, sync bool) error {
	defer b.b.Close()
	opt := pebble.NoSync
	if sync {
		opt = pebble.Sync
	}
	if err := kv.db.Apply(b.b, opt); err != nil {
		return fmt.Errorf("storage: kv commit: %w", err)
	}
	return nil
}

// Close closes the store.
func (kv *KV) Close() error {
	if err := kv.db.Close(); err != nil {
		return fmt.Errorf("storage: close kv %s: %w", kv.dir, err)
	}
	return nil
}
