// Package baseline reproduces what OpenSearch offers today to change an
// index's shard count: the new-index _split, _shrink and _clone, with the
// index write block they require and the alias swap users do around them,
// on the same storage the in-place split uses, so that comparisons are fair.
//
// A Cluster holds named indices (each a node.Node with its own data
// directory) and aliases. Writes through an alias to a write-blocked index
// fail with OpenSearch's cluster_block_exception; AliasWriter retries them
// with backoff, as a client would.
//
// baseline sits beside splitter: it imports routing, storage and node.
package baseline

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// BlockError is OpenSearch's cluster_block_exception for a write to an
// index with index.blocks.write.
type BlockError struct{ Index string }

func (e *BlockError) Error() string {
	return fmt.Sprintf("index [%s] blocked by: [FORBIDDEN/8/index write (api)];", e.Index)
}

// Type is the exception type OpenSearch reports.
func (e *BlockError) Type() string { return "cluster_block_exception" }

// Index is one index of the cluster.
type Index struct {
	Name       string
	Node       *node.Node
	writeBlock atomic.Bool
	dir        string
}

// WriteBlocked reports index.blocks.write.
func (ix *Index) WriteBlocked() bool { return ix.writeBlock.Load() }

// Settings returns the index's routing settings.
func (ix *Index) Settings() routing.Settings { return ix.Node.Table().Settings() }

// Config configures a Cluster.
type Config struct {
	Dir        string // indices live in Dir/<name>
	Durability storage.Durability
	Logger     *zap.Logger
}

// Cluster is a one-node cluster of indices and aliases. Safe for concurrent
// use.
type Cluster struct {
	cfg     Config
	mu      sync.RWMutex
	indices map[string]*Index
	aliases map[string]string
	// building holds the target names of resizes in progress: like
	// OpenSearch, which puts the target in the cluster state before it
	// copies anything, the name is taken (another index of that name
	// would share the target's data directory).
	building map[string]bool
}

// taken reports whether an index of that name exists or is being built.
// c.mu must be held.
func (c *Cluster) taken(name string) bool {
	_, ok := c.indices[name]
	return ok || c.building[name]
}

func alreadyExists(name string) error {
	return &routing.Error{Exception: routing.ResourceAlreadyExists, Message: fmt.Sprintf("index [%s] already exists", name)}
}

// NewCluster returns an empty cluster.
func NewCluster(cfg Config) *Cluster {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Durability == 0 {
		cfg.Durability = storage.DurabilityRequest
	}
	return &Cluster{cfg: cfg, indices: map[string]*Index{}, aliases: map[string]string{}, building: map[string]bool{}}
}

// checkName refuses an index name that is not one directory name under the
// cluster's Dir (DeleteIndex removes the index's directory tree), with
// OpenSearch's invalid_index_name messages for the rules that guarantee it.
// (The service applies all of OpenSearch's name rules; the experiments'
// cluster needs only these.)
func checkName(name string) error {
	bad := func(format string, args ...any) error {
		return &routing.Error{Exception: routing.IllegalArgument, Message: fmt.Sprintf(format, args...)}
	}
	switch {
	case name == "":
		return bad("Invalid index name [%s], must not be empty", name)
	case strings.ContainsAny(name, "\\/*?\"<>| ,"):
		return bad("Invalid index name [%s], must not contain the following characters [ , \", *, \\, <, |, ,, >, /, ?]", name)
	case name == "." || name == "..":
		return bad("Invalid index name [%s], must not be '.' or '..'", name)
	}
	return nil
}

// IndexDir is where an index's data lives.
func (c *Cluster) IndexDir(name string) string { return filepath.Join(c.cfg.Dir, name) }

// CreateIndex creates a partition-mode index with the given settings.
func (c *Cluster) CreateIndex(name string, s routing.Settings) (*Index, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.taken(name) {
		return nil, alreadyExists(name)
	}
	t, err := routing.NewTable(routing.ModePartition, s)
	if err != nil {
		return nil, err
	}
	return c.openLocked(name, t)
}

// OpenIndex opens an index whose data directory already exists (a cloned
// dataset).
func (c *Cluster) OpenIndex(name string) (*Index, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.taken(name) {
		return nil, alreadyExists(name)
	}
	return c.openLocked(name, nil)
}

func (c *Cluster) openLocked(name string, t *routing.Table) (*Index, error) {
	dir := c.IndexDir(name)
	eng, err := storage.Open(storage.Options{Dir: dir, Durability: c.cfg.Durability, Logger: c.cfg.Logger})
	if err != nil {
		return nil, err
	}
	n, err := node.Open(node.Config{Engine: eng, Table: t, Logger: c.cfg.Logger.With(zap.String("index", name))})
	if err != nil {
		_ = eng.Close()
		return nil, err
	}
	if n.Table().Mode() != routing.ModePartition {
		_ = n.Close()
		return nil, fmt.Errorf("baseline: index %s is in %s mode; new-index resize needs partition-mode keys", name, n.Table().Mode())
	}
	ix := &Index{Name: name, Node: n, dir: dir}
	c.indices[name] = ix
	return ix, nil
}

