// Package service owns every index of one data directory and offers what an
// OpenSearch-compatible API needs: create, open (always through recovery),
// delete, settings and blocks, aliases, routed document writes and reads,
// searches, OpenSearch's new-index resize (_split, _shrink, _clone, through
// package baseline), the in-place split of one shard and the in-place merge
// of adjacent shards (through package splitter), each run as a cancellable
// task, one per index at a time.
//
// It exists because node serves one index and baseline.Cluster was a world
// of its own: here both strategies act on the same indices, blocks and
// aliases. Index metadata (settings, mappings, aliases, blocks) is one JSON
// file replaced atomically (storage.WriteFileAtomicIn, on the data
// directory's filesystem, Config.FS); each index's documents live in their own data
// directory named by the index's uuid, opened with recovery.Open, so an
// interrupted split or merge is rolled back or forward before the index
// serves.
//
// service sits above node, splitter, baseline and recovery: it imports
// routing, storage, node, splitter, baseline and recovery.
//
// Concurrency: every method is safe for concurrent use. Metadata is copied
// on write under the service's lock; writes to one document id are
// serialised by a striped lock (for _version and _create).
package service

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/clusternode"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/recovery"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

// Version is the OpenSearch version the service reports.
const Version = "3.7.0"

// Config configures a Service.
type Config struct {
	Dir string // the data directory
	// FS is the filesystem the data directory lives on (default: the
	// operating system's); every file of the service and of its indices
	// goes through it, so a crash test reaches each one.
	FS         storage.FS
	NodeName   string // default "shardsplit-0"
	Logger     *zap.Logger
	Durability storage.Durability // default request durability
	// WriteWait bounds how long one request to an index (a write, a
	// read) may keep retrying while the routing table changes under it
	// (default 30 s): the index's router retries it, on its node's clock.
	WriteWait time.Duration
	// Cluster, if set, makes the service answer for the cluster this
	// node's process belongs to (cluster.go); Dir is then unused.
	Cluster *clusternode.Process
	// SplitHook, if set, runs before each intent of every in-place split
	// and merge (tests use it to hold one in a phase).
	SplitHook func(index string, phase splitter.Phase, next splitter.Intent)
}

// IndexMeta is what the service persists about an index.
type IndexMeta struct {
	Name     string               `json:"name"`
	UUID     string               `json:"uuid"`
	Created  int64                `json:"creation_date"`
	Settings map[string]string    `json:"settings"` // flat "index.*" keys
	Mappings json.RawMessage      `json:"mappings,omitempty"`
	Aliases  map[string]AliasMeta `json:"aliases,omitempty"`
}

// AliasMeta is one alias of an index.
type AliasMeta struct {
	IndexRouting  string          `json:"index_routing,omitempty"`
	SearchRouting string          `json:"search_routing,omitempty"`
	IsWriteIndex  *bool           `json:"is_write_index,omitempty"`
	Filter        json.RawMessage `json:"filter,omitempty"`
}

// state is the persisted cluster metadata; it is never modified once
// installed (copy on write).
type state struct {
	ClusterUUID string                `json:"cluster_uuid"`
	NodeID      string                `json:"node_id"`
	Indices     map[string]*IndexMeta `json:"indices"`
	// LastTask is the number of the last task this node started, kept
	// across restarts so that a task id ("<node id>:<number>") names one
	// task only: a client polling a task from before a restart never reads
	// another's result.
	LastTask int64 `json:"last_task,omitempty"`
}

func (st *state) clone() *state {
	b, _ := json.Marshal(st)
	var c state
	_ = json.Unmarshal(b, &c)
	if c.Indices == nil {
		c.Indices = map[string]*IndexMeta{}
	}
	return &c
}

// The metadata file, stateFile in stateDir of the data directory.
const (
	stateDir  = "_state"
	stateFile = "cluster.json"
)

// Service owns the indices of one data directory.
type Service struct {
	cfg Config
	log *zap.Logger
	fs  storage.FS

	mu      sync.RWMutex
	st      *state
	indices map[string]*Index // by name
	closed  bool
	started time.Time

	tasks    tasks
	resizeMu sync.Mutex // one resize at a time

	cl *clusterMode // set in cluster mode
}

// Index is one open index.
type Index struct {
	svc     *Service
	name    string
	uuid    string
	dir     string
	node    *node.Node
	journal *splitter.Journal
	driver  *splitter.Driver // runs the index's in-place splits and merges, one at a time
	router  *node.Router
	locks   [64]sync.Mutex
	// deletes are the tombstones of recent deletes (index.gc_deletes).
	deletes tombstones
	// routingRequired is the mappings' _routing.required: a document
	// operation without a routing value is refused (the mappings do not
	// change after the index is made).
	routingRequired bool
	// partitionedUnrequired is a partitioned index (routing_partition_size
	// > 1) whose mappings do not require routing: every document write is
	// refused (partitionedRoutingError).
	partitionedUnrequired bool

	splitMu sync.Mutex // guards split and closing
	split   *Task      // the running in-place split or merge, if any
	// closing is set once the index is being closed (the service stops) or
	// deleted: no split or merge may start on it from then on, so none is
	// left running on a closed node.
	closing bool
}

