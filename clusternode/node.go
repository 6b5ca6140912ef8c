// Package clusternode is one node of a cluster: the event loop that steps
// the cluster manager (coordination), the node's shard copies
// (replication) and its two roles above them — the applier, which makes
// the node's copies what each committed cluster state says (OpenSearch's
// IndicesClusterStateService), and the coordinator, which routes a
// client's request to the copy that owns it, on any node, and retries it
// against a newer state when the copy it reached was replaced.
//
// # Contract
//
// A Node is a state machine: Step takes messages, Tick the passing of
// time, the request methods (IndexDoc, GetDoc, Search, CreateIndex, ...)
// a client's request with a callback for its answer. None of them starts
// a goroutine or reads a clock. Step, Tick and Flush end by applying the
// writes queued since in one batch per shard (the group commit) and
// sending what they must; a request method only queues, so a process's
// loop takes every request and message that arrived, then flushes once.
// In a process, Run steps it from one goroutine; in the simulation the
// scheduler does.
//
// The node acts only on committed cluster states, and only on those in
// which it is a member under its own ephemeral id: after a restart it
// replays its raft log, whose states describe its previous incarnation,
// and waits until the cluster recorded it again (its old copies failed,
// its disk's copies reported).
//
// Concurrency: not safe for concurrent use.
package clusternode

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/coordination"
	"github.com/shardsplit/shardsplit/replication"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
	"github.com/shardsplit/shardsplit/transport"
)

// CopyStore is the store of one shard copy.
type CopyStore interface {
	replication.Store
	replication.Checkpointer
	// Scan calls fn for every document the copy holds.
	Scan(fn func(storage.Doc) error) error
	// Close closes the store.
	Close() error
}

// StoreOpener opens the store of a copy in its directory, creating an
// empty one if the directory is empty. The copy (of shard) owns the spans
// of a keyspace.
type StoreOpener interface {
	Open(dir string, shard, keyspace routing.ShardID, spans []routing.Span) (CopyStore, error)
	// RecoveryDir is where a peer recovery writes the files of a copy
	// whose directory is dir.
	RecoveryDir(dir string, shard routing.ShardID) string
	// OpenChild builds in dir the copy of a split's child (owning span of
	// keyspace) from from, a copy of the parent on this node.
	OpenChild(dir string, from CopyStore, parent, child, keyspace routing.ShardID, span routing.Span) (CopyStore, error)
}

// Config configures a Node.
type Config struct {
	Name        string // node.name
	ClusterName string // cluster.name
	DataDir     string
	FS          storage.FS
	// TransportAddr and HTTPAddr are the addresses other nodes and
	// clients reach this node at (transport.port, http.port).
	TransportAddr, HTTPAddr string
	Seeds                   []string // discovery.seed_hosts
	InitialManagers         []string // cluster.initial_cluster_manager_nodes
	Transport               coordination.Transport
	Stores                  StoreOpener
	Logger                  *zap.Logger
	// Rand draws election timeouts and uuids: from the seed in the
	// simulation, from crypto/rand in a process. Required.
	Rand *rand.Rand
	// EphemeralID names this process's incarnation (random by default).
	EphemeralID string

	ElectionTicks      int
	FollowerCheckTicks int
	// RequestTicks bounds how long a client request keeps retrying
	// (default 300: 30 s at 100 ms ticks, OpenSearch's timeout default).
	RequestTicks uint64
	// Matcher turns a search's query (as the layer above encodes it) into
	// the filter a shard applies to its documents; nil matches all.
	Matcher func(query json.RawMessage) (func(storage.Doc) bool, error)
}

// Node is one node of a cluster.
type Node struct {
	cfg Config
	log *zap.Logger
	kv  *storage.KV
	mgr *coordination.Manager

	id        string // persistent
	ephemeral string
	tick      uint64

	copies  map[copyKey]*localCopy
	sources map[string]*replication.Source
	started map[string]uint64 // allocation ids reported started, not yet seen so: the primary term of the report
	failing map[string]bool   // copies (and terms) reported failed, not yet applied
	// handoffs are the hand-offs of the splits whose parent primary is
	// here, by the parent's copy.
	handoffs map[copyKey]*handoff
	stats    nodeStats

	applied *cluster.State // the state the applier last acted on
	// swept: the copies on disk of shards gone from their index were
	// deleted (sweepGoneShards), once this incarnation is a member.
	swept bool

	// deferredStarts are recovery requests for copies of a newer state
	// than the one applied, taken again once a state is (startChildSource).
	deferredStarts []replication.RecoveryStart

	coord   coordinator
	serving servingState
	self    []transport.Message // messages to this node, delivered at the end of the step
	closed  bool
}

type copyKey struct {
	index string // uuid
	shard routing.ShardID
}

func (k copyKey) shardKey() replication.ShardKey {
	return replication.ShardKey{Index: k.index, Shard: int(k.shard)}
}

var keyNodeID = []byte("node/id")

