package storage

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/routing"
)

// Layout says how shards map to Pebble stores.
type Layout uint8

const (
	// LayoutPerShard gives every shard its own store under the node's data
	// directory, sharing one block cache, like OpenSearch's one Lucene index
	// per shard. A split makes children by hard-linked checkpoints.
	LayoutPerShard Layout = iota + 1
	// LayoutShared keeps every shard of the node in one store; a shard is a
	// span of it and a split changes only metadata.
	LayoutShared
)

func (l Layout) String() string {
	switch l {
	case LayoutPerShard:
		return "per-shard"
	case LayoutShared:
		return "shared"
	}
	return fmt.Sprintf("Layout(%d)", uint8(l))
}

// ParseLayout parses "per-shard" or "shared".
func ParseLayout(s string) (Layout, error) {
	switch s {
	case "per-shard":
		return LayoutPerShard, nil
	case "shared":
		return LayoutShared, nil
	}
	return 0, fmt.Errorf("storage: unknown layout %q (want per-shard or shared)", s)
}

// Options configure an Engine.
type Options struct {
	Dir        string        // the node's data directory
	FS         vfs.FS        // nil = the OS filesystem
	Layout     Layout        // default LayoutPerShard
	Durability Durability    // default DurabilityRequest
	SyncEvery  time.Duration // async fsync interval; default 5 s
	CacheBytes int64         // shared block cache; default 64 MiB
	Logger     *zap.Logger   // nil = no logging
	// Clock times storage's own deadlines, tickers and measurements (not
	// Pebble's internals); nil = the wall clock.
	Clock clock.Clock
	// ForeignCleanup paces the deletion of keep-all children's foreign
	// documents (foreign.go).
	ForeignCleanup ForeignCleanupOptions
	// SplitFlushRate is the rate, in bytes a second, of the flushes a
	// split or merge makes: the parent's before its checkpoints and each
	// child's of the WAL it copied (pacefs.go); 0 = DefaultSplitFlushRate,
	// negative = as fast as the disk goes.
	SplitFlushRate int64
	// CopyChildWAL makes a split's children copy the parent's unflushed
	// WAL into their checkpoints and flush it at open, as Pebble's
	// Checkpoint does, instead of flushing the parent after its log hold
	// and leaving the WAL out (CreateChildren). For comparison.
	CopyChildWAL bool
	// FlushChildren makes a split flush its parent before the children's
	// checkpoints, as it must when the retained history cannot stand in
	// for the parent's memtables (history.go), instead of making them from
	// the last flushed state and the history. For comparison.
	FlushChildren bool
	// IDIndex says how a split's per-shard child drops the `_id` entries
	// of the documents it does not own (idindex.go); IDIndexOff keeps no
	// `_id` index at all, for comparison.
	IDIndex IDIndexBuild
	// BeforeGet, if set, runs at the start of every point read of a shard
	// (Shard.GetID), on the reading goroutine, with the shard's id. Tests
	// park a get there to keep it in flight across a retire, which must
	// wait for it as for a search.
	BeforeGet func(routing.ShardID)
}

// Engine holds a node's shard stores. Its methods are safe for concurrent
// use.
type Engine struct {
	opts      Options
	so        storeOptions
	cache     *pebble.Cache
	fileCache *pebble.FileCache
	logger    *zap.Logger

	mu             sync.Mutex
	stores         map[string]*store // by directory
	shards         map[routing.ShardID]*Shard
	retiredWritten uint64 // bytes written by stores since closed
	retireStats    map[routing.ShardID]RetireStats
	closed         bool

	foreign foreignCleaners // background deletes of keep-all children's foreign documents

	// mergeCut is where a merge target's built tables are cut; 0 means
	// mergeTableSize. Tests lower it to build several tables.
	mergeCut uint64
}

// Open opens (or creates) the engine in opts.Dir. Shards are opened with
// OpenShard.
func Open(opts Options) (*Engine, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("storage: open engine: no data directory")
	}
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if opts.Layout == 0 {
		opts.Layout = LayoutPerShard
	}
	if opts.Durability == 0 {
		opts.Durability = DurabilityRequest
	}
	if opts.CacheBytes == 0 {
		opts.CacheBytes = 64 << 20
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.SplitFlushRate == 0 {
		opts.SplitFlushRate = DefaultSplitFlushRate
	}
	opts.Clock = clock.Or(opts.Clock)
	if err := mkdirAllDurable(opts.FS, opts.Dir); err != nil {
		return nil, fmt.Errorf("storage: open engine: %w", err)
	}
	e := &Engine{
		opts:      opts,
		cache:     pebble.NewCache(opts.CacheBytes),
		fileCache: pebble.NewFileCache(16, 1000),
		logger:    opts.Logger,
		stores:    map[string]*store{},
		shards:    map[routing.ShardID]*Shard{},
	}
	e.so = storeOptions{fs: opts.FS, cache: e.cache, fileCache: e.fileCache, durability: opts.Durability,
		syncInterval: opts.SyncEvery, logger: opts.Logger, clock: opts.Clock, flushRate: opts.SplitFlushRate}
	return e, nil
}

// Clock returns the engine's clock.
func (e *Engine) Clock() clock.Clock { return e.opts.Clock }

// Layout returns the engine's layout.
func (e *Engine) Layout() Layout { return e.opts.Layout }

// Dir returns the engine's data directory.
func (e *Engine) Dir() string { return e.opts.Dir }

// ShardDir is where a shard's own store lives in the per-shard layout.
func (e *Engine) ShardDir(id routing.ShardID) string { return ShardDirIn(e.opts.Dir, id) }

// ShardDirIn is the store directory of shard id in the per-shard layout of
// an engine whose data directory is dir.
func ShardDirIn(dir string, id routing.ShardID) string {
	return filepath.Join(dir, fmt.Sprintf("shard-%d", id))
}

