// Package node serves one index on one node: it holds the shard stores and
// the published routing table, and answers routed Index/Delete/Get requests
// and unrouted searches with version fencing. It also offers the primitives
// the splitter's driver needs: apply-and-publish a table edit, register
// child shards, hold a parent's apply lock across a handoff, retire a shard
// once no reader holds it.
//
// It sits between storage and splitter (routing ← storage ← node ←
// splitter): it has no home in storage, which must not know tables or
// routers, nor in splitter, whose pure state machine must not know about
// request serving.
//
// # Fencing rule
//
// A write names the shard its router chose and the table version the router
// used. The shard's guard runs under the shard's apply lock and admits the
// write only if, in the table published now, that shard owns the write's
// routing key; otherwise the write fails with *StaleRoutingError carrying the
// current table, and nothing is applied. A handoff publishes the new table
// while holding the parent's apply lock, so no parent write can be admitted
// under the old table and applied after the publish: a write either
// completes on the parent before the handoff (and is in the tail the
// children replay) or is refused and retried at a child.
//
// Concurrency: all methods are safe for concurrent use.
package node

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/internal/invariants"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// StaleRoutingError answers a request routed with a table under which the
// named shard does not own the document at the node's current version. The
// router adopts Current and retries.
type StaleRoutingError struct {
	Shard   routing.ShardID // the shard the request named
	Have    routing.Version // the version the router used
	Current *routing.Table  // the node's current table
}

func (e *StaleRoutingError) Error() string {
	return fmt.Sprintf("node: stale routing: shard %d does not own the document at table v%d (request used v%d)",
		e.Shard, e.Current.Version(), e.Have)
}

// ErrReadersRemain is returned by Retire when readers still hold the shard
// after its wait; the shard stays retiring and Retire may be called again.
var ErrReadersRemain = errors.New("node: readers still hold the shard")

// errPageFull stops a shard's scan once it gave a page of hits.
var errPageFull = errors.New("node: page full")

// ErrClosed is returned after Close.
var ErrClosed = errors.New("node: closed")

// ErrNoTable is returned by Open when the engine's directory holds no
// routing table and the caller gave none: the index was never created (a
// crash between making the directory and persisting the first table leaves
// exactly this).
var ErrNoTable = errors.New("node: no routing table on disk and none given")

// ErrFailed is returned by every request once a published table, or a
// write a shard applied, could not be made durable: the node's memory and
// its disk disagree, and only a reopen (with recovery) may decide which
// stands.
var ErrFailed = errors.New("node: failed: a table or a write could not be made durable; reopen to recover")

// Config configures a Node.
type Config struct {
	Engine *storage.Engine
	// Table is the table to serve when the data directory has none yet.
	Table  *routing.Table
	Logger *zap.Logger
	// Clock times Retire's wait and HoldApplyLock's measurement; nil = the
	// engine's clock (storage.Options.Clock, the wall clock by default).
	Clock clock.Clock
}

// tableFile is where the published table lives in the data directory.
const tableFile = "TABLE"

// Node serves one index.
type Node struct {
	eng    *storage.Engine
	logger *zap.Logger
	clock  clock.Clock

	table   atomic.Pointer[routing.Table] // the published table
	durable atomic.Pointer[routing.Table] // the last table known durable (== table unless a commit is pending)
	block   atomic.Pointer[error]         // a write block: every write fails with it

	failed   atomic.Pointer[error] // sticky: see ErrFailed
	commitMu sync.Mutex
	commitCh chan struct{} // closed (and replaced) when a pending table commits or fails

	mu     sync.RWMutex // publish takes it exclusively; reads share it
	shards map[routing.ShardID]*shardRef
	// retiring holds the shards Retire took out of shards and has not yet
	// destroyed: a retried Retire (after its wait for readers timed out)
	// must wait for the same readers again, not destroy the store under
	// them.
	retiring map[routing.ShardID][]*shardRef
	closed   bool
	publish  sync.Mutex // serialises edits
	// writing is held shared by a write of the TABLE file from its
	// editable or failure check to its end, and taken exclusively by Close
	// once closed is set: no table write outlives Close into a directory
	// that may be another node's by then.
	writing sync.RWMutex
}

