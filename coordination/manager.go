// Package coordination is the cluster manager: the cluster state
// (package cluster) replicated by raft on every node, and the duties of the
// raft leader that are not state — discovery and bootstrap, joining nodes,
// the failure detector, the read lease it grants, forwarding tasks.
//
// # Contract
//
// Every node of the cluster is a raft member: the cluster-manager-eligible
// nodes named at bootstrap are voters, every other node a learner. So every
// node applies the same committed log in the same order, and "publishing"
// a cluster state is raft's commit: a node acts on a state only once it has
// applied it, and every node applies versions in order. A task is proposed
// once and applied at most once, however often its proposal is retried
// (request ids, see dedup). The raft log, hard state and snapshots are made
// durable (a synced batch of the node's KV store) before any message of the
// same Ready leaves the node.
//
// The manager is a state machine stepped by its node: Step for a message,
// Tick for the passing of time, Propose for a task. It starts no goroutine,
// reads no clock and sends only through the Transport it was given, so a
// simulation drives it tick by tick and message by message.
//
// # Discovery and bootstrap
//
// A node whose log is empty sends hellos to its seed addresses. If a reply
// names a cluster, it joins it. If it is one of the initial cluster
// managers and it has heard from all of them, none in a cluster, it
// bootstraps raft with all of them as voters (each of them does, with the
// same configuration, as etcd's raftexample does), and the first leader
// proposes the Bootstrap task that names the cluster. OpenSearch needs only
// a majority of cluster.initial_cluster_manager_nodes and uses placeholders
// for the rest; raft needs the members' ids, which only a hello gives.
//
// # Failure detection and the read lease
//
// Every node sends the leader a heartbeat each tick. The leader proposes
// NodeLeft for a node it has not heard from for FollowerCheckTicks (on
// election it starts every node's timer afresh). A node holds a read lease
// while a heartbeat it sent less than LeaseTicks ago was acknowledged by a
// leader; with CheckQuorum a leader cut off from a majority steps down
// within ElectionTicks, so with LeaseTicks < FollowerCheckTicks no node is
// declared left, and its primaries replaced, while it still holds a lease.
//
// Concurrency: not safe for concurrent use; its node steps it from one
// goroutine.
package coordination

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/storage"
	"github.com/shardsplit/shardsplit/transport"
)

// Transport is what the manager sends through: by node name, and, for
// discovery, to an address whose node it does not know yet.
type Transport interface {
	transport.Transport
	// SendAddr sends m to whatever node listens at addr.
	SendAddr(addr string, m transport.Message)
	// SetPeer records that the node name listens at addr.
	SetPeer(name, addr string)
}

// Reachability is what a transport over connections knows of a peer: that
// its last attempt to deliver to it failed (refused, reset, timed out). A
// transport without it (the simulation's network) leaves failure
// detection to the follower check alone.
type Reachability interface {
	Unreachable(name string) bool
}

// Config configures a Manager.
type Config struct {
	// Self describes this node: its name, persistent id, this process's
	// incarnation, transport address, and the copies on its disk.
	Self cluster.NodeInfo
	// LocalCopies, if set, lists the copies on the node's disk at the
	// moment a join is sent, which carries them instead of Self.Copies: a
	// node the cluster removed while it ran (unheard) rejoins with what
	// its disk holds now, so that an in-sync copy there can be chosen as
	// its shard's primary.
	LocalCopies func() []cluster.LocalCopy
	// ClusterName is cluster.name, recorded by the bootstrap.
	ClusterName string
	// Seeds are discovery.seed_hosts: transport addresses.
	Seeds []string
	// InitialManagers are cluster.initial_cluster_manager_nodes: the names
	// of the voters a new cluster bootstraps with.
	InitialManagers []string
	KV              *storage.KV
	Transport       Transport
	Logger          *zap.Logger
	// NewClusterUUID names a new cluster (random in processes, from the
	// seed in the simulation).
	NewClusterUUID func() string
	// Rand draws election timeouts (seeded in the simulation).
	Rand *rand.Rand

	ElectionTicks      int // raft's election timeout; default 10
	HeartbeatTicks     int // raft's heartbeat interval; default 1
	FollowerCheckTicks int // a node unheard this long is proposed NodeLeft; default 10
	// FollowerTimeoutTicks: with a transport that knows Reachability, a
	// node unheard for FollowerCheckTicks is proposed NodeLeft only once
	// the transport cannot reach it, or once it has been unheard this long
	// (default 10·FollowerCheckTicks): a node whose process died is
	// removed at once, one that is alive but busy (a long fsync, a GC
	// pause) is not, as OpenSearch's FollowersChecker fails a node at
	// once on a disconnect and otherwise after its retries time out.
	FollowerTimeoutTicks int
	LeaseTicks           int // a read lease lasts this long from its heartbeat; default FollowerCheckTicks/2
	RetryTicks           int // proposals, joins and hellos are resent this often; default 5
	SnapshotEntries      uint64
	// TickDuration is how long a tick is (default 100 ms): the leader
	// counts an index's delayed_timeout in ticks of it.
	TickDuration time.Duration
}

func (c *Config) fill() {
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.ElectionTicks == 0 {
		c.ElectionTicks = 10
	}
	if c.HeartbeatTicks == 0 {
		c.HeartbeatTicks = 1
	}
	if c.FollowerCheckTicks == 0 {
		c.FollowerCheckTicks = 10
	}
	if c.FollowerTimeoutTicks == 0 {
		c.FollowerTimeoutTicks = 10 * c.FollowerCheckTicks
	}
	if c.LeaseTicks == 0 {
		c.LeaseTicks = max(1, c.FollowerCheckTicks/2)
	}
	if c.RetryTicks == 0 {
		c.RetryTicks = 5
	}
	if c.SnapshotEntries == 0 {
		c.SnapshotEntries = 1000
	}
	if c.TickDuration == 0 {
		c.TickDuration = 100 * time.Millisecond
	}
}

