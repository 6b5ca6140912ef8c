package clusternode

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/shardsplit/shardsplit/internal/clock"
	"github.com/shardsplit/shardsplit/replication"
	"github.com/shardsplit/shardsplit/routing"
)

// Stats are a node's counters of what a split costs across the cluster,
// since the node started: what it sent over the transport (of which the
// files of peer recoveries it was the source of), the hand-offs of the
// parent primaries it held, and the requests it coordinated that a parent
// refused after its hand-off and that went again to a child.
type Stats struct {
	// Messages and MessageBytes count the messages this node sent to
	// other nodes, and their encoded bodies: shard requests, replication,
	// recovery and the cluster coordination's own (elections, joins,
	// cluster-state publication), as TransportStats counts every message.
	Messages, MessageBytes uint64
	// RecoveryBytes, ReplicationBytes and OtherBytes divide MessageBytes
	// by kind of traffic: peer recoveries' files and their control
	// messages (rec/); a primary's operations to its copies and followers
	// and their answers (rep/); the rest (shard operations', the cluster
	// coordination's).
	RecoveryBytes, ReplicationBytes, OtherBytes uint64
	// RecoveryChunks and RecoveryChunkBytes count the file chunks of peer
	// recoveries this node sent, and their encoded bodies (the file bytes,
	// base64 in JSON: about 4/3 of them).
	RecoveryChunks, RecoveryChunkBytes uint64
	// Handoffs counts the hand-offs of parent primaries on this node;
	// HandoffTotal and HandoffMax are how long the parent's writes were
	// blocked for them: from the last block to the parent's retirement on
	// applying the hand-off record.
	Handoffs                 uint64
	HandoffTotal, HandoffMax time.Duration
	// StaleRetries counts the writes this node coordinated that were
	// refused by the shard they were routed to and then routed to another
	// (a parent refuses once it blocked or retired; the coordinator routes
	// again with a newer table); StaleWaitTotal and StaleWaitMax are how
	// long each waited from that first refusal to its final answer.
	StaleRetries                 uint64
	StaleWaitTotal, StaleWaitMax time.Duration
}

// nodeStats holds a node's Stats; the loop writes them, Stats reads them
// from any goroutine. clock times the durations: the one its Process runs
// on; without one (a node stepped by a simulation) they are 0.
type nodeStats struct {
	clock                         clock.Clock
	messages, messageBytes        atomic.Uint64
	byKind                        [3]atomic.Uint64 // recovery, replication, other
	recoveryChunks, recoveryBytes atomic.Uint64
	handoffs                      atomic.Uint64
	handoffTotal, handoffMax      atomic.Int64
	staleRetries                  atomic.Uint64
	staleWaitTotal, staleWaitMax  atomic.Int64
}

// Stats returns the node's counters. It may be called from any goroutine.
func (n *Node) Stats() Stats {
	s := &n.stats
	return Stats{
		Messages: s.messages.Load(), MessageBytes: s.messageBytes.Load(),
		RecoveryBytes: s.byKind[0].Load(), ReplicationBytes: s.byKind[1].Load(), OtherBytes: s.byKind[2].Load(),
		RecoveryChunks: s.recoveryChunks.Load(), RecoveryChunkBytes: s.recoveryBytes.Load(),
		Handoffs: s.handoffs.Load(), HandoffTotal: time.Duration(s.handoffTotal.Load()), HandoffMax: time.Duration(s.handoffMax.Load()),
		StaleRetries: s.staleRetries.Load(), StaleWaitTotal: time.Duration(s.staleWaitTotal.Load()),
		StaleWaitMax: time.Duration(s.staleWaitMax.Load()),
	}
}

// Stats returns the node's counters without a turn of its loop.
func (p *Process) Stats() Stats { return p.n.Stats() }

// now is the time on the stats' clock, for the durations Stats reports;
// nothing the node decides depends on it.
func (n *Node) now() time.Time {
	if n.stats.clock == nil {
		return time.Time{}
	}
	return n.stats.clock.Now()
}

// since is the time from t to now on the stats' clock (0 without one).
func (n *Node) since(t time.Time) time.Duration {
	if t.IsZero() || n.stats.clock == nil {
		return 0
	}
	return n.stats.clock.Since(t)
}

// sent counts a message sent to another node.
func (s *nodeStats) sent(kind string, bytes int) {
	s.messages.Add(1)
	s.messageBytes.Add(uint64(bytes))
	switch {
	case strings.HasPrefix(kind, "rec/"):
		s.byKind[0].Add(uint64(bytes))
	case strings.HasPrefix(kind, "rep/"):
		s.byKind[1].Add(uint64(bytes))
	default:
		s.byKind[2].Add(uint64(bytes))
	}
	if kind == replication.KindRecoveryChunk {
		s.recoveryChunks.Add(1)
		s.recoveryBytes.Add(uint64(bytes))
	}
}

// handedOff counts a hand-off whose parent's writes were blocked for d.
func (s *nodeStats) handedOff(d time.Duration) {
	s.handoffs.Add(1)
	s.handoffTotal.Add(int64(d))
	storeMax(&s.handoffMax, int64(d))
}

func storeMax(v *atomic.Int64, x int64) {
	for {
		cur := v.Load()
		if x <= cur || v.CompareAndSwap(cur, x) {
			return
		}
	}
}

// staleRetry follows one coordinated write through refusals: the shard
// that first refused it and when, and whether it was routed to another
// shard since.
type staleRetry struct {
	refused bool
	shard   routing.ShardID
	at      time.Time
	moved   bool
}

// refusedBy notes a refusal by shard at at; the first one counts.
func (r *staleRetry) refusedBy(shard routing.ShardID, at time.Time) {
	if !r.refused {
		r.refused, r.shard, r.at = true, shard, at
	}
}

// routedTo notes the shard the write is (re)sent to.
func (r *staleRetry) routedTo(shard routing.ShardID) {
	if r.refused && shard != r.shard {
		r.moved = true
	}
}

// answered counts the write, once it has its final answer at at, if it
// was routed to another shard after a refusal.
func (s *nodeStats) answered(r *staleRetry, at time.Time) {
	if !r.moved {
		return
	}
	var wait int64
	if !r.at.IsZero() {
		wait = int64(at.Sub(r.at))
	}
	s.staleRetries.Add(1)
	s.staleWaitTotal.Add(wait)
	storeMax(&s.staleWaitMax, wait)
}