// shardRef is a shard store with a count of readers that resolved it.
type shardRef struct {
	s       *storage.Shard
	readers sync.WaitGroup
	active  atomic.Int64 // readers holding it now (the WaitGroup cannot say)

	drainOnce sync.Once
	drainCh   chan struct{} // closed once no reader holds it (drained)
}

// drained returns a channel closed once the readers that hold r have
// released it. Only Retire calls it, once r is out of the node's map (no
// reader can acquire it then), and however many attempts ask, one
// goroutine waits: a reader that stays held a shard that a cleanup retried
// every second gained a goroutine each time.
func (r *shardRef) drained() <-chan struct{} {
	r.drainOnce.Do(func() {
		r.drainCh = make(chan struct{})
		go func() {
			r.readers.Wait()
			close(r.drainCh)
		}()
	})
	return r.drainCh
}

// acquire registers a reader; it is called under n.mu (read), so a reader
// never appears on a shard that Retire has taken out of the map.
func (r *shardRef) acquire() {
	r.readers.Add(1)
	r.active.Add(1)
}

func (r *shardRef) release() {
	r.active.Add(-1)
	r.readers.Done()
}

// Open opens a node on its engine: the persisted table if there is one,
// else cfg.Table (persisted now), and a store for every active shard.
func Open(cfg Config) (*Node, error) {
	if cfg.Engine == nil {
		return nil, errors.New("node: open: Config.Engine is nil")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Clock == nil {
		cfg.Clock = cfg.Engine.Clock()
	}
	n := &Node{eng: cfg.Engine, logger: cfg.Logger, clock: cfg.Clock, shards: map[routing.ShardID]*shardRef{},
		retiring: map[routing.ShardID][]*shardRef{}, commitCh: make(chan struct{})}
	t, err := n.loadTable()
	if err != nil {
		return nil, err
	}
	if t == nil {
		if cfg.Table == nil {
			return nil, fmt.Errorf("node: open %s: %w", cfg.Engine.Dir(), ErrNoTable)
		}
		t = cfg.Table
		if err := n.persist(t); err != nil {
			return nil, err
		}
	}
	n.table.Store(t)
	n.durable.Store(t)
	for _, id := range t.ActiveShards() {
		s, err := n.openShard(t, id)
		if err != nil {
			return nil, err
		}
		// A keep-all child whose foreign documents were not all deleted
		// (a crash or close cut its cleanup short) deletes them again.
		if _, err := n.eng.StartForeignCleanup(s); err != nil {
			return nil, fmt.Errorf("node: shard %d: %w", id, err)
		}
	}
	return n, nil
}

func (n *Node) openShard(t *routing.Table, id routing.ShardID) (*storage.Shard, error) {
	o, ok := t.Shard(id)
	if !ok {
		return nil, fmt.Errorf("node: shard %d is not in table v%d", id, t.Version())
	}
	s, err := n.eng.OpenShard(id, t.Keyspace(o.Root), []routing.Span{o.Span})
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.shards[id] = &shardRef{s: s}
	n.mu.Unlock()
	return s, nil
}

// Table returns the published table.
func (n *Node) Table() *routing.Table { return n.table.Load() }

// Engine returns the node's storage engine.
func (n *Node) Engine() *storage.Engine { return n.eng }

// ShardStore returns a registered shard's store.
func (n *Node) ShardStore(id routing.ShardID) (*storage.Shard, bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	r, ok := n.shards[id]
	if !ok {
		return nil, false
	}
	return r.s, true
}

// Store returns a registered shard's store, or an error naming the shard
// when the node has none (callers that must have one use it instead of
// ShardStore's ok).
func (n *Node) Store(id routing.ShardID) (*storage.Shard, error) {
	s, ok := n.ShardStore(id)
	if !ok {
		return nil, fmt.Errorf("node: no store for shard %d (table v%d)", id, n.table.Load().Version())
	}
	return s, nil
}

// AddShard registers a shard store (a child being built). It serves nothing
// until a published table makes it an owner.
func (n *Node) AddShard(s *storage.Shard) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.shards[s.ID()] = &shardRef{s: s}
}

