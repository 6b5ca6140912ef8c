package clusternode

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
	"github.com/shardsplit/shardsplit/transport"
)

// Errors a client request ends with.
var (
	// ErrTimeout: the request could not reach an active primary within
	// its time (OpenSearch's UnavailableShardsException, 503).
	ErrTimeout = errors.New("clusternode: timed out waiting for an active primary")
)

// IndexNotFoundError names an index the cluster does not have.
type IndexNotFoundError struct{ Index string }

func (e *IndexNotFoundError) Error() string { return "no such index [" + e.Index + "]" }

// ConflictError is a version conflict (op_type create of an existing
// document).
type ConflictError struct{ Reason string }

func (e *ConflictError) Error() string { return e.Reason }

// resendTicks: a shard request unanswered this long is sent again (the
// message or its answer may have been lost). The primary's node takes a
// write it already has (by coordinator and request id) once; a write left
// unanswered while its primary moved is not sent to the new one, which may
// hold it (ErrOutcomeUnknown).
const resendTicks = 50

// retryTicks: a request refused because the primary moved waits this long,
// or for a newer cluster state, before it tries again.
const retryTicks = 2

// ErrOutcomeUnknown fails a write that may or may not have been applied:
// sent to a primary that did not answer and was replaced since, or applied
// by a primary that stopped being the primary before it could acknowledge
// it. The client may write again (it then knows it wrote at least once).
var ErrOutcomeUnknown = errors.New("its outcome is unknown")

type coordinator struct {
	n        *Node
	next     uint64
	inflight map[uint64]*request
	stats    map[uint64]*statsCollect
}

// request is a client request in flight: how to (re)send it from the
// current state, and how to take its answer.
type request struct {
	id       uint64
	deadline uint64
	sentTick uint64
	sentTo   string
	// sentLife is the incarnation (ephemeral id) sentTo had in the state
	// the request was sent with: a restarted node does not know the
	// requests of its previous life.
	sentLife string
	version  uint64 // the state version it was last routed with
	waiting  bool   // refused: waits for a newer state or retryTicks
	// unanswered: sent again because no answer came; the node it went to
	// may have applied it.
	unanswered bool
	send       func(st *cluster.State) (node string, err error)
	onResult   func(m transport.Message) (retry bool)
	fail       func(error)
}

func (c *coordinator) init(n *Node) {
	c.n = n
	c.inflight = map[uint64]*request{}
}

// start routes a new request.
func (c *coordinator) start(r *request) {
	c.next++
	r.id = c.next
	r.deadline = c.n.tick + c.n.cfg.RequestTicks
	c.inflight[r.id] = r
	c.dispatch(r)
}

func (c *coordinator) dispatch(r *request) {
	st := c.n.mgr.State()
	r.version = st.Version
	r.waiting = false
	node, err := r.send(st)
	if err != nil {
		delete(c.inflight, r.id)
		r.fail(err)
		return
	}
	if node == "" {
		r.waiting = true // no active primary yet: wait for a state that has one
		r.sentTick = c.n.tick
		return
	}
	r.sentTo, r.sentLife, r.sentTick = node, st.Nodes[node].EphemeralID, c.n.tick
}

func (c *coordinator) onResult(m transport.Message) {
	var head struct {
		Req    uint64 `json:"req"`
		Origin string `json:"origin"`
	}
	if json.Unmarshal(m.Body, &head) != nil || head.Origin != c.n.ephemeral {
		return // an answer to this node's previous life, whose request numbers this life uses again
	}
	r := c.inflight[head.Req]
	if r == nil || m.From != r.sentTo {
		return // answered already, or an answer from a node it no longer waits on
	}
	r.unanswered = false
	if r.onResult(m) {
		r.waiting = true
		r.sentTick = c.n.tick
		return
	}
	delete(c.inflight, r.id)
}

