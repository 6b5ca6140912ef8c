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
// file replaced atomically; each index's documents live in their own data
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
	"errors"
	"fmt"
	"os"
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
	Dir        string // the data directory
	NodeName   string // default "shardsplit-0"
	Logger     *zap.Logger
	Durability storage.Durability // default request durability
	// WriteWait bounds how long one write may keep retrying while the
	// routing table changes under it (default 30 s).
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

const stateFile = "_state/cluster.json"

// Service owns the indices of one data directory.
type Service struct {
	cfg Config
	log *zap.Logger

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
	router  *node.Router
	locks   [64]sync.Mutex
	// deletes are the tombstones of recent deletes (index.gc_deletes).
	deletes tombstones
	// routingRequired is the mappings' _routing.required: a document
	// operation without a routing value is refused (the mappings do not
	// change after the index is made).
	routingRequired bool

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
	s := &Service{cfg: cfg, log: cfg.Logger, indices: map[string]*Index{}, started: time.Now()}
	s.tasks.init()
	if cfg.Cluster != nil {
		s.cl = &clusterMode{p: cfg.Cluster, name: cfg.NodeName}
		s.st = &state{Indices: map[string]*IndexMeta{}}
		s.syncCluster()
		return s, nil
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "_state"), 0o755); err != nil {
		return nil, fmt.Errorf("service: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "indices"), 0o755); err != nil {
		return nil, fmt.Errorf("service: %w", err)
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
	data, err := os.ReadFile(filepath.Join(s.cfg.Dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		// A new data directory. One that holds index data without its
		// metadata is not new: fresh metadata would name none of it and
		// removeOrphans would delete it all.
		entries, rerr := os.ReadDir(filepath.Join(s.cfg.Dir, "indices"))
		if rerr != nil {
			return nil, fmt.Errorf("service: %w", rerr)
		}
		if len(entries) > 0 {
			return nil, fmt.Errorf("service: metadata %s is missing but %s holds %d index directories (%s, ...); refusing to open, which would delete them",
				filepath.Join(s.cfg.Dir, stateFile), filepath.Join(s.cfg.Dir, "indices"), len(entries), entries[0].Name())
		}
		st := &state{ClusterUUID: newUUID(), NodeID: newUUID()[:22], Indices: map[string]*IndexMeta{}}
		return st, s.persist(st)
	}
	if err != nil {
		return nil, fmt.Errorf("service: %w", err)
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("service: damaged metadata %s: %w", filepath.Join(s.cfg.Dir, stateFile), err)
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
	entries, err := os.ReadDir(filepath.Join(s.cfg.Dir, "indices"))
	if err != nil {
		return fmt.Errorf("service: %w", err)
	}
	for _, e := range entries {
		if !known[e.Name()] {
			s.log.Info("removing orphan index directory", zap.String("dir", e.Name()))
			if err := os.RemoveAll(filepath.Join(s.cfg.Dir, "indices", e.Name())); err != nil {
				return fmt.Errorf("service: %w", err)
			}
		}
	}
	return nil
}

// persist writes st atomically: temporary file, fsync, rename, directory
// fsync.
func (s *Service) persist(st *state) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(s.cfg.Dir, stateFile), data)
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("service: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("service: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("service: sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("service: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("service: %w", err)
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("service: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("service: sync %s: %w", dir, err)
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

// openIndex opens an index's data directory through recovery; initial is
// the table of a new index (nil for an existing one).
func (s *Service) openIndex(m *IndexMeta, initial *routing.Table) (*Index, error) {
	dir := s.indexDir(m.UUID)
	if initial == nil {
		// An existing index: its directory was made before its metadata
		// was written. Without it recovery would make a new, empty index
		// in its place, and every acknowledged document would be gone
		// without a word.
		if _, err := os.Stat(dir); err != nil {
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
	n, j, rep, err := recovery.Open(storage.Options{Dir: dir, Durability: s.cfg.Durability, Logger: s.log}, initial, s.log.With(zap.String("index", m.Name)))
	if err != nil {
		return nil, err
	}
	for _, d := range rep.Decisions {
		if d.Kind == splitter.KindMerge {
			s.log.Info("recovered merge", zap.String("index", m.Name), zap.Uint32("target", uint32(d.Target)), zap.Any("sources", d.Sources),
				zap.Stringer("action", d.Action), zap.String("why", d.Why))
			continue
		}
		s.log.Info("recovered split", zap.String("index", m.Name), zap.Uint32("parent", uint32(d.Parent)),
			zap.Stringer("action", d.Action), zap.String("why", d.Why))
	}
	ix := &Index{svc: s, name: m.Name, uuid: m.UUID, dir: dir, node: n, journal: j, routingRequired: routingRequiredBy(m.Mappings)}
	ix.router = node.NewRouter(n, n.Table(), node.RouterConfig{MaxRetries: 64, MaxWait: s.cfg.WriteWait})
	if err := ix.applyBlocks(m); err != nil {
		_ = n.Close()
		return nil, err
	}
	return ix, nil
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
	ix := &Index{svc: s, name: m.Name, uuid: m.UUID, dir: s.indexDir(m.UUID), node: n, journal: j, routingRequired: routingRequiredBy(m.Mappings)}
	ix.router = node.NewRouter(n, n.Table(), node.RouterConfig{MaxRetries: 64, MaxWait: s.cfg.WriteWait})
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