// Close closes the engine. It is idempotent: a second Close returns nil
// (so a deferred Close after an explicit one is harmless).
//
// A published table not yet durable can no longer be made durable: the
// writes waiting for it are answered with ErrClosed (not acknowledged;
// recovery on the next open decides whether they stand), and so is a
// later Commit.
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.mu.Unlock()
	n.writing.Lock() // the table writes under way end; later ones see closed
	n.writing.Unlock()
	n.commitMu.Lock()
	if t := n.table.Load(); n.durable.Load() != t && n.failed.Load() == nil {
		err := fmt.Errorf("%w: table v%d was published but not made durable", ErrClosed, t.Version())
		n.failed.Store(&err)
		close(n.commitCh)
		n.commitCh = make(chan struct{})
	}
	n.commitMu.Unlock()
	return n.eng.Close()
}

// Apply applies a table edit, persists the new table and publishes it.
func (n *Node) Apply(e routing.Edit) (*routing.Table, error) {
	n.publish.Lock()
	defer n.publish.Unlock()
	n.writing.RLock()
	defer n.writing.RUnlock()
	if err := n.editable(); err != nil {
		return nil, err
	}
	t, err := routing.Apply(n.table.Load(), e)
	if err != nil {
		return nil, err
	}
	if err := n.persist(t); err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.table.Store(t)
	n.durable.Store(t)
	n.mu.Unlock()
	n.logger.Info("table published", zap.Uint64("version", uint64(t.Version())), zap.Stringer("edit", e))
	return t, nil
}

// PendingTable is a table published before it is durable; see Publish.
type PendingTable struct {
	n      *Node
	t      *routing.Table
	e      routing.Edit
	staged *storage.StagedFile // set by Stage
	done   bool                // committed or failed
}

// Table returns the published table.
func (p *PendingTable) Table() *routing.Table { return p.t }

// Publish applies a table edit and publishes the new table at once, before
// it is durable (see the durability rule in the package comment). The
// caller must call Commit on the result; until then no other edit can be
// applied.
func (n *Node) Publish(e routing.Edit) (*PendingTable, error) {
	n.publish.Lock()
	if err := n.editable(); err != nil {
		n.publish.Unlock()
		return nil, err
	}
	t, err := routing.Apply(n.table.Load(), e)
	if err != nil {
		n.publish.Unlock()
		return nil, err
	}
	n.mu.Lock()
	n.table.Store(t)
	n.mu.Unlock()
	return &PendingTable{n: n, t: t, e: e}, nil
}

// editable refuses a table edit on a failed or closed node: a closed
// node's data directory may be another node's by now (a reopen), whose
// table file the edit would replace.
func (n *Node) editable() error {
	if err := n.failure(); err != nil {
		return err
	}
	n.mu.RLock()
	closed := n.closed
	n.mu.RUnlock()
	if closed {
		return fmt.Errorf("%w: no table edit", ErrClosed)
	}
	return nil
}

// failure returns the node's sticky failure, if any.
func (n *Node) failure() error {
	if err := n.failed.Load(); err != nil {
		return *err
	}
	return nil
}

// awaitDurable waits until table version v is durable or the node fails.
func (n *Node) awaitDurable(v routing.Version) error {
	for {
		n.commitMu.Lock()
		err, ch := n.failure(), n.commitCh
		durable := n.durable.Load().Version() >= v
		n.commitMu.Unlock()
		if err != nil {
			return err
		}
		if durable {
			return nil
		}
		<-ch
	}
}

// persist writes the table durably and atomically (the commit point of a
// split is this write).
func (n *Node) persist(t *routing.Table) error {
	if err := n.eng.WriteFileAtomic(tableFile, t.Encode()); err != nil {
		return fmt.Errorf("node: persist table v%d: %w", t.Version(), err)
	}
	return nil
}

// loadTable reads the persisted table, or nil if there is none.
func (n *Node) loadTable() (*routing.Table, error) {
	return LoadTable(n.eng)
}

// LoadTable reads the table persisted in an engine's data directory, or nil
// if there is none. A damaged table is an error naming the file.
func LoadTable(eng *storage.Engine) (*routing.Table, error) {
	data, ok, err := eng.ReadFile(tableFile)
	if err != nil || !ok {
		return nil, err
	}
	t, err := routing.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("node: %s: %w", filepath.Join(eng.Dir(), tableFile), err)
	}
	return t, nil
}