func (e *Engine) storeDir(id routing.ShardID) string {
	if e.opts.Layout == LayoutShared {
		return filepath.Join(e.opts.Dir, sharedStoreDir)
	}
	return e.ShardDir(id)
}

// openChildStore opens and registers the store a child's checkpoint made
// in dir, with its compactions held. Unlike storeLocked it runs
// Pebble's Open outside e.mu, so that the children of one split open at
// the same time (CreateChildren); the engine's caches are referenced
// across the open so that a concurrent Close cannot free them under it,
// and a store that finishes opening after Close is closed again. What the
// store shares with its siblings is in sib (the zero value: nothing).
//
// prepare (if not nil) runs on the open store before it is registered, and
// its error closes the store again: a store the engine does not know yet
// is one its Close cannot close under the caller (a child's trim; it
// panicked in Pebble, TestChildTrimRacingCloseFailsCleanly). The store's
// own references to the caches keep them alive meanwhile.
func (e *Engine) openChildStore(dir string, sib siblings, prepare func(*store) error) (*store, error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, fmt.Errorf("storage: open store %s: engine closed", dir)
	}
	if _, ok := e.stores[dir]; ok {
		e.mu.Unlock()
		return nil, fmt.Errorf("storage: open store %s: already open", dir)
	}
	e.cache.Ref()
	e.fileCache.Ref()
	e.mu.Unlock()
	defer e.cache.Unref()
	defer e.fileCache.Unref()
	so := e.so
	so.sib = sib
	st, err := openStore(dir, so, true)
	if err != nil {
		return nil, err
	}
	if prepare != nil {
		if err := prepare(st); err != nil {
			return nil, errors.Join(err, st.close())
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errors.Join(fmt.Errorf("storage: open store %s: engine closed while it opened", dir), st.close())
	}
	if _, ok := e.stores[dir]; ok {
		return nil, errors.Join(fmt.Errorf("storage: open store %s: opened twice", dir), st.close())
	}
	e.stores[dir] = st
	return st, nil
}

// storeLocked returns the open store in dir, opening it if needed.
func (e *Engine) storeLocked(dir string) (*store, error) {
	if st, ok := e.stores[dir]; ok {
		return st, nil
	}
	if e.closed {
		return nil, fmt.Errorf("storage: open store %s: engine closed", dir)
	}
	_, statErr := e.opts.FS.Stat(dir)
	st, err := openStore(dir, e.so, false)
	if err != nil {
		return nil, err
	}
	if statErr != nil { // Pebble created the directory: make its entry durable
		if err := syncDir(e.opts.FS, e.opts.Dir); err != nil {
			_ = st.close()
			return nil, err
		}
	}
	e.stores[dir] = st
	return st, nil
}

// OpenShard opens (creating if needed) the shard id living in keyspace
// (routing.Table.Keyspace of its root) and owning spans of it. Its sequence
// number is read back from its store.
func (e *Engine) OpenShard(id, keyspace routing.ShardID, spans []routing.Span) (*Shard, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.shards[id]; ok {
		return s, nil
	}
	st, err := e.storeLocked(e.storeDir(id))
	if err != nil {
		return nil, err
	}
	seq, err := readSeq(st.db, id)
	if err != nil {
		return nil, fmt.Errorf("storage: open shard %d: %w", id, err)
	}
	s := &Shard{id: id, keyspace: keyspace, st: st, durability: e.opts.Durability, clock: e.opts.Clock, beforeGet: e.opts.BeforeGet, owned: sortedSpans(spans),
		ids: e.opts.IDIndex != IDIndexOff}
	s.seq.Store(seq)
	if e.opts.Layout != LayoutShared {
		st.hist.start(seq)
	}
	s.load.rng = (uint64(id)+1)*0x9e3779b97f4a7c15 | 1 // deterministic, never 0
	s.load.seed = uint64(id) << 32
	e.shards[id] = s
	return s, nil
}

// Shard returns an open shard.
func (e *Engine) Shard(id routing.ShardID) (*Shard, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.shards[id]
	return s, ok
}

// Close closes every shard and store. A second Close returns nil.
func (e *Engine) Close() error {
	e.stopForeignCleanups()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	for _, s := range e.shards {
		s.closed.Store(true)
	}
	var first error
	for dir, st := range e.stores {
		if err := st.close(); err != nil && first == nil {
			first = err
		}
		delete(e.stores, dir)
	}
	e.fileCache.Unref()
	e.cache.Unref()
	return first
}

// CloneDir copies a closed data directory for an identical second run:
// Pebble's immutable files (tables, blob files) are hard-linked, everything
// else (MANIFEST, WAL, OPTIONS, markers, the node's TABLE) is copied. The
// directory must not be open. A nil fs is the OS filesystem.
func CloneDir(fs vfs.FS, src, dst string) error {
	if fs == nil {
		fs = vfs.Default
	}
	if err := fs.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("storage: clone %s: %w", src, err)
	}
	names, err := fs.List(src)
	if err != nil {
		return fmt.Errorf("storage: clone %s: %w", src, err)
	}
	for _, name := range names {
		from, to := filepath.Join(src, name), filepath.Join(dst, name)
		fi, err := fs.Stat(from)
		if err != nil {
			return fmt.Errorf("storage: clone %s: %w", src, err)
		}
		switch {
		case fi.IsDir():
			err = CloneDir(fs, from, to)
		case strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob"):
			err = vfs.LinkOrCopy(fs, from, to)
		default:
			err = vfs.Copy(fs, from, to)
		}
		if err != nil {
			return fmt.Errorf("storage: clone %s: %w", from, err)
		}
	}
	return nil
}