// raftElectionTicks is the election timeout raft itself is given: never
// reached. raft draws its randomized election timeout from crypto/rand,
// which a seeded simulation cannot replay, so the manager keeps the
// election timer itself (campaignAt, from Config.Rand) and checks the
// leader's quorum itself (hasQuorum), which is what raft's CheckQuorum
// would do with ElectionTicks.
const raftElectionTicks = 1 << 30

// RaftID is the raft member id of the node with the given persistent id:
// never 0, the same on every node and across restarts.
func RaftID(nodeID string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(nodeID))
	return h.Sum64() | 1
}

// ErrRefused is the cause of a Fatal: the cluster refused this node for
// good (another cluster's data directory, or a name another node has).
var ErrRefused = errors.New("coordination: the cluster refused this node")

// Result is the outcome of a proposed task.
type Result struct {
	Index   uint64         // the raft index at which it was applied
	State   *cluster.State // the state right after it
	Err     error          // the task's refusal (a *cluster.RefusedError), nil if applied
	Retries int            // how often the proposal was resent
}

type proposal struct {
	data     []byte
	done     func(Result)
	sentTick uint64
	retries  int
}

// Manager is one node's part of the cluster manager.
type Manager struct {
	cfg  Config
	log  *zap.Logger
	rlog *raftLog
	rn   *raft.RawNode

	state     *cluster.State                // the last applied state
	shared    atomic.Pointer[cluster.State] // state, for readers on other goroutines
	applied   uint64                        // the raft index of state
	confState *pb.ConfState
	dedup     dedup

	tick      uint64
	names     map[uint64]string // raft id → node name
	addrs     map[string]string // node name → transport address
	heard     map[string]hello  // discovery: who answered
	heardTick map[string]uint64 // and when
	fatal     error
	onApply   []func(prev, next *cluster.State)
	nextReq   uint64
	pending   map[string]*proposal
	lastJoin  uint64
	lastHelo  uint64
	lastBoot  uint64
	// foreignSince is when this node first heard only other clusters.
	foreignSince uint64

	// The leader's bookkeeping, reset on every election.
	leaderTerm uint64
	lastSeen   map[string]uint64 // node name → tick of its last heartbeat
	// lastEphemeral is the incarnation lastSeen speaks of.
	lastEphemeral map[string]string
	appliedBy     map[string]uint64 // node name → raft index it reported applied
	leaving       map[string]uint64 // NodeLeft proposed at this tick
	// delayedSince is when this leader first saw replicas waiting for a
	// node that left (by node name), and lastExpire when it last proposed
	// to stop waiting.
	delayedSince map[string]uint64
	lastExpire   uint64
	// retriedAt is the state version this leader last proposed a Reroute
	// at for copies a failure left unassigned (retryFailed).
	retriedAt uint64

	// The follower's side: heartbeats in flight, the read lease.
	hbSeq      uint64
	hbSent     map[uint64]uint64 // heartbeat seq → tick sent
	leaseUntil uint64            // ticks; a read lease holds while tick < leaseUntil
	minApplied uint64            // the cluster-wide applied index the leader last reported

	// The election timer and the quorum check (see raftElectionTicks).
	heardAt    map[uint64]uint64 // raft id → tick of its last raft message here
	contact    uint64            // tick of the last message from the leader, or of the last reset
	campaignAt uint64            // a voter with no leader contact since contact campaigns at this tick
}