// PersistTable writes a table as the engine's published table (recovery
// uses it before any node is open).
func PersistTable(eng *storage.Engine, t *routing.Table) error {
	return (&Node{eng: eng}).persist(t)
}

// WriteRequest is a routed index or delete.
type WriteRequest struct {
	Kind    storage.OpKind
	Shard   routing.ShardID // the shard the router chose
	Version routing.Version // the table version the router used
	Root    routing.ShardID
	Key     routing.Key
	ID      string
	Routing string
	Source  []byte
}

// Write applies a routed write with version fencing and returns its
// sequence number on the shard.
func (n *Node) Write(req WriteRequest) (uint64, error) {
	n.mu.RLock()
	ref, ok := n.shards[req.Shard]
	closed := n.closed
	n.mu.RUnlock()
	if closed {
		return 0, ErrClosed
	}
	if !ok {
		return 0, &StaleRoutingError{Shard: req.Shard, Have: req.Version, Current: n.table.Load()}
	}
	t0 := n.table.Load()
	op := storage.Op{Kind: req.Kind, Root: t0.Keyspace(req.Root), Key: req.Key, ID: req.ID,
		Routing: req.Routing, Source: req.Source, Home: storage.HomeOf(t0, req.Root, req.ID, req.Routing)}
	var wait routing.Version // the table this write needs durable before its acknowledgement
	guard := func() error {
		// Again under the apply lock: a write that waited on a fence may
		// find the node failed meanwhile, and a failed node acknowledges
		// nothing (its table on disk may no longer be the one in memory).
		if err := n.failure(); err != nil {
			return err
		}
		if b := n.block.Load(); b != nil {
			return *b
		}
		t := n.table.Load()
		if int(req.Root) >= t.Settings().Shards || t.Owner(req.Root, req.Key) != req.Shard {
			return &StaleRoutingError{Shard: req.Shard, Have: req.Version, Current: t}
		}
		if d := n.durable.Load(); d != t {
			if int(req.Root) >= d.Settings().Shards || d.Owner(req.Root, req.Key) != req.Shard {
				wait = t.Version()
			}
		}
		return nil
	}
	if err := n.failure(); err != nil {
		return 0, err
	}
	seq, err := ref.s.Write([]storage.Op{op}, guard)
	if errors.Is(err, storage.ErrShardClosed) {
		// Closed by the node's Close, or retired after the request
		// resolved it (a newer table names another owner: stale), or
		// closed under a table that still names it the owner: no retry
		// can succeed, and the store's error says why.
		if e := n.closedErr(err); errors.Is(e, ErrClosed) {
			return 0, e
		}
		t := n.table.Load()
		if int(req.Root) < t.Settings().Shards && t.Owner(req.Root, req.Key) == req.Shard {
			return 0, fmt.Errorf("node: write to shard %d, the owner in table v%d: %w", req.Shard, t.Version(), err)
		}
		return 0, &StaleRoutingError{Shard: req.Shard, Have: req.Version, Current: t}
	}
	if errors.Is(err, storage.ErrSyncFailed) {
		// Applied, and so readable, but not durable: a get that
		// returned it would show a value a power loss then takes back.
		return 0, n.fail(err)
	}
	if err == nil && wait != 0 {
		err = n.awaitDurable(wait)
	}
	return seq, err
}

// fail makes the node fail with cause (every later request answers
// ErrFailed) and wakes the writes that wait for a pending table; a node
// that failed before keeps its first failure, which it returns.
func (n *Node) fail(cause error) error {
	err := fmt.Errorf("%w: %w", ErrFailed, cause)
	n.commitMu.Lock()
	if n.failed.CompareAndSwap(nil, &err) {
		close(n.commitCh)
		n.commitCh = make(chan struct{})
		n.logger.Error("node failed", zap.Error(err))
	}
	n.commitMu.Unlock()
	return n.failure()
}

// GetRequest is a routed get.
type GetRequest struct {
	Shard   routing.ShardID
	Version routing.Version
	Root    routing.ShardID
	Key     routing.Key
	ID      string
	// Routing is the request's routing value ("" for none): a routed get
	// also finds a document of the _id indexed without routing.
	Routing string
}