// Open opens the node's data directory (creating its identity on first
// use) and its cluster-manager state.
func Open(cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Rand == nil {
		return nil, fmt.Errorf("clusternode: a node needs a Rand (its randomness is the caller's: seeded in a simulation)")
	}
	if cfg.RequestTicks == 0 {
		cfg.RequestTicks = 300
	}
	if cfg.ClusterName == "" {
		cfg.ClusterName = "shardsplit"
	}
	if cfg.Name == "" {
		return nil, fmt.Errorf("clusternode: a node needs a name (node.name)")
	}
	kv, err := storage.OpenKV(cfg.FS, filepath.Join(cfg.DataDir, "_cluster"), cfg.Logger)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: cfg.Logger.With(zap.String("node", cfg.Name)), kv: kv,
		copies: map[copyKey]*localCopy{}, sources: map[string]*replication.Source{}, started: map[string]uint64{},
		failing: map[string]bool{}, handoffs: map[copyKey]*handoff{}}
	if n.id, err = n.loadID(); err != nil {
		_ = kv.Close()
		return nil, err
	}
	n.ephemeral = cfg.EphemeralID
	if n.ephemeral == "" {
		n.ephemeral = n.uuid()
	}
	diskCopies, err := n.scanCopies()
	if err != nil {
		_ = kv.Close()
		return nil, err
	}
	n.mgr, err = coordination.Open(coordination.Config{
		Self: cluster.NodeInfo{Name: cfg.Name, ID: n.id, EphemeralID: n.ephemeral, TransportAddr: cfg.TransportAddr,
			HTTPAddr: cfg.HTTPAddr, Manager: true, Copies: diskCopies},
		LocalCopies: func() []cluster.LocalCopy {
			copies, err := n.scanCopies()
			if err != nil {
				n.log.Warn("list the copies on disk for a join", zap.Error(err))
			}
			return copies
		},
		ClusterName: cfg.ClusterName, Seeds: cfg.Seeds, InitialManagers: cfg.InitialManagers, KV: kv,
		Transport: countSent(cfg.Transport, &n.stats), Logger: n.log, NewClusterUUID: n.uuid, Rand: cfg.Rand,
		ElectionTicks: cfg.ElectionTicks, FollowerCheckTicks: cfg.FollowerCheckTicks,
	})
	if err != nil {
		_ = kv.Close()
		return nil, err
	}
	n.coord.init(n)
	n.serving.init()
	return n, nil
}

// uuid draws a 20-character url-safe id, as OpenSearch's UUIDs.randomBase64UUID.
func (n *Node) uuid() string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	b := make([]byte, 20)
	for i := range b {
		b[i] = alphabet[n.cfg.Rand.IntN(len(alphabet))]
	}
	return string(b)
}

func (n *Node) loadID() (string, error) {
	v, err := n.kv.Get(keyNodeID)
	if err == nil {
		return string(v), nil
	}
	if !errors.Is(err, storage.ErrNotFound) {
		return "", err
	}
	id := n.uuid()
	b := n.kv.NewBatch()
	b.Set(keyNodeID, []byte(id))
	if err := n.kv.Commit(b, true); err != nil {
		return "", err
	}
	return id, nil
}

// Name returns the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// ID returns the node's persistent id.
func (n *Node) ID() string { return n.id }

// State returns the last committed cluster state the node applied.
func (n *Node) State() *cluster.State { return n.mgr.State() }

// Manager returns the node's part of the cluster manager.
func (n *Node) Manager() *coordination.Manager { return n.mgr }

// Fatal returns why the node cannot take part in its cluster, or nil.
func (n *Node) Fatal() error { return n.mgr.Fatal() }

// Step takes messages from other nodes.
func (n *Node) Step(msgs ...transport.Message) {
	for _, m := range msgs {
		n.route(m)
	}
	n.finish()
}

func (n *Node) route(m transport.Message) {
	switch {
	case m.Kind == kindSplitFollow:
		n.onSplitFollow(m)
	case strings.HasPrefix(m.Kind, "cm/"):
		n.mgr.Step(m)
	case strings.HasPrefix(m.Kind, "rep/"):
		n.onReplication(m)
	case strings.HasPrefix(m.Kind, "rec/"):
		n.onRecovery(m)
	case strings.HasPrefix(m.Kind, "op/"):
		n.onShardOp(m)
	default:
		n.log.Warn("unknown message kind", zap.String("kind", m.Kind), zap.String("from", m.From))
	}
}

// Tick advances the node by one tick.
func (n *Node) Tick() {
	n.tick++
	n.mgr.Tick()
	for _, k := range n.sortedCopies() {
		lc := n.copies[k]
		if lc.c != nil {
			lc.c.Tick()
		}
		lc.tickRecovery(n)
	}
	for _, id := range sortedKeys(n.sources) {
		s := n.sources[id]
		s.Tick()
		if s.Done() {
			delete(n.sources, id)
		}
	}
	n.tickSplits()
	n.coord.tick()
	n.serving.expire(n.tick)
	n.finish()
}