// Open opens (or creates) the data directory and every index in it, each
// through recovery.
func Open(cfg Config) (*Service, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.NodeName == "" {
		cfg.NodeName = "shardsplit-0"
	}
	if cfg.Durability == 0 {
		cfg.Durability = storage.DurabilityRequest
	}
	if cfg.WriteWait == 0 {
		cfg.WriteWait = 30 * time.Second
	}
	if cfg.FS == nil {
		cfg.FS = storage.DefaultFS()
	}
	s := &Service{cfg: cfg, log: cfg.Logger, fs: cfg.FS, indices: map[string]*Index{}, started: time.Now()}
	s.tasks.init()
	if cfg.Cluster != nil {
		s.cl = &clusterMode{p: cfg.Cluster, name: cfg.NodeName}
		s.st = &state{Indices: map[string]*IndexMeta{}}
		s.syncCluster()
		return s, nil
	}
	for _, dir := range []string{filepath.Join(cfg.Dir, stateDir), filepath.Join(cfg.Dir, "indices")} {
		if err := storage.MkdirAllDurable(s.fs, dir); err != nil {
			return nil, fmt.Errorf("service: %w", err)
		}
	}
	st, err := s.load()
	if err != nil {
		return nil, err
	}
	s.st = st
	if err := s.removeOrphans(); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(st.Indices))
	for name := range st.Indices {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		ix, err := s.openIndex(st.Indices[name], nil)
		if err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("service: open index %s: %w", name, err)
		}
		s.indices[name] = ix
	}
	return s, nil
}

func (s *Service) load() (*state, error) {
	data, ok, err := storage.ReadFileIn(s.fs, filepath.Join(s.cfg.Dir, stateDir), stateFile)
	if err != nil {
		return nil, fmt.Errorf("service: %w", err)
	}
	if !ok {
		// A new data directory. One that holds index data without its
		// metadata is not new: fresh metadata would name none of it and
		// removeOrphans would delete it all.
		entries, err := s.indexDirs()
		if err != nil {
			return nil, err
		}
		if len(entries) > 0 {
			return nil, fmt.Errorf("service: metadata %s is missing but %s holds %d index directories (%s, ...); refusing to open, which would delete them",
				filepath.Join(s.cfg.Dir, stateDir, stateFile), filepath.Join(s.cfg.Dir, "indices"), len(entries), entries[0])
		}
		st := &state{ClusterUUID: newUUID(), NodeID: newUUID()[:22], Indices: map[string]*IndexMeta{}}
		return st, s.persist(st)
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("service: damaged metadata %s: %w", filepath.Join(s.cfg.Dir, stateDir, stateFile), err)
	}
	if st.Indices == nil {
		st.Indices = map[string]*IndexMeta{}
	}
	return &st, nil
}