// Get reads a document from the shard that owns it in the current table:
// the shard's document of the _id, whatever routing value stored it (a
// shard keeps one per _id, as OpenSearch's engine does). The ownership
// check and the read happen under one table version: a publish waits for
// the check, and the shard is not retired while the read holds it.
func (n *Node) Get(req GetRequest) (storage.Doc, bool, error) {
	if err := n.failure(); err != nil {
		return storage.Doc{}, false, err
	}
	n.mu.RLock()
	t := n.table.Load()
	ref, ok := n.shards[req.Shard]
	if n.closed {
		n.mu.RUnlock()
		return storage.Doc{}, false, ErrClosed
	}
	if !ok || int(req.Root) >= t.Settings().Shards || t.Owner(req.Root, req.Key) != req.Shard {
		n.mu.RUnlock()
		return storage.Doc{}, false, &StaleRoutingError{Shard: req.Shard, Have: req.Version, Current: t}
	}
	from := n.readFrom(t, req.Root, req.Key, ref)
	span := leafSpan(t, req.Root, req.Key)
	if from != ref { // the owner in the durable table: its span there
		span = leafSpan(n.durable.Load(), req.Root, req.Key)
	}
	from.acquire()
	n.mu.RUnlock()
	defer from.release()
	d, found, err := from.s.GetID(t.Keyspace(req.Root), span, req.Key, req.ID, storage.HomeOf(t, req.Root, req.ID, req.Routing))
	return d, found, n.closedErr(err)
}

// readFrom returns the store a read of key, routed to ref's shard under
// the published table t, is served from. Until t is durable, a shard that
// only t makes the owner of the key holds writes that are not acknowledged
// (INV-9) and that a failed commit and recovery roll back: returning one
// would be a dirty read, a value that later vanishes. The owner in the
// durable table (a split's parent, a merge's source; Retire keeps it while
// that table names it) holds exactly the acknowledged state of the key
// then, since it refuses writes to the key from the publish on: the read
// is served from it, without waiting for the commit. In the shared
// layout that store is the pending owner's too (one store, the same keys):
// the read sees the writes t admits, which is no dirty read there, since a
// failed commit does not take them back (a rolled-back child's documents
// are its parent's again, storage.Engine.DestroyShard) and storage returns
// none before its WAL sync succeeded (a crash before it would). n.mu must
// be held.
func (n *Node) readFrom(t *routing.Table, root routing.ShardID, key routing.Key, ref *shardRef) *shardRef {
	d := n.durable.Load()
	if d == t || d.Version() >= t.Version() || int(root) >= d.Settings().Shards {
		return ref
	}
	if owner := d.Owner(root, key); owner != ref.s.ID() {
		if r, ok := n.shards[owner]; ok {
			return r
		}
	}
	return ref
}

