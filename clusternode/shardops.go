package clusternode

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/replication"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
	"github.com/shardsplit/shardsplit/transport"
)

// Messages a coordinator sends to the node of a shard's primary, and their
// answers (OpenSearch's TransportShardBulkAction, the shard-level get and
// query phases).
const (
	kindWrite        = "op/write"
	kindWriteResult  = "op/write_result"
	kindGet          = "op/get"
	kindGetResult    = "op/get_result"
	kindSearch       = "op/search"
	kindSearchResult = "op/search_result"
)

// The codes a shard-level answer gives for a request the coordinator
// should retry against a newer cluster state (the primary moved), and for
// the ones it should not.
const (
	codeRetry    = "retry"            // not the primary here (yet, or any more), or no lease
	codeConflict = "version_conflict" // op_type create of a document that exists
	codeFailed   = "failed"           // anything else, with its message
	// codeUnknown: the primary applied the write and could not acknowledge
	// it (it stopped being the primary, or broke), or a resent write
	// reached its node's next life: a new primary (or life) may hold it,
	// so it must not be sent again.
	codeUnknown = "outcome_unknown"
)

// WriteItem is one document operation of a write request.
type WriteItem struct {
	Op     storage.Op `json:"op"`
	Create bool       `json:"create,omitempty"` // op_type=create: refused if the document exists
}