// Open loads the node's raft state from its KV store and makes its raft
// member. It does not bootstrap or join: Tick does that once discovery
// allows.
func Open(cfg Config) (*Manager, error) {
	cfg.fill()
	if cfg.Self.Name == "" || cfg.Self.ID == "" {
		return nil, fmt.Errorf("coordination: a node needs a name and an id")
	}
	if cfg.Rand == nil || cfg.NewClusterUUID == nil {
		return nil, fmt.Errorf("coordination: a node needs a Rand and NewClusterUUID (its randomness is the caller's)")
	}
	rlog, err := openRaftLog(cfg.KV)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		cfg: cfg, log: cfg.Logger, rlog: rlog,
		state:     &cluster.State{Nodes: map[string]cluster.NodeInfo{}},
		names:     map[uint64]string{},
		addrs:     map[string]string{},
		heard:     map[string]hello{},
		heardTick: map[string]uint64{},
		pending:   map[string]*proposal{},
		hbSent:    map[uint64]uint64{},
		heardAt:   map[uint64]uint64{},
	}
	m.shared.Store(m.state)
	m.cfg.Self.RaftID = RaftID(cfg.Self.ID)
	m.names[m.cfg.Self.RaftID] = cfg.Self.Name
	snap, err := rlog.mem.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("coordination: load snapshot: %w", err)
	}
	if !raft.IsEmptySnap(snap) {
		if err := m.restore(snap); err != nil {
			return nil, err
		}
	}
	if !rlog.empty() {
		if err := m.startRaft(nil); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// startRaft makes the raft member; peers bootstraps a new cluster's log.
func (m *Manager) startRaft(peers []raft.Peer) error {
	rn, err := raft.NewRawNode(&raft.Config{
		ID:              m.cfg.Self.RaftID,
		ElectionTick:    raftElectionTicks,
		HeartbeatTick:   m.cfg.HeartbeatTicks,
		Storage:         m.rlog.mem,
		Applied:         m.applied,
		MaxSizePerMsg:   1 << 20,
		MaxInflightMsgs: 256,
		PreVote:         true,
		Logger:          raftLogger{m.log.Sugar()},
	})
	if err != nil {
		return fmt.Errorf("coordination: start raft: %w", err)
	}
	if peers != nil {
		if err := rn.Bootstrap(peers); err != nil {
			return fmt.Errorf("coordination: bootstrap raft: %w", err)
		}
	}
	m.rn = rn
	m.resetElectionTimer()
	return nil
}

// resetElectionTimer draws the next election timeout, in
// [ElectionTicks, 2·ElectionTicks) as raft's randomized one.
func (m *Manager) resetElectionTimer() {
	m.contact = m.tick
	m.campaignAt = m.tick + uint64(m.cfg.ElectionTicks+m.cfg.Rand.IntN(m.cfg.ElectionTicks))
}

// electionTick campaigns when a voter has heard nothing from a leader for
// its election timeout.
func (m *Manager) electionTick() {
	st := m.rn.BasicStatus()
	if st.RaftState == raft.StateLeader {
		m.resetElectionTimer()
		return
	}
	if st.Lead != 0 && m.heardAt[st.Lead] > m.contact {
		m.resetElectionTimer()
		return
	}
	if m.tick < m.campaignAt || m.confState == nil || !slices.Contains(m.confState.GetVoters(), m.cfg.Self.RaftID) {
		return
	}
	m.resetElectionTimer()
	if err := m.rn.Campaign(); err != nil {
		m.log.Debug("campaign", zap.Error(err))
	}
}

// hasQuorum reports whether a majority of the voters (this node counted)
// sent this node a raft message within the election timeout: a leader
// without one must not act as the leader, as raft's CheckQuorum would have
// it step down.
func (m *Manager) hasQuorum() bool {
	if m.confState == nil {
		return false
	}
	voters := m.confState.GetVoters()
	n := 0
	for _, v := range voters {
		if v == m.cfg.Self.RaftID || m.tick-m.heardAt[v] < uint64(m.cfg.ElectionTicks) {
			n++
		}
	}
	return n > len(voters)/2
}

// State returns the last applied cluster state. It is never modified.
func (m *Manager) State() *cluster.State { return m.state }

// SharedState returns the last applied cluster state; unlike the rest of
// the manager it may be called from any goroutine (a state is never
// modified once applied).
func (m *Manager) SharedState() *cluster.State { return m.shared.Load() }

// Applied returns the raft index of State.
func (m *Manager) Applied() uint64 { return m.applied }

// MinApplied returns the smallest raft index every node of the cluster had
// applied when the leader last said: a task at or below it is acknowledged
// by every node (OpenSearch's AckedClusterStateUpdateTask).
func (m *Manager) MinApplied() uint64 { return m.minApplied }

// Fatal returns why the cluster refused this node, or nil.
func (m *Manager) Fatal() error { return m.fatal }

// OnApply registers fn to run after every applied state change, with the
// states before and after, in log order.
func (m *Manager) OnApply(fn func(prev, next *cluster.State)) { m.onApply = append(m.onApply, fn) }

// Leader returns the name of the leader this node knows, or "": itself
// while it leads with a quorum, another node it heard from within two
// election timeouts. A leader cut off from the voters is no leader here,
// though raft would let it think it is until it hears of a newer term.
func (m *Manager) Leader() string {
	if m.rn == nil {
		return ""
	}
	st := m.rn.BasicStatus()
	switch {
	case st.RaftState == raft.StateLeader:
		if m.hasQuorum() {
			return m.cfg.Self.Name
		}
		return ""
	case st.Lead == 0:
		return ""
	case m.tick-m.heardAt[st.Lead] >= uint64(2*m.cfg.ElectionTicks):
		return ""
	}
	return m.names[st.Lead]
}

// IsLeader reports whether this node is the raft leader and has heard from
// a quorum of the voters within the election timeout.
func (m *Manager) IsLeader() bool {
	return m.rn != nil && m.rn.BasicStatus().RaftState == raft.StateLeader && m.hasQuorum()
}

// raftLeader reports whether raft has this node as its leader, whether
// or not it heard from a quorum lately: proposals go to raft's leader,
// which commits them once it has one.
func (m *Manager) raftLeader() bool {
	return m.rn != nil && m.rn.BasicStatus().RaftState == raft.StateLeader
}

// HasLease reports whether this node holds a read lease: a leader
// acknowledged one of its heartbeats recently enough that no node can have
// been declared left in its place.
func (m *Manager) HasLease() bool {
	if m.IsLeader() {
		return true
	}
	return m.tick < m.leaseUntil
}

// Propose proposes t and calls done once this node applied it (or the
// manager closed). The proposal is resent until applied: its request id
// makes a task applied twice take effect once.
func (m *Manager) Propose(t cluster.Task, done func(Result)) {
	m.nextReq++
	req := m.cfg.Self.Name + "/" + m.cfg.Self.EphemeralID + "/" + strconv.FormatUint(m.nextReq, 10)
	data, err := json.Marshal(entry{Req: req, From: m.cfg.Self.Name, Task: t})
	if err != nil {
		done(Result{Err: fmt.Errorf("coordination: encode task: %w", err)})
		return
	}
	p := &proposal{data: data, done: done}
	m.pending[req] = p
	m.send(p)
}

// send proposes p through raft here, or forwards it to the leader.
func (m *Manager) send(p *proposal) {
	p.sentTick = m.tick
	if m.rn == nil {
		return
	}
	if m.raftLeader() {
		if err := m.rn.Propose(p.data); err != nil {
			m.log.Debug("proposal dropped", zap.Error(err))
		}
		return
	}
	if lead := m.Leader(); lead != "" && lead != m.cfg.Self.Name {
		m.sendTo(lead, KindPropose, proposeRequest{Cluster: m.state.ClusterUUID, Entry: p.data})
	}
}

// Tick advances the manager by one tick: raft's clock, discovery, joining,
// heartbeats, the leader's failure detector, resent proposals.
func (m *Manager) Tick() {
	m.tick++
	if m.fatal != nil {
		return
	}
	if m.rn == nil {
		m.discover()
		return
	}
	m.rn.Tick()
	m.electionTick()
	if m.Leader() == "" || !m.joined() {
		m.helloSeeds()
		m.checkForeign()
	}
	m.maybeJoin()
	m.heartbeat()
	if m.IsLeader() {
		m.leaderTick()
	}
	for _, p := range m.sortedPending() {
		if m.tick-p.sentTick >= uint64(m.cfg.RetryTicks) {
			p.retries++
			m.send(p)
		}
	}
	m.ready()
}

func (m *Manager) sortedPending() []*proposal {
	reqs := make([]string, 0, len(m.pending))
	for r := range m.pending {
		reqs = append(reqs, r)
	}
	slices.Sort(reqs)
	out := make([]*proposal, len(reqs))
	for i, r := range reqs {
		out[i] = m.pending[r]
	}
	return out
}

// Step takes one message addressed to the manager (a cm/* kind).
func (m *Manager) Step(msg transport.Message) {
	if m.fatal != nil {
		return
	}
	switch msg.Kind {
	case KindHello:
		var h hello
		if m.decode(msg, &h) {
			m.onHello(msg.From, h)
		}
	case KindRaft:
		var env raftEnvelope
		if !m.decode(msg, &env) || !m.sameCluster(env.Cluster, msg) || m.rn == nil {
			return
		}
		var rm pb.Message
		if err := proto.Unmarshal(env.Data, &rm); err != nil {
			m.log.Warn("undecodable raft message", zap.String("from", msg.From), zap.Error(err))
			return
		}
		m.names[rm.GetFrom()] = msg.From
		m.heardAt[rm.GetFrom()] = m.tick
		if err := m.rn.Step(&rm); err != nil {
			m.log.Debug("raft step", zap.Error(err))
		}
	case KindJoin:
		var j joinRequest
		if m.decode(msg, &j) && m.sameCluster(j.Cluster, msg) {
			m.onJoin(j)
		}
	case KindJoinRefused:
		var r joinRefused
		if m.decode(msg, &r) {
			m.fatal = fmt.Errorf("%w: %s", ErrRefused, r.Reason)
			m.log.Error("the cluster refused this node", zap.String("reason", r.Reason))
		}
	case KindPropose:
		var p proposeRequest
		if m.decode(msg, &p) && m.sameCluster(p.Cluster, msg) && m.rn != nil {
			if m.raftLeader() {
				_ = m.rn.Propose(p.Entry)
			} else if lead := m.Leader(); lead != "" && lead != msg.From && lead != m.cfg.Self.Name {
				m.sendTo(lead, KindPropose, p)
			}
		}
	case KindHeartbeat:
		var h heartbeat
		if m.decode(msg, &h) && m.sameCluster(h.Cluster, msg) {
			m.onHeartbeat(h)
		}
	case KindHeartbeatAck:
		var a heartbeatAck
		if m.decode(msg, &a) && m.sameCluster(a.Cluster, msg) {
			m.onHeartbeatAck(a)
		}
	default:
		m.log.Warn("unknown cluster-manager message", zap.String("kind", msg.Kind), zap.String("from", msg.From))
		return
	}
	if m.rn != nil {
		m.ready()
	}
}

func (m *Manager) decode(msg transport.Message, v any) bool {
	if err := msg.Decode(v); err != nil {
		m.log.Warn("undecodable cluster-manager message", zap.String("kind", msg.Kind), zap.String("from", msg.From), zap.Error(err))
		return false
	}
	return true
}

// sameCluster drops a message from another cluster: both named, and not
// the same.
func (m *Manager) sameCluster(uuid string, msg transport.Message) bool {
	if uuid == "" || m.state.ClusterUUID == "" || uuid == m.state.ClusterUUID {
		return true
	}
	m.log.Warn("dropped a message from another cluster", zap.String("from", msg.From), zap.String("kind", msg.Kind),
		zap.String("their_cluster", uuid), zap.String("cluster", m.state.ClusterUUID))
	return false
}

func (m *Manager) sendTo(name, kind string, body any) {
	msg, err := transport.NewMessage(m.cfg.Self.Name, name, kind, body)
	if err != nil {
		m.log.Error("encode cluster-manager message", zap.String("kind", kind), zap.Error(err))
		return
	}
	m.cfg.Transport.Send(msg)
}

func (m *Manager) learnPeer(name, addr string) {
	if name == "" || addr == "" || name == m.cfg.Self.Name || m.addrs[name] == addr {
		return
	}
	m.addrs[name] = addr
	m.cfg.Transport.SetPeer(name, addr)
}

func (m *Manager) myHello(reply bool) hello {
	return hello{Cluster: m.state.ClusterUUID, Name: m.cfg.Self.Name, ID: m.cfg.Self.ID, RaftID: m.cfg.Self.RaftID,
		Addr: m.cfg.Self.TransportAddr, Manager: m.cfg.Self.Manager, Reply: reply}
}

// helloSeeds says hello to the seed addresses, every RetryTicks. A member
// keeps doing it while it knows no leader or is not recorded under this
// incarnation: after a restart its peers may listen at other addresses
// than the ones its log names.
func (m *Manager) helloSeeds() {
	if m.lastHelo != 0 && m.tick-m.lastHelo < uint64(m.cfg.RetryTicks) {
		return
	}
	m.lastHelo = m.tick
	for _, addr := range m.cfg.Seeds {
		if addr == m.cfg.Self.TransportAddr {
			continue
		}
		msg, err := transport.NewMessage(m.cfg.Self.Name, addr, KindHello, m.myHello(false))
		if err == nil {
			msg.To = "" // whoever listens at addr: its name is what discovery learns
			m.cfg.Transport.SendAddr(addr, msg)
		}
	}
}

// foreignTicks: a member that has heard only nodes of another cluster for
// this long, and no leader of its own, was started with another cluster's
// data directory (or seeds).
const foreignTicks = 30

// checkForeign refuses the node for good when every node its seeds
// answered for belongs to another cluster than its data directory's, and
// it has no leader: it would never serve, and its operator must know why.
func (m *Manager) checkForeign() {
	if m.state.ClusterUUID == "" || len(m.heard) == 0 {
		return
	}
	other := ""
	for _, name := range sortedKeys(m.heard) {
		h := m.heard[name]
		if m.tick-m.heardTick[name] > uint64(3*m.cfg.RetryTicks) {
			continue // not heard lately
		}
		if h.Cluster == m.state.ClusterUUID || h.Cluster == "" {
			m.foreignSince = 0
			return
		}
		other = h.Cluster
	}
	if other == "" {
		return
	}
	if m.foreignSince == 0 {
		m.foreignSince = m.tick
	}
	if m.tick-m.foreignSince >= foreignTicks {
		m.fatal = fmt.Errorf("%w: its data directory belongs to cluster [%s], but its seed hosts answer for cluster [%s]",
			ErrRefused, m.state.ClusterUUID, other)
		m.log.Error("refusing to take part", zap.Error(m.fatal))
	}
}

// joined reports whether the applied state records this node under its
// incarnation.
func (m *Manager) joined() bool {
	n, ok := m.state.Nodes[m.cfg.Self.Name]
	return ok && n.ID == m.cfg.Self.ID && n.EphemeralID == m.cfg.Self.EphemeralID
}

// discover says hello to the seeds, then bootstraps or joins.
func (m *Manager) discover() {
	m.helloSeeds()
	for _, h := range m.heard {
		if h.Cluster != "" {
			m.log.Info("found a cluster; joining", zap.String("cluster", h.Cluster), zap.String("via", h.Name))
			if err := m.startRaft(nil); err != nil {
				m.fatal = err
				return
			}
			m.maybeJoin()
			return
		}
	}
	if !slices.Contains(m.cfg.InitialManagers, m.cfg.Self.Name) {
		return
	}
	peers := []raft.Peer{{ID: m.cfg.Self.RaftID}}
	for _, name := range m.cfg.InitialManagers {
		if name == m.cfg.Self.Name {
			continue
		}
		h, ok := m.heard[name]
		if !ok {
			return // wait to hear from every initial cluster manager
		}
		peers = append(peers, raft.Peer{ID: h.RaftID})
	}
	slices.SortFunc(peers, func(a, b raft.Peer) int { return cmpUint64(a.ID, b.ID) })
	m.log.Info("bootstrapping a new cluster", zap.Strings("initial_cluster_managers", m.cfg.InitialManagers))
	if err := m.startRaft(peers); err != nil {
		m.fatal = err
		return
	}
	m.ready()
}

func cmpUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// onHello records who answered discovery and answers a hello, to the
// sender's address: its name may be one the cluster knows under another
// id, whose address must not be taken over by a newcomer's hello.
func (m *Manager) onHello(from string, h hello) {
	if h.Name == m.cfg.Self.Name && h.ID == m.cfg.Self.ID {
		return
	}
	if known, ok := m.state.Nodes[h.Name]; !ok || known.ID == h.ID {
		m.learnPeer(h.Name, h.Addr)
		m.names[h.RaftID] = h.Name
	}
	m.heard[h.Name] = h
	m.heardTick[h.Name] = m.tick
	if !h.Reply {
		msg, err := transport.NewMessage(m.cfg.Self.Name, h.Name, KindHello, m.myHello(true))
		if err == nil {
			m.cfg.Transport.SendAddr(h.Addr, msg)
		}
	}
}

// maybeJoin asks the leader, every RetryTicks, to record this node (its
// incarnation and copies) until the applied state does.
func (m *Manager) maybeJoin() {
	if m.state.ClusterUUID == "" && m.rn != nil && m.rn.BasicStatus().Lead == 0 && len(m.heard) == 0 {
		return
	}
	if m.joined() {
		return
	}
	if m.lastJoin != 0 && m.tick-m.lastJoin < uint64(m.cfg.RetryTicks) {
		return
	}
	m.lastJoin = m.tick
	self := m.cfg.Self
	if m.cfg.LocalCopies != nil {
		self.Copies = m.cfg.LocalCopies()
	}
	j := joinRequest{Cluster: m.state.ClusterUUID, Node: self}
	if lead := m.Leader(); lead != "" {
		if lead == m.cfg.Self.Name {
			m.onJoin(j)
		} else {
			m.sendTo(lead, KindJoin, j)
		}
		return
	}
	// No leader known (a new member): ask every node that said hello.
	for _, name := range sortedKeys(m.heard) {
		m.sendTo(name, KindJoin, j)
	}
}

func sortedKeys[V any](mp map[string]V) []string {
	ks := make([]string, 0, len(mp))
	for k := range mp {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// onJoin, on the leader, adds a node: a raft learner if it is no member
// yet, and the NodeJoined task; a non-leader passes it on.
func (m *Manager) onJoin(j joinRequest) {
	if m.rn == nil {
		return
	}
	if !m.IsLeader() {
		if lead := m.Leader(); lead != "" && lead != m.cfg.Self.Name {
			m.sendTo(lead, KindJoin, j)
		}
		return
	}
	if old, ok := m.state.Nodes[j.Node.Name]; ok && old.ID != j.Node.ID {
		// A second node of a taken name. While the first is alive it is
		// refused for good (its answer goes to its address, not to the
		// name, which is the first node's); once the first is declared
		// left, the name is free again.
		if old.Name == m.cfg.Self.Name || m.tick-m.lastSeen[j.Node.Name] < uint64(m.cfg.FollowerCheckTicks) {
			reason := fmt.Sprintf("a node named [%s] with id [%s] is already in the cluster; node [%s] with id [%s] is refused",
				old.Name, old.ID, j.Node.Name, j.Node.ID)
			msg, err := transport.NewMessage(m.cfg.Self.Name, j.Node.Name, KindJoinRefused,
				joinRefused{Cluster: m.state.ClusterUUID, Reason: reason})
			if err == nil {
				m.cfg.Transport.SendAddr(j.Node.TransportAddr, msg)
			}
		}
		return
	}
	m.learnPeer(j.Node.Name, j.Node.TransportAddr)
	j.Node.RaftID = RaftID(j.Node.ID)
	m.names[j.Node.RaftID] = j.Node.Name
	if !m.isMember(j.Node.RaftID) {
		cc := &pb.ConfChange{Type: pb.ConfChangeAddLearnerNode.Enum(), NodeId: proto.Uint64(j.Node.RaftID)}
		if err := m.rn.ProposeConfChange(cc); err != nil {
			m.log.Debug("conf change dropped", zap.Error(err))
		}
	}
	// Each join proposal is a request of its own: a node declared left and
	// back under the same incarnation must be added again.
	req := fmt.Sprintf("join/%s/%s/%d/%d", j.Node.Name, j.Node.EphemeralID, m.leaderTerm, m.tick)
	data, err := json.Marshal(entry{Req: req, From: m.cfg.Self.Name,
		Task: cluster.Task{NodeJoined: &cluster.NodeJoined{Node: j.Node}}})
	if err == nil {
		_ = m.rn.Propose(data)
	}
}

func (m *Manager) isMember(id uint64) bool {
	if m.confState == nil {
		return false
	}
	return slices.Contains(m.confState.GetVoters(), id) || slices.Contains(m.confState.GetLearners(), id)
}

// heartbeat sends this node's follower check to the leader.
func (m *Manager) heartbeat() {
	lead := m.Leader()
	if lead == "" || lead == m.cfg.Self.Name || m.state.ClusterUUID == "" {
		return
	}
	m.hbSeq++
	m.hbSent[m.hbSeq] = m.tick
	for seq, at := range m.hbSent {
		if m.tick-at > uint64(m.cfg.LeaseTicks) {
			delete(m.hbSent, seq)
		}
	}
	m.sendTo(lead, KindHeartbeat, heartbeat{Cluster: m.state.ClusterUUID, Name: m.cfg.Self.Name, ID: m.cfg.Self.ID,
		Seq: m.hbSeq, Applied: m.applied})
}

func (m *Manager) onHeartbeat(h heartbeat) {
	if !m.IsLeader() {
		return
	}
	m.leadership()
	n, ok := m.state.Nodes[h.Name]
	if !ok || n.ID != h.ID {
		return // not a member under that id (yet): it joins first
	}
	m.lastSeen[h.Name] = m.tick
	m.appliedBy[h.Name] = max(m.appliedBy[h.Name], h.Applied)
	m.sendTo(h.Name, KindHeartbeatAck, heartbeatAck{Cluster: m.state.ClusterUUID, Seq: h.Seq,
		Term: m.rn.BasicStatus().GetTerm(), MinApplied: m.clusterMinApplied()})
}

func (m *Manager) onHeartbeatAck(a heartbeatAck) {
	sent, ok := m.hbSent[a.Seq]
	if !ok {
		return
	}
	m.leaseUntil = max(m.leaseUntil, sent+uint64(m.cfg.LeaseTicks))
	m.minApplied = max(m.minApplied, a.MinApplied)
}

// clusterMinApplied is the smallest index applied by the nodes of the
// state, as far as the leader heard.
func (m *Manager) clusterMinApplied() uint64 {
	low := m.applied
	for name := range m.state.Nodes {
		if name == m.cfg.Self.Name {
			continue
		}
		low = min(low, m.appliedBy[name])
	}
	return low
}

// leaderTick runs the leader's duties: bootstrap the cluster's state, and
// propose NodeLeft for nodes it has not heard from.
func (m *Manager) leaderTick() {
	m.leadership()
	if m.state.ClusterUUID == "" && m.applied >= m.rn.BasicStatus().GetCommit() &&
		(m.lastBoot == 0 || m.tick-m.lastBoot >= uint64(m.cfg.RetryTicks)) {
		m.lastBoot = m.tick
		// The first leader names the cluster and records itself; the
		// other nodes join.
		m.proposeOnce("bootstrap", cluster.Task{Bootstrap: &cluster.Bootstrap{
			ClusterName: m.cfg.ClusterName, ClusterUUID: m.cfg.NewClusterUUID(), Nodes: []cluster.NodeInfo{m.cfg.Self}}})
	}
	m.minApplied = max(m.minApplied, m.clusterMinApplied())
	m.expireDelayed()
	m.retryFailed()
	for _, name := range sortedKeys(m.state.Nodes) {
		if name == m.cfg.Self.Name {
			continue
		}
		// A node seen for the first time, or back under a new
		// incarnation, gets a full follower-check period: its old
		// incarnation's silence is not its own.
		seen, ok := m.lastSeen[name]
		if eph := m.state.Nodes[name].EphemeralID; !ok || m.lastEphemeral[name] != eph {
			m.lastSeen[name], m.lastEphemeral[name] = m.tick, eph
			continue
		}
		if m.tick-seen < uint64(m.cfg.FollowerCheckTicks) {
			continue
		}
		if r, ok := m.cfg.Transport.(Reachability); ok && !r.Unreachable(name) && m.tick-seen < uint64(m.cfg.FollowerTimeoutTicks) {
			continue // alive as far as its connections tell: busy, not gone
		}
		if at, ok := m.leaving[name]; ok && m.tick-at < uint64(m.cfg.RetryTicks) {
			continue
		}
		m.leaving[name] = m.tick
		m.log.Info("node failed its follower checks; removing it", zap.String("node", name),
			zap.Uint64("unheard_ticks", m.tick-seen))
		m.proposeOnce(fmt.Sprintf("left/%s/%s/%d/%d", name, m.state.Nodes[name].EphemeralID, m.leaderTerm, m.tick), cluster.Task{NodeLeft: &cluster.NodeLeft{
			Name: name, EphemeralID: m.state.Nodes[name].EphemeralID, Reason: "followers check retry count exceeded"}})
	}
}

// leadership resets the leader's bookkeeping when this node's leadership
// is new: every node gets a full follower-check period.
func (m *Manager) leadership() {
	term := m.rn.BasicStatus().GetTerm()
	if term == m.leaderTerm {
		return
	}
	m.leaderTerm = term
	m.lastSeen = map[string]uint64{}
	m.appliedBy = map[string]uint64{}
	m.leaving = map[string]uint64{}
	m.delayedSince = map[string]uint64{}
	m.lastEphemeral = map[string]string{}
	for name := range m.state.Nodes {
		m.lastSeen[name] = m.tick
	}
}

// expireDelayed proposes that the replicas waiting for a node that left be
// built elsewhere once they waited their index's delayed_timeout
// (DelayedAllocationService's scheduled reroute).
func (m *Manager) expireDelayed() {
	due := map[string]bool{}
	waiting := map[string]bool{}
	for sc := range m.state.AllCopies() {
		c := sc.Copy
		if !c.Delayed {
			continue
		}
		if _, back := m.state.Nodes[c.LastNode]; back {
			continue
		}
		waiting[c.LastNode] = true
		since, ok := m.delayedSince[c.LastNode]
		if !ok {
			m.delayedSince[c.LastNode] = m.tick
			since = m.tick
		}
		if m.tick-since >= uint64(cluster.DelayedTimeout(m.state.Indices[sc.Index])/m.cfg.TickDuration) {
			due[c.LastNode] = true
		}
	}
	for node := range m.delayedSince {
		if !waiting[node] {
			delete(m.delayedSince, node)
		}
	}
	if len(due) == 0 || (m.lastExpire != 0 && m.tick-m.lastExpire < uint64(m.cfg.RetryTicks)) {
		return
	}
	m.lastExpire = m.tick
	nodes := sortedKeys(due)
	m.log.Info("delayed replicas waited out their timeout; allocating them elsewhere", zap.Strings("nodes", nodes))
	m.proposeOnce(fmt.Sprintf("expire/%v/%d/%d", nodes, m.leaderTerm, m.tick), cluster.Task{Reroute: &cluster.Reroute{
		Reason: "delayed allocation timed out", ExpireDelayed: nodes}})
}

// retryFailed proposes a Reroute when a failure left a copy unassigned
// with nowhere to go in its round (the node it failed on is excluded
// there, and was the only one allowed, or held the primary's only valid
// copy): the next round may put it back.
// One per state that did not come from its own reroute, so a copy that
// stays unassignable costs one entry, not one a tick.
func (m *Manager) retryFailed() {
	if m.state.Version <= m.retriedAt+1 && m.retriedAt != 0 {
		return
	}
	for sc := range m.state.AllCopies() {
		c := sc.Copy
		if c.State == cluster.Unassigned && !c.Delayed && c.FailedAllocations > 0 && c.FailedAllocations < cluster.MaxRetries &&
			(c.AllocationStatus == cluster.StatusDecidersNo || c.AllocationStatus == cluster.StatusNoValidShardCopy) {
			m.retriedAt = m.state.Version
			m.proposeOnce(fmt.Sprintf("retry/%d/%d", m.state.Version, m.leaderTerm), cluster.Task{Reroute: &cluster.Reroute{
				Reason: "retry the copies a failure left unassigned"}})
			return
		}
	}
}

// proposeOnce proposes a task of the leader's own, with a request id that
// names what it is about, so the same decision taken twice applies once.
func (m *Manager) proposeOnce(req string, t cluster.Task) {
	data, err := json.Marshal(entry{Req: req, From: m.cfg.Self.Name, Task: t})
	if err != nil {
		m.log.Error("encode task", zap.Error(err))
		return
	}
	_ = m.rn.Propose(data)
}

// ready processes raft's Ready until it has none: persist, send, apply.
func (m *Manager) ready() {
	for m.rn.HasReady() {
		rd := m.rn.Ready()
		if err := m.rlog.save(rd.HardState, rd.Entries, rd.Snapshot); err != nil {
			// The node cannot make its raft state durable: it must stop
			// taking part rather than send what it did not persist.
			m.fatal = err
			m.log.Error("raft state not durable; leaving the cluster", zap.Error(err))
			return
		}
		if rd.Snapshot != nil && !raft.IsEmptySnap(rd.Snapshot) {
			if err := m.restore(rd.Snapshot); err != nil {
				m.fatal = err
				return
			}
		}
		for _, msg := range rd.Messages {
			m.sendRaft(msg)
		}
		for _, e := range rd.CommittedEntries {
			if err := m.applyEntry(e); err != nil {
				m.fatal = err
				m.log.Error("apply committed entry", zap.Uint64("index", e.GetIndex()), zap.Error(err))
				return
			}
		}
		m.rn.Advance(rd)
		m.maybeSnapshot()
	}
}

func (m *Manager) sendRaft(msg *pb.Message) {
	name, ok := m.names[msg.GetTo()]
	if !ok {
		m.log.Debug("raft message to an unknown member", zap.Uint64("to", msg.GetTo()))
		return
	}
	data, err := proto.Marshal(msg)
	if err != nil {
		m.log.Error("encode raft message", zap.Error(err))
		return
	}
	m.sendTo(name, KindRaft, raftEnvelope{Cluster: m.state.ClusterUUID, Data: data})
}

// applyEntry applies one committed entry: a configuration change to raft,
// a task to the cluster state.
func (m *Manager) applyEntry(e *pb.Entry) error {
	defer func() { m.applied = e.GetIndex() }()
	switch e.GetType() {
	case pb.EntryConfChange:
		var cc pb.ConfChange
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			return fmt.Errorf("coordination: decode conf change: %w", err)
		}
		m.confState = m.rn.ApplyConfChange(&cc)
		return nil
	case pb.EntryConfChangeV2:
		var cc pb.ConfChangeV2
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			return fmt.Errorf("coordination: decode conf change: %w", err)
		}
		m.confState = m.rn.ApplyConfChange(&cc)
		return nil
	}
	if len(e.GetData()) == 0 {
		return nil // a new leader's empty entry
	}
	var en entry
	if err := json.Unmarshal(e.GetData(), &en); err != nil {
		return fmt.Errorf("coordination: decode entry %d: %w", e.GetIndex(), err)
	}
	res, seen := m.dedup.get(en.Req)
	if !seen {
		prev := m.state
		next, err := cluster.Apply(prev, en.Task)
		res = dedupResult{Index: e.GetIndex()}
		if err != nil {
			var refused *cluster.RefusedError
			if !errors.As(err, &refused) {
				refused = &cluster.RefusedError{Refusal: cluster.RefusedInvalid, Message: err.Error()}
			}
			res.Err = refused
		} else {
			m.state = next
			m.shared.Store(next)
			for _, h := range next.Nodes {
				m.names[h.RaftID] = h.Name
				m.learnPeer(h.Name, h.TransportAddr)
			}
			for _, fn := range m.onApply {
				fn(prev, next)
			}
		}
		m.dedup.put(en.Req, res)
	}
	if p, ok := m.pending[en.Req]; ok {
		delete(m.pending, en.Req)
		r := Result{Index: res.Index, State: m.state, Retries: p.retries}
		if res.Err != nil {
			r.Err = res.Err
		}
		p.done(r)
	}
	return nil
}

// snapshotData is what a snapshot holds: the state and the request ids
// already applied, so a retried proposal stays applied once after a
// restart from the snapshot.
type snapshotData struct {
	State *cluster.State `json:"state"`
	Dedup dedup          `json:"dedup"`
}

func (m *Manager) maybeSnapshot() {
	snap, _ := m.rlog.mem.Snapshot()
	if m.applied < snap.GetMetadata().GetIndex()+m.cfg.SnapshotEntries || m.confState == nil {
		return
	}
	data, err := json.Marshal(snapshotData{State: m.state, Dedup: m.dedup})
	if err != nil {
		m.log.Error("encode snapshot", zap.Error(err))
		return
	}
	if err := m.rlog.snapshot(m.applied, m.confState, data, m.cfg.SnapshotEntries/2); err != nil {
		m.log.Warn("snapshot", zap.Error(err))
	}
}

func (m *Manager) restore(snap *pb.Snapshot) error {
	var d snapshotData
	if err := json.Unmarshal(snap.GetData(), &d); err != nil {
		return fmt.Errorf("coordination: decode snapshot at %d: %w", snap.GetMetadata().GetIndex(), err)
	}
	prev := m.state
	m.state = d.State
	m.shared.Store(d.State)
	m.dedup = d.Dedup
	m.applied = snap.GetMetadata().GetIndex()
	m.confState = snap.GetMetadata().GetConfState()
	for _, h := range m.state.Nodes {
		m.names[h.RaftID] = h.Name
		m.learnPeer(h.Name, h.TransportAddr)
	}
	for _, fn := range m.onApply {
		fn(prev, m.state)
	}
	return nil
}