// closedErr answers a storage error caused by the node's Close (its stores
// closed under a request that resolved them before) as ErrClosed, the
// node's contract, keeping the storage error in the chain.
func (n *Node) closedErr(err error) error {
	if !errors.Is(err, storage.ErrShardClosed) {
		return err
	}
	n.mu.RLock()
	closed := n.closed
	n.mu.RUnlock()
	if closed {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

// Search scans every active shard of the current table, each over its span
// in that table, so every document is returned exactly once even while a
// split publishes; while that table is not durable, a leaf the durable
// table lacks is read from the durable leaves over it (readParts), so no
// write a failed commit rolls back is returned. It returns the version it
// searched. fn must not keep doc.Source after it returns
// (storage.Shard.ScanSpan).
func (n *Node) Search(fn func(routing.ShardID, storage.Doc) error) (routing.Version, error) {
	t, err := n.SearchAt(0, fn)
	if err != nil {
		return 0, err
	}
	return t.Version(), nil
}

// SearchAt is Search returning the table it searched, with at most
// perShard documents from each shard (0 = all of them): a page of hits
// from every shard, as a query-then-fetch of that size asks for.
func (n *Node) SearchAt(perShard int, fn func(routing.ShardID, storage.Doc) error) (*routing.Table, error) {
	return n.SearchChosen(nil, perShard, fn)
}

// SearchChosen is SearchAt over the shards choose names in the table it
// searches (every active shard when choose is nil). A caller that picks
// shards by routing or preference picks them here, from the table the scan
// reads, not from one it loaded before: a split that commits in between
// reports the parent's documents under its children's ids, which a choice
// from the older table does not hold.
func (n *Node) SearchChosen(choose func(*routing.Table) []routing.ShardID, perShard int, fn func(routing.ShardID, storage.Doc) error) (*routing.Table, error) {
	if err := n.failure(); err != nil {
		return nil, err
	}
	n.mu.RLock()
	if n.closed {
		n.mu.RUnlock()
		return nil, ErrClosed
	}
	t := n.table.Load()
	var chosen map[routing.ShardID]bool
	if choose != nil {
		chosen = map[routing.ShardID]bool{}
		for _, id := range choose(t) {
			chosen[id] = true
		}
	}
	// A leaf's hits are reported as its shard's in t, but read from the
	// parts readParts chooses: its owners in the durable table while t is
	// pending (as readFrom does for a Get).
	type leaf struct {
		shard routing.ShardID
		parts []readPart
	}
	var leaves []leaf
	release := func() {
		for _, l := range leaves {
			for _, p := range l.parts {
				p.ref.release()
			}
		}
	}
	for r := range t.Settings().Shards {
		for _, l := range t.Leaves(routing.ShardID(r)) {
			if chosen != nil && !chosen[l.Shard] {
				continue
			}
			parts, err := n.readParts(t, routing.ShardID(r), l)
			if err != nil {
				n.mu.RUnlock()
				release()
				return nil, err
			}
			for _, p := range parts {
				p.ref.acquire()
			}
			leaves = append(leaves, leaf{l.Shard, parts})
		}
	}
	n.mu.RUnlock()
	defer release()
	for _, l := range leaves {
		seen := 0
		for _, p := range l.parts {
			err := p.ref.s.ScanSpan(p.span, func(d storage.Doc) error {
				if seen++; perShard > 0 && seen > perShard {
					return errPageFull
				}
				return fn(l.shard, d)
			})
			if errors.Is(err, errPageFull) {
				break
			}
			if err != nil {
				return nil, n.closedErr(err)
			}
		}
	}
	return t, nil
}

// durableLeaf reports whether shard id is an active leaf of table d.
func durableLeaf(d *routing.Table, id routing.ShardID) bool {
	loc, ok := d.Shard(id)
	return ok && loc.Active
}

// readPart is a span of one store a search reads.
type readPart struct {
	ref  *shardRef
	span routing.Span
}

// readParts returns where a search reads leaf l of root under the published
// table t: the leaf's own store over its span, or, until t is durable and
// if l's shard is not a leaf of the durable table, each durable leaf that
// overlaps l over the overlap, in key order. That shard (a split's child, a
// merge's target) holds writes only t admits, not acknowledged (INV-9) and
// rolled back if the commit fails; the durable owners refuse writes to the
// span from the publish on, so they hold exactly its acknowledged state,
// and Retire keeps them while the durable table names them. n.mu must be
// held.
func (n *Node) readParts(t *routing.Table, root routing.ShardID, l routing.Leaf) ([]readPart, error) {
	own := func(id routing.ShardID) (*shardRef, error) {
		ref, ok := n.shards[id]
		if !ok {
			return nil, fmt.Errorf("node: table v%d names shard %d, which has no store", t.Version(), id)
		}
		return ref, nil
	}
	d := n.durable.Load()
	if d == t || d.Version() >= t.Version() || int(root) >= d.Settings().Shards || durableLeaf(d, l.Shard) {
		ref, err := own(l.Shard)
		if err != nil {
			return nil, err
		}
		return []readPart{{ref, l.Span}}, nil
	}
	var parts []readPart
	for _, dl := range d.Leaves(root) {
		span := routing.Span{Start: max(dl.Span.Start, l.Span.Start), End: min(dl.Span.End, l.Span.End)}
		if span.Start >= span.End {
			continue
		}
		ref, err := own(dl.Shard)
		if err != nil {
			return nil, err
		}
		parts = append(parts, readPart{ref, span})
	}
	return parts, nil
}

// HoldApplyLock runs fn holding shard id's apply lock: no write to it is
// applied meanwhile, and every write applied before is visible. It waits at
// most drain for writes in flight, then fails with storage.ErrLockTimeout.
// It returns how long the lock was held.
func (n *Node) HoldApplyLock(id routing.ShardID, drain time.Duration, fn func() error) (time.Duration, error) {
	s, ok := n.ShardStore(id)
	if !ok {
		return 0, fmt.Errorf("node: hold apply lock: no shard %d", id)
	}
	var held time.Duration
	err := s.Exclusive(drain, func() error {
		start := n.clock.Now()
		defer func() { held = n.clock.Since(start) }()
		return fn()
	})
	return held, err
}

// SetWriteBlock makes every write fail with err (nil lifts the block). The
// block is checked under each shard's apply lock; when SetWriteBlock
// returns, every write admitted before it has been applied, so nothing is
// applied after the block (a resize may then copy the shards).
//
// A split or merge may publish while it drains: the shards of each newer
// table are drained too, until the table it drained is the current one, and
// a shard that a newer table no longer names (retired meanwhile) needs no
// drain: its writes were applied (and carried to the children) or refused
// as stale, and a stale write's retry meets the block on its new shard.
//
// If a shard's writes do not drain within drain, the block is lifted again
// (unless another block replaced it) and the error says which shard: like
// OpenSearch's temporary block when its shards' verification fails, a block
// that failed is not left in force for a caller that was told it failed.
func (n *Node) SetWriteBlock(err error, drain time.Duration) error {
	if err == nil {
		n.block.Store(nil)
		return nil
	}
	b := &err
	n.block.Store(b)
	drained := map[routing.ShardID]bool{}
	for {
		t := n.table.Load()
		for _, id := range t.ActiveShards() {
			if drained[id] {
				continue
			}
			if _, e := n.HoldApplyLock(id, drain, func() error { return nil }); e != nil {
				if !slices.Contains(n.table.Load().ActiveShards(), id) {
					continue // retired since t was read
				}
				n.block.CompareAndSwap(b, nil)
				return fmt.Errorf("node: write block: drain shard %d: %w", id, e)
			}
			drained[id] = true
		}
		if n.table.Load() == t {
			return nil
		}
	}
}

// Retire removes a shard that neither the published table nor the last
// durable one names any more: it waits (at most wait) for readers that
// resolved it under an older table, then destroys its store (per-shard
// layout) or its metadata (shared layout).
//
// If the readers outlast wait, Retire fails and the shard stays retiring:
// no new reader can resolve it, and a later Retire of the same id waits for
// the remaining readers again before destroying anything. A reader never
// sees its store closed under it.
func (n *Node) Retire(id routing.ShardID, wait time.Duration) error {
	// The published table, and the durable one: until a published table is
	// durable, a failed commit and recovery go back to the durable table,
	// in which the shard may still own its documents.
	for _, t := range []*routing.Table{n.table.Load(), n.durable.Load()} {
		if slices.Contains(t.ActiveShards(), id) {
			return fmt.Errorf("node: retire shard %d: it is active in table v%d", id, t.Version())
		}
	}
	n.mu.Lock()
	if ref, ok := n.shards[id]; ok {
		delete(n.shards, id)
		n.retiring[id] = append(n.retiring[id], ref)
	}
	refs := slices.Clone(n.retiring[id])
	n.mu.Unlock()
	if len(refs) > 0 {
		timeout := n.clock.After(wait)
		for _, ref := range refs {
			select {
			case <-ref.drained():
			case <-timeout:
				return fmt.Errorf("node: retire shard %d: after %v: %w", id, wait, ErrReadersRemain)
			}
		}
	}
	for _, ref := range refs {
		if k := ref.active.Load(); k != 0 {
			return invariants.AssertionFailedf("node: retire shard %d: %d readers hold it after the wait", id, k)
		}
	}
	if err := n.eng.DestroyShard(id); err != nil {
		return err
	}
	n.mu.Lock()
	n.retiring[id] = slices.DeleteFunc(n.retiring[id], func(r *shardRef) bool { return slices.Contains(refs, r) })
	if len(n.retiring[id]) == 0 {
		delete(n.retiring, id)
	}
	n.mu.Unlock()
	return nil
}