// retry re-routes, once a newer state is applied, the waiting requests,
// and those sent to a node the state no longer has (or has under another
// incarnation): that node will not answer, and its request would otherwise
// wait out resendTicks. A request such a node left unanswered may have
// been applied there, and reached copies now promoted: it counts as
// unanswered (a write then fails with ErrOutcomeUnknown rather than reach
// a new primary, or the node's next life).
func (c *coordinator) retry() {
	st := c.n.mgr.State()
	for _, id := range c.sortedIDs() {
		r := c.inflight[id]
		if st.Version <= r.version {
			continue
		}
		if to, member := st.Nodes[r.sentTo]; r.waiting || !member || to.EphemeralID != r.sentLife {
			if !r.waiting {
				r.unanswered = true
			}
			c.dispatch(r)
		}
	}
}

// tick times requests out, and resends those unanswered or waiting.
func (c *coordinator) tick() {
	c.tickStats()
	for _, id := range c.sortedIDs() {
		r := c.inflight[id]
		switch {
		case c.n.tick >= r.deadline:
			delete(c.inflight, id)
			r.fail(ErrTimeout)
		case r.waiting && c.n.tick-r.sentTick >= retryTicks:
			c.dispatch(r)
		case !r.waiting && c.n.tick-r.sentTick >= resendTicks:
			r.unanswered = true
			c.dispatch(r)
		}
	}
}

func (c *coordinator) failAll(err error) {
	for _, id := range c.sortedIDs() {
		r := c.inflight[id]
		delete(c.inflight, id)
		r.fail(err)
	}
}

func (c *coordinator) sortedIDs() []uint64 {
	ids := make([]uint64, 0, len(c.inflight))
	for id := range c.inflight {
		ids = append(ids, id)
	}
	slices.Sort(ids) // every turn, over every request in flight: thousands under a bulk load
	return ids
}

// table returns the routing table of an index as its metadata defines it.
func table(im *cluster.IndexMeta) (*routing.Table, error) { return im.Table() }

// Spans returns the keyspace and spans a shard of an index owns.
func Spans(im *cluster.IndexMeta, shard routing.ShardID) (routing.ShardID, []routing.Span, error) {
	t, err := table(im)
	if err != nil {
		return 0, nil, err
	}
	loc, ok := t.Shard(shard)
	if !ok {
		return 0, nil, fmt.Errorf("clusternode: index [%s] has no shard %d", im.Name, shard)
	}
	return t.Keyspace(loc.Root), []routing.Span{loc.Span}, nil
}

// docOp routes a document to its shard and storage key.
func docOp(im *cluster.IndexMeta, kind storage.OpKind, id, routingValue string, source []byte) (routing.ShardID, storage.Op, error) {
	t, err := table(im)
	if err != nil {
		return 0, storage.Op{}, err
	}
	p, shard := t.Route(id, routingValue)
	return shard, storage.Op{Kind: kind, Root: t.Keyspace(p.Root), Key: t.KeyOf(p), ID: id, Routing: routingValue, Source: source,
		Home: storage.HomeOf(t, p.Root, id, routingValue)}, nil
}

// primaryNode returns the node of a shard's active primary, or "".
func primaryNode(im *cluster.IndexMeta, shard routing.ShardID) string {
	for _, c := range im.Copies[shard] {
		if c.Primary && c.State == cluster.Started {
			return c.Node
		}
	}
	return ""
}

// DocResult is a write's outcome as a client sees it.
type DocResult struct {
	Index   string
	ID      string
	Shard   routing.ShardID
	Version int64
	Result  string // created, updated, deleted, not_found
	Seq     int64
	Term    uint64
	Total   int // copies of the shard (_shards.total)
	Copies  int // copies that have it (_shards.successful)
}

// IndexDoc indexes a document (create: refused if it exists).
func (n *Node) IndexDoc(index, id, routingValue string, source []byte, create bool, done func(DocResult, error)) {
	n.writeDoc(index, storage.OpIndex, id, routingValue, source, create, done)
}

// DeleteDoc deletes a document.
func (n *Node) DeleteDoc(index, id, routingValue string, done func(DocResult, error)) {
	n.writeDoc(index, storage.OpDelete, id, routingValue, nil, false, done)
}