// ItemResult is the outcome of one WriteItem on the primary.
type ItemResult struct {
	Seq     int64  `json:"seq"`
	Term    uint64 `json:"term"`
	Version int64  `json:"version"`
	Result  string `json:"result"` // created, updated, deleted, not_found
	Code    string `json:"code,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

type shardWrite struct {
	Req uint64 `json:"req"`
	// Origin is the coordinator's incarnation (its ephemeral id): request
	// ids start again at 1 when its process restarts, so a request is
	// named by the node, Origin and Req together.
	Origin string      `json:"origin"`
	Shard  copyKeyJSON `json:"shard"`
	Items  []WriteItem `json:"items"`
	// Resend, on a request sent again for want of an answer, is the
	// incarnation of the node it was sent to before: another life of
	// that node does not know whether its previous one applied it.
	Resend string `json:"resend,omitempty"`
}

// shardWriteResult answers a shardWrite. Every answer (of a write, get or
// search) carries the Origin of the request it answers: it may arrive
// after its coordinator restarted, whose new life numbers its requests
// from 1 again and takes only the answers to its own.
type shardWriteResult struct {
	Req    uint64       `json:"req"`
	Origin string       `json:"origin"`
	Code   string       `json:"code,omitempty"`
	Reason string       `json:"reason,omitempty"`
	Items  []ItemResult `json:"items,omitempty"`
	// Copies is how many copies have the write (_shards.successful).
	Copies int `json:"copies"`
}

type shardGet struct {
	Req    uint64      `json:"req"`
	Origin string      `json:"origin"` // as shardWrite's
	Shard  copyKeyJSON `json:"shard"`
	Op     storage.Op  `json:"op"` // its Root, Key and ID name the document
}

type shardGetResult struct {
	Req    uint64      `json:"req"`
	Origin string      `json:"origin"`
	Code   string      `json:"code,omitempty"`
	Reason string      `json:"reason,omitempty"`
	Found  bool        `json:"found"`
	Doc    storage.Doc `json:"doc"`
	Term   uint64      `json:"term"`
}

type shardSearch struct {
	Req    uint64          `json:"req"`
	Origin string          `json:"origin"` // as shardWrite's
	Shard  copyKeyJSON     `json:"shard"`
	Size   int             `json:"size"`
	Query  json.RawMessage `json:"query,omitempty"`
}

type shardSearchResult struct {
	Req    uint64        `json:"req"`
	Origin string        `json:"origin"`
	Code   string        `json:"code,omitempty"`
	Reason string        `json:"reason,omitempty"`
	Total  int           `json:"total"`
	Docs   []storage.Doc `json:"docs,omitempty"`
}

type copyKeyJSON struct {
	Index string          `json:"index"`
	Shard routing.ShardID `json:"shard"`
}

func (k copyKeyJSON) key() copyKey { return copyKey{index: k.Index, shard: k.Shard} }

func shardID(i int) routing.ShardID { return routing.ShardID(i) }

// A document's stored source begins with its _version (8 bytes,
// big-endian), which the primary assigns: a replica stores what the
// primary decided.
func encodeSource(version int64, src []byte) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(src)), uint64(version))
	return append(b, src...)
}

// DecodeSource splits a stored source into its _version and the source.
func DecodeSource(b []byte) (int64, []byte) {
	if len(b) < 8 {
		return 0, b
	}
	return int64(binary.BigEndian.Uint64(b)), b[8:]
}

// servingState holds what the data side of the node waits on: gets of a
// document with a write in flight.
type servingState struct {
	gets []parkedGet
	// writes are the write requests this node's primaries took, by
	// coordinator and request id, so that a request sent again (its
	// answer was slow or lost) is not applied twice: one in flight is
	// answered once, one done is answered with its result again.
	writes map[string]*servedWrite
	// done are the writes done, in the order they were done (their ticks
	// never decrease), so that expire forgets from the front instead of
	// walking every write of the last servedKeep ticks on every tick.
	done []doneWrite
}

type doneWrite struct {
	key string
	w   *servedWrite
}

type servedWrite struct {
	done   bool
	result shardWriteResult
	at     uint64 // the tick it was done
}

// servedKeep is how long a done write's answer is kept for a resend.
const servedKeep = 600

type parkedGet struct {
	from string
	req  shardGet
}

func (s *servingState) init() { s.writes = map[string]*servedWrite{} }

// expire forgets the answers of writes done long ago.
func (s *servingState) expire(tick uint64) {
	n := 0
	for ; n < len(s.done) && tick-s.done[n].w.at > servedKeep; n++ {
		if d := s.done[n]; s.writes[d.key] == d.w {
			delete(s.writes, d.key)
		}
	}
	clear(s.done[:n])
	s.done = s.done[n:] // append moves the rest to a new array once this one is full
}

func (n *Node) onShardOp(m transport.Message) {
	switch m.Kind {
	case kindWrite:
		var r shardWrite
		if err := m.Decode(&r); err == nil {
			n.serveWrite(m.From, r)
		}
	case kindGet:
		var r shardGet
		if err := m.Decode(&r); err == nil {
			n.serveGet(m.From, r)
		}
	case kindSearch:
		var r shardSearch
		if err := m.Decode(&r); err == nil {
			n.serveSearch(m.From, r)
		}
	case kindWriteResult, kindGetResult, kindSearchResult:
		n.coord.onResult(m)
	case kindStats:
		var r statsRequest
		if m.Decode(&r) == nil {
			n.send(m.From, kindStatsResult, statsResult{Req: r.Req, Copies: n.localStats()})
		}
	case kindStatsResult:
		n.coord.onStats(m)
	}
}

// primaryHere returns the local primary of a shard that may serve, or the
// code to answer with.
func (n *Node) primaryHere(k copyKey) (*localCopy, string) {
	lc := n.copies[k]
	if lc == nil || lc.c == nil || !lc.c.IsPrimary() {
		return nil, codeRetry
	}
	return lc, ""
}

// serveWrite runs a write on the local primary.
func (n *Node) serveWrite(from string, r shardWrite) {
	key := fmt.Sprintf("%s/%s/%d", from, r.Origin, r.Req)
	if w, ok := n.serving.writes[key]; ok {
		if w.done {
			n.send(from, kindWriteResult, w.result)
		}
		return // in flight: its answer goes once it is done
	}
	if r.Resend != "" && r.Resend != n.ephemeral {
		n.send(from, kindWriteResult, shardWriteResult{Req: r.Req, Origin: r.Origin, Code: codeUnknown,
			Reason: "sent again to a node that restarted since it was sent"})
		return
	}
	lc, code := n.primaryHere(r.Shard.key())
	if lc == nil {
		n.send(from, kindWriteResult, shardWriteResult{Req: r.Req, Origin: r.Origin, Code: code, Reason: "not the primary"})
		return
	}
	prepare := func(get func(storage.Op) (storage.Doc, bool, error)) ([]storage.Op, any, error) {
		var ops []storage.Op
		results := make([]ItemResult, len(r.Items))
		for i, it := range r.Items {
			cur, found, err := get(it.Op)
			if err != nil {
				return nil, nil, err
			}
			version := int64(0)
			if found {
				version, _ = DecodeSource(cur.Source)
			}
			op := it.Op
			switch {
			case it.Create && found:
				results[i] = ItemResult{Version: version, Code: codeConflict,
					Reason: fmt.Sprintf("[%s]: version conflict, document already exists (current version [%d])", op.ID, version)}
				continue
			case op.Kind == storage.OpDelete && !found:
				results[i] = ItemResult{Version: 1, Result: "not_found"}
			case op.Kind == storage.OpDelete:
				results[i] = ItemResult{Version: version + 1, Result: "deleted"}
			case found:
				results[i] = ItemResult{Version: version + 1, Result: "updated"}
			default:
				results[i] = ItemResult{Version: 1, Result: "created"}
			}
			if op.Kind == storage.OpIndex {
				op.Source = encodeSource(results[i].Version, op.Source)
			}
			ops = append(ops, op)
		}
		return ops, results, nil
	}
	served := &servedWrite{}
	n.serving.writes[key] = served
	lc.c.Write(prepare, func(w replication.WriteResult) {
		res := shardWriteResult{Req: r.Req, Origin: r.Origin}
		defer func() {
			served.done, served.result, served.at = true, res, n.tick
			if res.Code == codeRetry {
				delete(n.serving.writes, key) // not applied: a retry is a new attempt
			} else {
				n.serving.done = append(n.serving.done, doneWrite{key: key, w: served})
			}
		}()
		switch {
		case w.Err != nil && len(w.Seqs) > 0:
			// Applied here, then not acknowledged: the copies it reached
			// may make it the new primary's, which would apply a retry a
			// second time. OpenSearch retries it (RetryOnPrimaryException)
			// and may apply it twice; here its outcome is unknown.
			res.Code, res.Reason = codeUnknown, "applied by a primary that could not acknowledge it ("+w.Err.Error()+")"
		case errors.Is(w.Err, replication.ErrNotPrimary), errors.Is(w.Err, replication.ErrStalePrimary):
			res.Code, res.Reason = codeRetry, w.Err.Error()
		case w.Err != nil:
			res.Code, res.Reason = codeFailed, w.Err.Error()
		default:
			items := w.Value.([]ItemResult)
			j := 0
			for i := range items {
				if items[i].Code == "" {
					items[i].Seq, items[i].Term = w.Seqs[j], w.Term
					j++
				}
			}
			res.Items = items
			res.Copies = n.inSyncCount(r.Shard.key())
		}
		n.send(from, kindWriteResult, res)
	})
}

func (n *Node) inSyncCount(k copyKey) int {
	for _, im := range n.mgr.State().Indices {
		if im.UUID == k.index {
			return len(im.InSync[k.shard])
		}
	}
	return 1
}

// serveGet reads a document on the local primary: only with a read lease
// (no other primary can have been made), and only once no write to the
// document is in flight (its value could still be taken back).
func (n *Node) serveGet(from string, r shardGet) {
	lc, code := n.primaryHere(r.Shard.key())
	if lc == nil {
		n.send(from, kindGetResult, shardGetResult{Req: r.Req, Origin: r.Origin, Code: code, Reason: "not the primary"})
		return
	}
	if !n.mgr.HasLease() {
		n.send(from, kindGetResult, shardGetResult{Req: r.Req, Origin: r.Origin, Code: codeRetry, Reason: "no read lease from the cluster manager"})
		return
	}
	if lc.c.Busy(r.Op) {
		n.serving.gets = append(n.serving.gets, parkedGet{from: from, req: r})
		return
	}
	d, found, err := lc.store.Get(r.Op)
	res := shardGetResult{Req: r.Req, Origin: r.Origin, Found: found, Doc: d, Term: lc.c.Term()}
	if err != nil {
		res = shardGetResult{Req: r.Req, Origin: r.Origin, Code: codeFailed, Reason: err.Error()}
	}
	n.send(from, kindGetResult, res)
}

// retry serves the gets whose document's writes were acknowledged since.
func (s *servingState) retry(n *Node) {
	if len(s.gets) == 0 {
		return
	}
	gets := s.gets
	s.gets = nil
	for _, g := range gets {
		n.serveGet(g.from, g.req)
	}
}

// serveSearch scans the local primary of a shard.
func (n *Node) serveSearch(from string, r shardSearch) {
	lc, code := n.primaryHere(r.Shard.key())
	if lc == nil {
		n.send(from, kindSearchResult, shardSearchResult{Req: r.Req, Origin: r.Origin, Code: code, Reason: "not the primary"})
		return
	}
	match := func(storage.Doc) bool { return true }
	if n.cfg.Matcher != nil && len(r.Query) > 0 {
		m, err := n.cfg.Matcher(r.Query)
		if err != nil {
			n.send(from, kindSearchResult, shardSearchResult{Req: r.Req, Origin: r.Origin, Code: codeFailed, Reason: err.Error()})
			return
		}
		match = m
	}
	res := shardSearchResult{Req: r.Req, Origin: r.Origin}
	err := lc.store.Scan(func(d storage.Doc) error {
		if !match(d) {
			return nil
		}
		res.Total++
		if len(res.Docs) < r.Size {
			d.Source = slices.Clone(d.Source) // the scan reuses its buffer
			res.Docs = append(res.Docs, d)
		}
		return nil
	})
	if err != nil {
		n.log.Warn("search a shard", zap.Error(err))
		res = shardSearchResult{Req: r.Req, Origin: r.Origin, Code: codeFailed, Reason: err.Error()}
	}
	n.send(from, kindSearchResult, res) // in the store's key order
}

const (
	kindStats       = "op/stats"
	kindStatsResult = "op/stats_result"
)

// CopyStat is what a node says of one of its copies: its checkpoints,
// documents and bytes (for _cat/shards, _cat/recovery and the checks that
// copies agree).
type CopyStat struct {
	Node         string          `json:"node"`
	Index        string          `json:"index"` // uuid
	Shard        routing.ShardID `json:"shard"`
	AllocationID string          `json:"allocation_id"`
	Primary      bool            `json:"primary"`
	Recovering   bool            `json:"recovering,omitempty"`
	LCP          int64           `json:"lcp"`
	GCP          int64           `json:"gcp"`
	Docs         int64           `json:"docs"`
	Bytes        int64           `json:"bytes"`
	// RecoveredBytes is what a recovery of this copy received so far.
	RecoveredBytes int64 `json:"recovered_bytes,omitempty"`
}

type statsRequest struct {
	Req uint64 `json:"req"`
}

type statsResult struct {
	Req    uint64     `json:"req"`
	Copies []CopyStat `json:"copies"`
}

// statsCollect gathers one CopyStats answer per node.
type statsCollect struct {
	want     map[string]bool
	got      []CopyStat
	deadline uint64
	done     func([]CopyStat)
}

// localStats describes this node's copies, counting documents by a scan.
func (n *Node) localStats() []CopyStat {
	var out []CopyStat
	for _, ci := range n.Copies() {
		cs := CopyStat{Node: n.cfg.Name, Index: ci.Index, Shard: ci.Shard, AllocationID: ci.AllocationID, Primary: ci.Primary,
			Recovering: ci.Recovering, LCP: ci.LCP, GCP: ci.GCP}
		lc := n.copies[copyKey{index: ci.Index, shard: ci.Shard}]
		if lc.store != nil {
			_ = lc.store.Scan(func(d storage.Doc) error {
				cs.Docs++
				cs.Bytes += int64(len(d.Source))
				return nil
			})
		}
		if lc.target != nil {
			cs.RecoveredBytes = lc.target.BytesReceived
		}
		out = append(out, cs)
	}
	return out
}

// CopyStats asks every node of the cluster to describe its copies and
// calls done with the answers that arrived within 30 ticks.
func (n *Node) CopyStats(done func([]CopyStat)) {
	n.coord.next++
	id := n.coord.next
	c := &statsCollect{want: map[string]bool{}, deadline: n.tick + 30, done: done}
	for _, name := range sortedKeys(n.mgr.State().Nodes) {
		c.want[name] = true
		n.send(name, kindStats, statsRequest{Req: id})
	}
	if n.coord.stats == nil {
		n.coord.stats = map[uint64]*statsCollect{}
	}
	n.coord.stats[id] = c
	if len(c.want) == 0 {
		delete(n.coord.stats, id)
		done(nil)
	}
}

func (c *coordinator) onStats(m transport.Message) {
	var r statsResult
	if m.Decode(&r) != nil {
		return
	}
	sc := c.stats[r.Req]
	if sc == nil || !sc.want[m.From] {
		return
	}
	delete(sc.want, m.From)
	sc.got = append(sc.got, r.Copies...)
	if len(sc.want) == 0 {
		delete(c.stats, r.Req)
		sc.done(sc.got)
	}
}

func (c *coordinator) tickStats() {
	for id, sc := range c.stats {
		if c.n.tick >= sc.deadline {
			delete(c.stats, id)
			sc.done(sc.got)
		}
	}
}