// Flush applies the writes queued since the last step and sends what the
// requests made since must send.
func (n *Node) Flush() { n.finish() }

// finish ends every step: act on newly applied states, apply the queued
// writes (one batch per copy), answer what waited on them, and deliver
// the messages this node sent itself.
func (n *Node) finish() {
	for i := 0; i < 100; i++ {
		if st := n.mgr.State(); st != n.applied {
			n.reconcile(st)
		}
		// Every copy's batch is applied (and a primary's sent) before
		// any waits for its fsync: each copy is a store of its own, so
		// their fsyncs overlap instead of following one another.
		var ends []func()
		for _, k := range n.sortedCopies() {
			if lc := n.copies[k]; lc.c != nil {
				ends = append(ends, lc.c.FlushStart())
			}
		}
		for _, end := range ends {
			end()
		}
		n.serving.retry(n)
		n.coord.retry()
		if len(n.self) == 0 {
			return
		}
		self := n.self
		n.self = nil
		for _, m := range self {
			n.route(m)
		}
	}
}

// send sends body to node as a message of kind; to itself, at the end of
// the step.
func (n *Node) send(node, kind string, body any) {
	m, err := transport.NewMessage(n.cfg.Name, node, kind, body)
	if err != nil {
		n.log.Error("encode message", zap.String("kind", kind), zap.Error(err))
		return
	}
	if node == n.cfg.Name {
		n.self = append(n.self, m)
		return
	}
	n.stats.sent(kind, len(m.Body))
	n.cfg.Transport.Send(m)
}

// countSent wraps the cluster manager's transport so that what it sends
// is counted with the node's own messages (as Other): TransportStats
// counts every message a node sends. A transport that knows Reachability
// keeps it visible to the manager.
func countSent(t coordination.Transport, sent *nodeStats) coordination.Transport {
	c := countingTransport{Transport: t, sent: sent}
	if r, ok := t.(coordination.Reachability); ok {
		return countingReachableTransport{countingTransport: c, r: r}
	}
	return c
}

type countingTransport struct {
	coordination.Transport
	sent *nodeStats
}

func (t countingTransport) Send(m transport.Message) {
	t.sent.sent(m.Kind, len(m.Body))
	t.Transport.Send(m)
}

func (t countingTransport) SendAddr(addr string, m transport.Message) {
	t.sent.sent(m.Kind, len(m.Body))
	t.Transport.SendAddr(addr, m)
}

type countingReachableTransport struct {
	countingTransport
	r coordination.Reachability
}

func (t countingReachableTransport) Unreachable(name string) bool { return t.r.Unreachable(name) }

// Close closes the node's copies and its KV store. A closed node is not
// stepped again.
func (n *Node) Close() error {
	if n.closed {
		return nil
	}
	n.closed = true
	n.coord.failAll(ErrNodeClosed)
	var errs []error
	for _, k := range n.sortedCopies() {
		if err := n.copies[k].close(); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, n.kv.Close())
	return errors.Join(errs...)
}

// ErrNodeClosed fails the requests in flight when the node closes.
var ErrNodeClosed = errors.New("clusternode: the node closed")

// CopyInfo describes a copy on this node as its replication sees it: for
// checks and for _cat/shards.
type CopyInfo struct {
	Index        string // uuid
	Shard        routing.ShardID
	AllocationID string
	Primary      bool
	Term         uint64
	// LCP and GCP are the copy's local and global checkpoints; Recovering
	// is set while it receives files (no store open yet).
	LCP, GCP   int64
	Recovering bool
	// Blocked is set while a parent primary holds its writes for its
	// split's hand-off.
	Blocked bool
}

// Copies describes the copies on this node, in index and shard order.
func (n *Node) Copies() []CopyInfo {
	var out []CopyInfo
	for _, k := range n.sortedCopies() {
		lc := n.copies[k]
		ci := CopyInfo{Index: k.index, Shard: k.shard, AllocationID: lc.aid, Recovering: lc.c == nil}
		if lc.c != nil {
			ci.Primary, ci.Term, ci.LCP, ci.GCP = lc.c.IsPrimary(), lc.c.Term(), lc.c.LocalCheckpoint(), lc.c.GlobalCheckpoint()
			ci.Blocked = lc.c.Blocked()
		}
		out = append(out, ci)
	}
	return out
}

// ScanCopy calls fn for every document of the local copy of a shard (for
// checks that copies hold the same documents).
func (n *Node) ScanCopy(indexUUID string, shard routing.ShardID, fn func(storage.Doc) error) error {
	lc := n.copies[copyKey{index: indexUUID, shard: shard}]
	if lc == nil || lc.store == nil {
		return fmt.Errorf("clusternode: no open copy of [%s][%d] on %s", indexUUID, shard, n.cfg.Name)
	}
	return lc.store.Scan(fn)
}