func (n *Node) writeDoc(index string, kind storage.OpKind, id, routingValue string, source []byte, create bool, done func(DocResult, error)) {
	var shard routing.ShardID
	var stale staleRetry
	r := &request{}
	r.send = func(st *cluster.State) (string, error) {
		im := st.Indices[index]
		if im == nil {
			return "", &IndexNotFoundError{Index: index}
		}
		s, op, err := docOp(im, kind, id, routingValue, source)
		if err != nil {
			return "", err
		}
		shard = s
		stale.routedTo(s)
		node := primaryNode(im, s)
		if r.unanswered && (node != r.sentTo || st.Nodes[node].EphemeralID != r.sentLife) {
			// The primary moved, or its node restarted, while the write
			// went unanswered: the old one may have applied it and the
			// new one may have it, so sending it there could apply it
			// twice.
			return "", fmt.Errorf("clusternode: write [%s][%s]: the primary changed while its answer was missing: %w", index, id, ErrOutcomeUnknown)
		}
		if node != "" {
			w := shardWrite{Req: r.id, Origin: n.ephemeral, Shard: copyKeyJSON{Index: im.UUID, Shard: s},
				Items: []WriteItem{{Op: op, Create: create}}}
			if r.unanswered {
				w.Resend = st.Nodes[node].EphemeralID
			}
			n.send(node, kindWrite, w)
		}
		return node, nil
	}
	r.onResult = func(m transport.Message) bool {
		var res shardWriteResult
		if err := m.Decode(&res); err != nil {
			return true
		}
		switch res.Code {
		case "":
		case codeRetry:
			stale.refusedBy(shard, n.now())
			return true
		case codeUnknown:
			done(DocResult{}, fmt.Errorf("clusternode: write [%s][%s]: %s: %w", index, id, res.Reason, ErrOutcomeUnknown))
			return false
		default:
			n.stats.answered(&stale, n.now())
			done(DocResult{}, fmt.Errorf("clusternode: write [%s][%s]: %s", index, id, res.Reason))
			return false
		}
		n.stats.answered(&stale, n.now())
		it := res.Items[0]
		if it.Code == codeConflict {
			done(DocResult{}, &ConflictError{Reason: it.Reason})
			return false
		}
		total := 1
		if im := n.mgr.State().Indices[index]; im != nil {
			total = 1 + im.Replicas
		}
		done(DocResult{Index: index, ID: id, Shard: shard, Version: it.Version, Result: it.Result, Seq: it.Seq, Term: it.Term,
			Total: total, Copies: res.Copies}, nil)
		return false
	}
	r.fail = func(err error) {
		n.stats.answered(&stale, n.now())
		done(DocResult{}, err)
	}
	n.coord.start(r)
}

// Doc is a document as a get returns it.
type Doc struct {
	ID      string
	Routing string
	Version int64
	Seq     int64
	Term    uint64
	Source  []byte
}

// GetDoc reads a document from its shard's primary.
func (n *Node) GetDoc(index, id, routingValue string, done func(Doc, bool, error)) {
	r := &request{}
	r.send = func(st *cluster.State) (string, error) {
		im := st.Indices[index]
		if im == nil {
			return "", &IndexNotFoundError{Index: index}
		}
		s, op, err := docOp(im, storage.OpIndex, id, routingValue, nil)
		if err != nil {
			return "", err
		}
		node := primaryNode(im, s)
		if node != "" {
			n.send(node, kindGet, shardGet{Req: r.id, Origin: n.ephemeral, Shard: copyKeyJSON{Index: im.UUID, Shard: s}, Op: op})
		}
		return node, nil
	}
	r.onResult = func(m transport.Message) bool {
		var res shardGetResult
		if err := m.Decode(&res); err != nil {
			return true
		}
		switch res.Code {
		case "":
		case codeRetry:
			return true
		default:
			done(Doc{}, false, fmt.Errorf("clusternode: get [%s][%s]: %s", index, id, res.Reason))
			return false
		}
		if !res.Found {
			done(Doc{}, false, nil)
			return false
		}
		v, src := DecodeSource(res.Doc.Source)
		done(Doc{ID: res.Doc.ID, Routing: res.Doc.Routing, Version: v, Seq: int64(res.Doc.Seq) - 1, Term: res.Term, Source: src}, true, nil)
		return false
	}
	r.fail = func(err error) { done(Doc{}, false, err) }
	n.coord.start(r)
}