// Index returns an index by name.
func (c *Cluster) Index(name string) (*Index, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	ix, ok := c.indices[name]
	return ix, ok
}

// SetWriteBlock sets or clears index.blocks.write.
func (c *Cluster) SetWriteBlock(name string, blocked bool) error {
	ix, ok := c.Index(name)
	if !ok {
		return &routing.Error{Exception: routing.IndexNotFound, Message: fmt.Sprintf("no such index [%s]", name)}
	}
	if !blocked {
		ix.writeBlock.Store(false)
		return ix.Node.SetWriteBlock(nil, 0)
	}
	// Once this returns, no write is applied to the index any more. Only
	// then does the index say it is blocked: a resize validated against the
	// flag before the drain ended would link shards still taking writes.
	// A block whose drain failed is lifted by the node.
	if err := ix.Node.SetWriteBlock(&BlockError{Index: name}, time.Minute); err != nil {
		return err
	}
	ix.writeBlock.Store(true)
	return nil
}

// PutAlias points alias at an index, atomically replacing what it pointed at.
func (c *Cluster) PutAlias(alias, index string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.indices[index]; !ok {
		return &routing.Error{Exception: routing.IndexNotFound, Message: fmt.Sprintf("no such index [%s]", index)}
	}
	c.aliases[alias] = index
	return nil
}

// Resolve returns the index an alias (or index name) points at.
func (c *Cluster) Resolve(name string) (*Index, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if target, ok := c.aliases[name]; ok {
		name = target
	}
	ix, ok := c.indices[name]
	if !ok {
		return nil, &routing.Error{Exception: routing.IndexNotFound, Message: fmt.Sprintf("no such index [%s]", name)}
	}
	return ix, nil
}

// DeleteIndex closes an index and removes its data.
func (c *Cluster) DeleteIndex(name string) error {
	c.mu.Lock()
	ix, ok := c.indices[name]
	delete(c.indices, name)
	c.mu.Unlock()
	if !ok {
		return &routing.Error{Exception: routing.IndexNotFound, Message: fmt.Sprintf("no such index [%s]", name)}
	}
	if err := ix.Node.Close(); err != nil {
		return err
	}
	return os.RemoveAll(ix.dir)
}

// Close closes every index.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first error
	for name, ix := range c.indices {
		if err := ix.Node.Close(); err != nil && first == nil {
			first = err
		}
		delete(c.indices, name)
	}
	return first
}

// DiskUsage sums the unique bytes of every index (each index is its own
// directory tree; hard links between indices are counted once).
func (c *Cluster) DiskUsage() int64 {
	u, err := storage.DirUsage(c.cfg.Dir)
	if err != nil {
		return 0
	}
	return u.Unique
}

// BytesWritten sums what every open index's engine wrote.
func (c *Cluster) BytesWritten() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var n uint64
	for _, ix := range c.indices {
		n += ix.Node.Engine().BytesWritten()
	}
	return n
}

// AliasWriter writes through an alias as a client would: route with the
// index's table, retry stale routing (the router does) and write blocks
// (with backoff) until MaxWait.
type AliasWriter struct {
	c       *Cluster
	alias   string
	MaxWait time.Duration
	// routers holds a router per index (not per name: an index deleted
	// and created again under its name is another node).
	routers sync.Map // *Index -> *node.Router
}

// NewAliasWriter returns a writer for alias.
func (c *Cluster) NewAliasWriter(alias string) *AliasWriter {
	return &AliasWriter{c: c, alias: alias, MaxWait: 5 * time.Minute}
}

func (w *AliasWriter) router(ix *Index) *node.Router {
	if r, ok := w.routers.Load(ix); ok {
		return r.(*node.Router)
	}
	r, _ := w.routers.LoadOrStore(ix, node.NewRouter(ix.Node, ix.Node.Table(), node.RouterConfig{MaxRetries: 16}))
	return r.(*node.Router)
}

// ErrBlockedTooLong is returned when an index stayed write-blocked past
// MaxWait.
var ErrBlockedTooLong = errors.New("baseline: write blocked past the writer's bound")

// Write indexes (or deletes) through the alias; it returns the number of
// retries it made.
func (w *AliasWriter) Write(id, routingValue string, source []byte, del bool) (int, error) {
	start := time.Now()
	backoff := time.Millisecond
	for retries := 0; ; retries++ {
		ix, err := w.c.Resolve(w.alias)
		if err != nil {
			return retries, err
		}
		r := w.router(ix)
		var res node.Result
		if del {
			res, err = r.Delete(id, routingValue)
		} else {
			res, err = r.Index(id, routingValue, source)
		}
		var blocked *BlockError
		switch {
		case errors.As(err, &blocked):
			// What a client sees during a resize: back off and retry.
			if time.Since(start) > w.MaxWait {
				return retries, fmt.Errorf("%w: %w", ErrBlockedTooLong, err)
			}
			time.Sleep(backoff)
			backoff = min(2*backoff, 50*time.Millisecond)
			continue
		case errors.Is(err, node.ErrClosed): // the index was deleted under us: re-resolve
			w.routers.Delete(ix)
			if time.Since(start) > w.MaxWait {
				return retries, err
			}
			continue
		}
		return retries + res.Retries, err
	}
}