// removeOrphans deletes index directories the metadata does not name: an
// index whose creation or resize crashed before its metadata was written,
// or whose deletion crashed after.
func (s *Service) removeOrphans() error {
	known := map[string]bool{}
	for _, m := range s.st.Indices {
		known[m.UUID] = true
	}
	entries, err := s.indexDirs()
	if err != nil {
		return err
	}
	for _, name := range entries {
		if !known[name] {
			s.log.Info("removing orphan index directory", zap.String("dir", name))
			if err := s.removeIndexDir(filepath.Join(s.cfg.Dir, "indices", name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// indexDirs returns the names in the indices directory, sorted.
func (s *Service) indexDirs() ([]string, error) {
	names, err := s.fs.List(filepath.Join(s.cfg.Dir, "indices"))
	if err != nil {
		return nil, fmt.Errorf("service: %w", err)
	}
	sort.Strings(names)
	return names, nil
}

// removeIndexDir removes an index's data directory and everything in it.
func (s *Service) removeIndexDir(dir string) error {
	if err := s.fs.RemoveAll(dir); err != nil {
		return fmt.Errorf("service: remove %s: %w", dir, err)
	}
	return nil
}

// persist writes st atomically (storage.WriteFileAtomicIn): a crash
// leaves the old metadata or the new, never a mix.
func (s *Service) persist(st *state) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := storage.WriteFileAtomicIn(s.fs, filepath.Join(s.cfg.Dir, stateDir), stateFile, data); err != nil {
		return fmt.Errorf("service: %w", err)
	}
	return nil
}

// update applies fn to a copy of the metadata, persists it and installs it.
// It must be called with s.mu held for writing. If fn or the write fails,
// nothing changes.
func (s *Service) update(fn func(st *state) error) error {
	st := s.st.clone()
	if err := fn(st); err != nil {
		return err
	}
	if err := s.persist(st); err != nil {
		return err
	}
	s.st = st
	return nil
}

func (s *Service) indexDir(uuid string) string { return filepath.Join(s.cfg.Dir, "indices", uuid) }

// storageOptions are the storage options of the index data directory dir.
func (s *Service) storageOptions(dir string) storage.Options {
	return storage.Options{Dir: dir, FS: s.fs, Durability: s.cfg.Durability, Logger: s.log}
}

// openIndex opens an index's data directory through recovery; initial is
// the table of a new index (nil for an existing one).
func (s *Service) openIndex(m *IndexMeta, initial *routing.Table) (*Index, error) {
	dir := s.indexDir(m.UUID)
	if initial == nil {
		// An existing index: its directory was made before its metadata
		// was written. Without it recovery would make a new, empty index
		// in its place, and every acknowledged document would be gone
		// without a word.
		if _, err := s.fs.Stat(dir); err != nil {
			return nil, fmt.Errorf("the metadata names index %s (uuid %s) but its data directory %s is unreadable; refusing to open it empty: %w",
				m.Name, m.UUID, dir, err)
		}
		// recovery.Open needs a table for a directory without one; an
		// existing index always has one, so this is only a fallback.
		t, err := tableFor(m)
		if err != nil {
			return nil, err
		}
		initial = t
	}
	n, j, rep, err := recovery.Open(s.storageOptions(dir), initial, s.log.With(zap.String("index", m.Name)))
	if err != nil {
		return nil, err
	}
	for _, d := range rep.Decisions {
		s.log.Info("recovered "+d.Kind.String(), zap.String("index", m.Name), zap.Any("sources", d.Sources), zap.Any("targets", d.Targets),
			zap.Stringer("action", d.Action), zap.String("why", d.Why))
	}
	ix := &Index{svc: s, name: m.Name, uuid: m.UUID, dir: dir, node: n, journal: j, routingRequired: routingRequiredBy(m.Mappings),
		partitionedUnrequired: partitionedUnrequired(m)}
	ix.driver = splitter.NewDriver(n, s.driverConfig(ix))
	ix.router = s.newRouter(n)
	if err := ix.applyBlocks(m); err != nil {
		_ = n.Close()
		return nil, err
	}
	return ix, nil
}

// newRouter is the router of an index's requests, their one retry loop:
// a request routed with a table that changed under it is retried at the
// owner the newer table names, for as long as WriteWait allows (the number
// of attempts is not what bounds it), timed on the node's clock.
func (s *Service) newRouter(n *node.Node) *node.Router {
	return node.NewRouter(n, n.Table(), node.RouterConfig{MaxRetries: math.MaxInt32, MaxWait: s.cfg.WriteWait, Clock: n.Clock()})
}

// openBuilt opens an index whose fresh directory was just built on eng (a
// resize target): no journal exists, so there is nothing to recover.
func (s *Service) openBuilt(m *IndexMeta, eng *storage.Engine, tab *routing.Table) (*Index, error) {
	n, err := node.Open(node.Config{Engine: eng, Table: tab, Logger: s.log.With(zap.String("index", m.Name))})
	if err != nil {
		_ = eng.Close()
		return nil, err
	}
	j, err := splitter.OpenJournal(eng)
	if err != nil {
		_ = n.Close()
		return nil, err
	}
	if len(j.Records()) != 0 {
		_ = n.Close()
		return nil, fmt.Errorf("service: new index %s has a split journal", m.Name)
	}
	ix := &Index{svc: s, name: m.Name, uuid: m.UUID, dir: s.indexDir(m.UUID), node: n, journal: j, routingRequired: routingRequiredBy(m.Mappings),
		partitionedUnrequired: partitionedUnrequired(m)}
	ix.driver = splitter.NewDriver(n, s.driverConfig(ix))
	ix.router = s.newRouter(n)
	if err := ix.applyBlocks(m); err != nil {
		_ = n.Close()
		return nil, err
	}
	return ix, nil
}

// Close stops every split task (an unfinished split is left to recovery)
// and closes every index.
func (s *Service) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	indices := s.indices
	s.indices = map[string]*Index{}
	s.mu.Unlock()
	// Each index first refuses new operations and halts its own: a split
	// request taking its reservation holds the index's splitMu and has not
	// registered its task yet, so stopAll alone would miss it.
	for _, ix := range indices {
		ix.endOperations(true)
	}
	s.tasks.stopAll()
	var first error
	for _, ix := range indices {
		if err := ix.node.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// ClusterUUID returns the cluster's uuid.
func (s *Service) ClusterUUID() string {
	s.syncCluster()
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.st.ClusterUUID
}

// NodeID returns the node's id.
func (s *Service) NodeID() string {
	s.syncCluster()
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.st.NodeID
}

// NodeName returns the node's name.
func (s *Service) NodeName() string { return s.cfg.NodeName }

// Started returns when the service was opened.
func (s *Service) Started() time.Time { return s.started }

// Dir returns the data directory.
func (s *Service) Dir() string { return s.cfg.Dir }

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// NewDocID returns a new random document id (20 characters, URL-safe).
func NewDocID() string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	var b [20]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = alphabet[b[i]&63]
	}
	return string(b[:])
}