// SearchResult is the documents of an index that match a query: the first
// size of each shard (in shard order, each shard's in key order), and the
// total count.
type SearchResult struct {
	Total  int
	Shards int
	Docs   []Doc
	// Shard is the shard of each of Docs.
	Shard []routing.ShardID
}

// errSearchRestarted ends a search's shard request whose shard handed off:
// the search began again over the children.
var errSearchRestarted = errors.New("clusternode: the shard handed off; the search started again")

// Search returns up to size matching documents of every shard of an index,
// and their total, from each shard's primary; query is what the node's
// Matcher reads (nil: match all).
func (n *Node) Search(index string, query json.RawMessage, size int, done func(SearchResult, error)) {
	st := n.mgr.State()
	im := st.Indices[index]
	if im == nil {
		done(SearchResult{}, &IndexNotFoundError{Index: index})
		return
	}
	shards := im.ServingShards()
	out := SearchResult{Shards: len(shards)}
	perShard := make([][]Doc, len(shards))
	left := len(shards)
	failed := false
	for sh, shard := range shards {
		r := &request{}
		r.send = func(st *cluster.State) (string, error) {
			im := st.Indices[index]
			if im == nil {
				return "", &IndexNotFoundError{Index: index}
			}
			if _, handed := im.Handoffs[shard]; handed {
				// The shard split and handed its ranges off: no primary
				// of it will come back. The search starts again over
				// the shards this state serves, once.
				if !failed {
					failed = true
					n.Search(index, query, size, done)
				}
				return "", errSearchRestarted
			}
			node := primaryNode(im, shard)
			if node != "" {
				n.send(node, kindSearch, shardSearch{Req: r.id, Origin: n.ephemeral, Shard: copyKeyJSON{Index: im.UUID, Shard: shard}, Size: size, Query: query})
			}
			return node, nil
		}
		r.onResult = func(m transport.Message) bool {
			var res shardSearchResult
			if err := m.Decode(&res); err != nil || res.Code == codeRetry {
				return true
			}
			if res.Code != "" {
				r.fail(errors.New(res.Reason))
				return false
			}
			out.Total += res.Total
			for _, d := range res.Docs {
				v, src := DecodeSource(d.Source)
				perShard[sh] = append(perShard[sh], Doc{ID: d.ID, Routing: d.Routing, Version: v, Seq: int64(d.Seq) - 1, Source: src})
			}
			if left--; left == 0 && !failed {
				for sh, docs := range perShard {
					for _, d := range docs {
						out.Docs = append(out.Docs, d)
						out.Shard = append(out.Shard, shards[sh])
					}
				}
				done(out, nil)
			}
			return false
		}
		r.fail = func(err error) {
			if !failed {
				failed = true
				done(SearchResult{}, err)
			}
		}
		n.coord.start(r)
	}
}

// CreateIndex proposes a new index (settings flat and checked by the
// caller) and calls done once this node applied it.
func (n *Node) CreateIndex(name string, settings map[string]string, mappings json.RawMessage, creationDate int64, done func(error)) {
	n.propose(cluster.Task{CreateIndex: &cluster.CreateIndex{Name: name, UUID: n.uuid(), CreationDate: creationDate,
		Settings: settings, Mappings: mappings}}, done)
}

// DeleteIndex proposes an index's deletion.
func (n *Node) DeleteIndex(name string, done func(error)) {
	n.propose(cluster.Task{DeleteIndex: &cluster.DeleteIndex{Name: name}}, done)
}

// UpdateReplicas proposes an index's number_of_replicas.
func (n *Node) UpdateReplicas(name string, replicas int, done func(error)) {
	n.propose(cluster.Task{UpdateReplicas: &cluster.UpdateReplicas{Index: name, Replicas: replicas}}, done)
}

func (n *Node) propose(t cluster.Task, done func(error)) {
	n.mgr.Propose(t, func(r coordinationResult) {
		if r.Err != nil {
			n.log.Debug("task refused", zap.Error(r.Err))
		}
		done(r.Err)
	})
}
