package replication

import (
	"slices"
	"strings"

	"github.com/shardsplit/shardsplit/internal/invariants"
)

// Tracker is a primary's view of its replication group (OpenSearch's
// ReplicationTracker in primary mode): which copies are tracked (they are
// sent every operation), which of those are in sync (they count for the
// global checkpoint and gate acknowledgements), and each copy's local
// checkpoint as last acknowledged.
//
// The in-sync set comes from the cluster state, with one addition the
// primary makes itself: a recovering copy that caught up is marked in sync
// here (markInSync) before the cluster manager records it, as
// markAllocationIdAsInSync does, so from that moment on no write is
// acknowledged without it.
type Tracker struct {
	self   string
	copies map[string]*tracked
	gcp    int64
}

type tracked struct {
	aid      string
	node     string
	inSync   bool
	tracking bool  // sent operations (a recovery target once it opened its files)
	lcp      int64 // its local checkpoint, as it acknowledged
	// follower marks a copy of another shard (a child of a split of this
	// one) sent this shard's operations: never in sync here, it counts
	// for neither the global checkpoint nor, until writes were blocked
	// for a hand-off, acknowledgements; the cluster state does not name
	// it, so only StopFollowing removes it.
	follower bool
	shard    ShardKey // a follower's own shard
}

// unknownCheckpoint is the local checkpoint of a copy that has not yet
// acknowledged anything to this primary (UNASSIGNED_SEQ_NO). Such an in-sync
// copy holds the global checkpoint where it is, below or above its own
// value (ReplicationTracker.computeGlobalCheckpoint falls back to the
// current global checkpoint), so the invariant gcp <= lcp exempts it.
const unknownCheckpoint = NoOpsPerformed - 1

func newTracker(self string, lcp int64) *Tracker {
	return &Tracker{self: self, gcp: NoOpsPerformed, copies: map[string]*tracked{
		self: {aid: self, inSync: true, tracking: true, lcp: lcp},
	}}
}

// update reconciles the group with a cluster state: inSync are the shard's
// in-sync allocation ids, routed maps every assigned copy's allocation id
// to its node. An id in neither is forgotten; the cluster manager may not
// add an in-sync id the primary did not mark (asserted).
func (t *Tracker) update(inSync []string, routed map[string]string) {
	for aid, c := range t.copies {
		if aid == t.self || c.follower {
			continue
		}
		_, isRouted := routed[aid]
		if !isRouted && !slices.Contains(inSync, aid) {
			delete(t.copies, aid)
			continue
		}
		// A routed copy the primary marked in sync stays in sync until the
		// cluster state fails it: the cluster manager may lag behind the
		// primary's marking (its ShardStarted is in flight), never lead
		// it, and a write acknowledged without such a copy could be lost
		// when it is promoted (ReplicationTracker in primary mode).
		c.node = routed[aid]
		if !isRouted {
			c.node = ""
		}
	}
	for _, aid := range inSync {
		if _, ok := t.copies[aid]; !ok {
			// An in-sync copy the primary does not track: one on a node
			// that left, or one of the group the primary inherited on
			// promotion. Its checkpoint is unknown, so it holds the
			// global checkpoint back until it is tracked or marked stale.
			t.copies[aid] = &tracked{aid: aid, inSync: true, lcp: unknownCheckpoint, node: routed[aid]}
		}
	}
	for aid, node := range routed {
		if _, ok := t.copies[aid]; !ok {
			t.copies[aid] = &tracked{aid: aid, node: node, lcp: unknownCheckpoint}
		}
	}
}

// startTracking makes aid receive operations from after lcp on (a recovery
// target that opened its files, or a replica of a new primary).
func (t *Tracker) startTracking(aid string, lcp int64) {
	if c, ok := t.copies[aid]; ok {
		c.tracking = true
		c.lcp = max(c.lcp, lcp)
	}
}

// markInSync marks a tracked copy in sync once its checkpoint reached the
// global checkpoint; it reports whether it did.
func (t *Tracker) markInSync(aid string) bool {
	c, ok := t.copies[aid]
	if !ok || !c.tracking || c.follower || c.lcp < t.gcp {
		return false
	}
	c.inSync = true
	return true
}

// acknowledged records a copy's local checkpoint and recomputes the global
// checkpoint; it returns the new global checkpoint.
func (t *Tracker) acknowledged(aid string, lcp int64) int64 {
	if c, ok := t.copies[aid]; ok && lcp > c.lcp {
		c.lcp = lcp
	}
	return t.computeGCP()
}

// computeGCP is the minimum local checkpoint over the in-sync copies, and
// never goes back (ReplicationTracker.computeGlobalCheckpoint; an in-sync
// copy with an unknown checkpoint holds it where it is).
func (t *Tracker) computeGCP() int64 {
	low := int64(-1 << 62)
	first := true
	for _, c := range t.copies {
		if !c.inSync {
			continue
		}
		if first || c.lcp < low {
			low, first = c.lcp, false
		}
	}
	if !first && low > t.gcp {
		t.gcp = low
	}
	if invariants.Enabled {
		for _, c := range t.copies {
			if c.inSync && c.tracking && c.lcp != unknownCheckpoint && c.lcp < t.gcp {
				invariants.AssertionFailedf("replication: global checkpoint %d above in-sync copy %s's local checkpoint %d", t.gcp, c.aid, c.lcp)
			}
		}
	}
	return t.gcp
}

// covers reports whether every in-sync copy acknowledged seq: a write at
// seq may be acknowledged to its client. An in-sync copy that is not
// tracked (its node left) never covers it: the primary must have it
// marked stale first.
func (t *Tracker) covers(seq int64, followers bool) bool {
	for _, c := range t.copies {
		if (c.inSync || (followers && c.follower)) && (!c.tracking || c.lcp < seq) {
			return false
		}
	}
	return true
}

// followers returns the followers, sorted by allocation id.
func (t *Tracker) followers() []*tracked {
	var out []*tracked
	for _, c := range t.copies {
		if c.follower {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b *tracked) int { return strings.Compare(a.aid, b.aid) })
	return out
}

// targets returns the tracked copies other than the primary, sorted by
// allocation id.
func (t *Tracker) targets() []*tracked {
	var out []*tracked
	for aid, c := range t.copies {
		if aid != t.self && c.tracking && c.node != "" {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b *tracked) int {
		switch {
		case a.aid < b.aid:
			return -1
		case a.aid > b.aid:
			return 1
		}
		return 0
	})
	return out
}

// untrackedInSync returns the in-sync copies with no assigned copy to send
// to: they must be marked stale before a write is acknowledged.
func (t *Tracker) untrackedInSync() []string {
	var out []string
	for aid, c := range t.copies {
		if aid != t.self && c.inSync && c.node == "" {
			out = append(out, aid)
		}
	}
	slices.Sort(out)
	return out
}
