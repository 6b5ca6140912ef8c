package node

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// Backend is what a router talks to: a node, or a test double.
type Backend interface {
	Write(WriteRequest) (uint64, error)
	Get(GetRequest) (storage.Doc, bool, error)
}

// RouterConfig bounds a router's retries.
type RouterConfig struct {
	// MaxRetries is the most stale-routing retries of one request (default
	// 8; negative = none: the request is sent once).
	MaxRetries int
	// MaxWait is the most total time one request may take (default 30 s,
	// Elasticsearch's GET retry bound).
	MaxWait time.Duration
	// Clock times the bound and the back-off; nil = the wall clock.
	Clock clock.Clock
}

// ErrRetriesExhausted is returned when a request stayed stale past the
// router's bounds; it wraps the last stale-routing error.
var ErrRetriesExhausted = errors.New("node: routing retries exhausted")

// Router is a coordinator: it caches a routing table, routes requests with
// it, and on *StaleRoutingError adopts the newer table and retries, within
// bounded retries and time. A Router is safe for concurrent use.
type Router struct {
	backend Backend
	cfg     RouterConfig
	table   atomic.Pointer[routing.Table]
	retries atomic.Int64 // stale-routing retries so far
}

// NewRouter returns a router that starts from table t (possibly stale).
func NewRouter(b Backend, t *routing.Table, cfg RouterConfig) *Router {
	switch {
	case cfg.MaxRetries == 0:
		cfg.MaxRetries = 8
	case cfg.MaxRetries < 0:
		cfg.MaxRetries = 0
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = 30 * time.Second
	}
	cfg.Clock = clock.Or(cfg.Clock)
	r := &Router{backend: b, cfg: cfg}
	r.table.Store(t)
	return r
}

// Table returns the router's cached table.
func (r *Router) Table() *routing.Table { return r.table.Load() }

// Retries returns how many stale-routing retries the router has made.
func (r *Router) Retries() int64 { return r.retries.Load() }

// adopt caches t if it is newer than the cached table.
func (r *Router) adopt(t *routing.Table) {
	for {
		cur := r.table.Load()
		if cur != nil && cur.Version() >= t.Version() {
			return
		}
		if r.table.CompareAndSwap(cur, t) {
			return
		}
	}
}

// Result describes a completed request.
type Result struct {
	Seq     uint64          // the write's sequence number on its shard
	Shard   routing.ShardID // the shard that served it
	Version routing.Version // the table version it was routed with
	Retries int             // stale-routing retries it took
}

// Index stores a document.
func (r *Router) Index(id, routingValue string, source []byte) (Result, error) {
	return r.write(storage.OpIndex, id, routingValue, source)
}

// Delete removes a document.
func (r *Router) Delete(id, routingValue string) (Result, error) {
	return r.write(storage.OpDelete, id, routingValue, nil)
}

func (r *Router) write(kind storage.OpKind, id, routingValue string, source []byte) (Result, error) {
	if err := routing.ValidateID(id); err != nil {
		return Result{}, err
	}
	var res Result
	err := r.retry(id, routingValue, func(t *routing.Table, p routing.Placement, shard routing.ShardID) error {
		seq, err := r.backend.Write(WriteRequest{Kind: kind, Shard: shard, Version: t.Version(), Root: p.Root,
			Key: t.KeyOf(p), ID: id, Routing: routingValue, Source: source})
		res.Seq, res.Shard, res.Version = seq, shard, t.Version()
		return err
	}, &res.Retries)
	return res, err
}

// Get reads a document.
func (r *Router) Get(id, routingValue string) (storage.Doc, bool, error) {
	var doc storage.Doc
	var found bool
	var retries int
	err := r.retry(id, routingValue, func(t *routing.Table, p routing.Placement, shard routing.ShardID) error {
		var err error
		doc, found, err = r.backend.Get(GetRequest{Shard: shard, Version: t.Version(), Root: p.Root, Key: t.KeyOf(p), ID: id, Routing: routingValue})
		return err
	}, &retries)
	return doc, found, err
}

// retry routes with the cached table and retries on stale routing.
func (r *Router) retry(id, routingValue string, send func(*routing.Table, routing.Placement, routing.ShardID) error, retries *int) error {
	start := r.cfg.Clock.Now()
	var last error
	for attempt := 0; attempt <= r.cfg.MaxRetries; attempt++ {
		t := r.table.Load()
		p, shard := t.Route(id, routingValue)
		err := send(t, p, shard)
		var stale *StaleRoutingError
		if !errors.As(err, &stale) {
			return err
		}
		last = err
		*retries = attempt + 1
		r.retries.Add(1)
		if stale.Current.Version() > t.Version() {
			r.adopt(stale.Current)
		} else {
			// The node's table is not newer than ours: a shard is being
			// registered or retired. Back off briefly before retrying.
			r.cfg.Clock.Sleep(time.Duration(attempt+1) * 100 * time.Microsecond)
		}
		if r.cfg.Clock.Since(start) > r.cfg.MaxWait {
			break
		}
	}
	return fmt.Errorf("%w after %d attempts in %v: %w", ErrRetriesExhausted, *retries, r.cfg.Clock.Since(start).Round(time.Millisecond), last)
}
