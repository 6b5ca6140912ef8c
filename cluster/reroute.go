package cluster

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardsplit/shardsplit/routing"
)

// reroute is the allocator, run at the end of every task
// (AllocationService.reroute). It places unassigned copies, primaries of
// every index before any replica (as BalancedShardsAllocator does):
//
//   - A primary of a shard that never had an active copy (empty in-sync
//     set) goes to the node with the fewest copies, ties to the lowest
//     name (BalancedShardsAllocator, by count only), starting empty.
//   - A primary of a shard that had one goes only to a node whose disk
//     holds a copy with an id in the in-sync set, opened under that id
//     (PrimaryShardAllocator: candidates are in-sync copies, a copy that
//     was primary first; then the lowest name). With none, it stays
//     unassigned, no_valid_shard_copy, and the index is red: the cluster
//     waits for such a node to join rather than lose acknowledged writes.
//   - A replica waits for its primary to be started
//     (ReplicaAfterPrimaryActiveAllocationDecider), then goes to the node
//     with the fewest copies among those without a copy of the shard,
//     built by peer recovery.
//
// On every path no node gets two copies of a shard
// (SameShardAllocationDecider), and a shard does not go back to the node
// it failed on in this round. Not modelled: rebalancing started copies,
// recovery throttling, delayed allocation after a node left, disk
// watermarks, awareness.
func (a *applier) reroute() {
	// One read-only pass finds the shards with an unassigned copy; most
	// rounds find none and place nothing.
	var primaries, replicas []shardKey
	for _, name := range a.next.IndexNames() {
		im := a.next.Indices[name]
		for _, shard := range im.ShardIDs() {
			if p, child := im.SplitOf(shard); child && im.Splits[p].ChildReplicasAfterHandoff() {
				continue // its primary is built in place; its replicas wait for the hand-off
			}
			for _, c := range im.Copies[shard] {
				if c.State == Unassigned {
					if c.Primary {
						primaries = append(primaries, shardKey{name, shard})
					} else {
						replicas = append(replicas, shardKey{name, shard})
						break
					}
				}
			}
		}
	}
	if len(primaries) == 0 && len(replicas) == 0 {
		return
	}
	counts := a.startRound()
	for _, k := range primaries {
		a.allocatePrimary(k.index, k.shard, primaryPos(a.next.Indices[k.index].Copies[k.shard]), counts)
	}
	for _, k := range replicas {
		a.allocateReplicas(k.index, k.shard, counts)
	}
}

// startRound sorts the node names and counts the copies on each node.
func (a *applier) startRound() map[string]int {
	a.nodes = a.next.NodeNames()
	return a.nodeCounts()
}

// nodeCounts counts the assigned copies on every node.
func (a *applier) nodeCounts() map[string]int {
	counts := make(map[string]int, len(a.next.Nodes))
	for _, im := range a.next.Indices {
		for _, cs := range im.Copies {
			for _, c := range cs {
				if c.Assigned() {
					counts[c.Node]++
				}
			}
		}
	}
	return counts
}

func primaryPos(cs []ShardCopy) int {
	return slices.IndexFunc(cs, func(c ShardCopy) bool { return c.Primary })
}

// MaxRetries is index.allocation.max_retries' default: a copy whose
// allocation failed this often in a row is not allocated again
// (MaxRetryAllocationDecider), so a copy that cannot open does not cycle
// through the nodes for ever.
const MaxRetries = 5

func (a *applier) allocatePrimary(name string, shard routing.ShardID, p int, counts map[string]int) {
	im := a.next.Indices[name]
	if im.Copies[shard][p].FailedAllocations >= MaxRetries {
		a.setStatus(name, shard, p, StatusDecidersNo)
		return
	}
	if len(im.InSync[shard]) == 0 {
		node := a.leastLoaded(im, shard, counts)
		if node == "" {
			a.setStatus(name, shard, p, StatusDecidersNo)
			return
		}
		a.initialize(name, shard, p, node, a.newAllocationID(), EmptyStore)
		counts[node]++
		return
	}
	node, aid := a.inSyncCopy(im, shard)
	if node == "" {
		a.setStatus(name, shard, p, StatusNoValidShardCopy)
		return
	}
	a.initialize(name, shard, p, node, aid, ExistingStore)
	counts[node]++
}

// inSyncCopy finds the node to open the shard's primary on, and the id of
// its copy there (see reroute).
func (a *applier) inSyncCopy(im *IndexMeta, shard routing.ShardID) (node, aid string) {
	wasPrimary := false
	for _, name := range a.nodes {
		if !a.allowed(im, shard, name) {
			continue
		}
		lc, ok := localCopy(a.next.Nodes[name], im.UUID, shard)
		if !ok || !im.inSync(shard, lc.AllocationID) || im.copyIndex(shard, lc.AllocationID) >= 0 {
			continue
		}
		if node == "" || (lc.Primary && !wasPrimary) {
			node, aid, wasPrimary = name, lc.AllocationID, lc.Primary
		}
	}
	return node, aid
}

// localCopy returns the node's copy of a shard on disk.
func localCopy(n NodeInfo, uuid string, shard routing.ShardID) (LocalCopy, bool) {
	i, ok := slices.BinarySearchFunc(n.Copies, LocalCopy{IndexUUID: uuid, Shard: shard}, compareLocalCopy)
	if !ok {
		return LocalCopy{}, false
	}
	return n.Copies[i], true
}

func (a *applier) allocateReplicas(name string, shard routing.ShardID, counts map[string]int) {
	im := a.next.Indices[name]
	primaryActive := im.Copies[shard][primaryPos(im.Copies[shard])].Active()
	for i := range len(im.Copies[shard]) {
		im = a.next.Indices[name]
		if c := im.Copies[shard][i]; c.Primary || c.State != Unassigned {
			continue
		}
		if im.Copies[shard][i].FailedAllocations >= MaxRetries {
			a.setStatus(name, shard, i, StatusDecidersNo)
			continue
		}
		node := ""
		if c := im.Copies[shard][i]; c.Delayed {
			// A delayed replica goes back to the node it left, and only
			// there, once that node is back. If the node came back with
			// another copy of the shard, the wait is over (its return
			// ended the timeout too): the replica is built elsewhere.
			_, back := a.next.Nodes[c.LastNode]
			switch {
			case !back || !primaryActive:
				a.setStatus(name, shard, i, StatusDelayedAllocation)
				continue
			case a.allowed(im, shard, c.LastNode):
				node = c.LastNode
			default:
				node = a.leastLoaded(im, shard, counts)
			}
		} else if primaryActive {
			node = a.leastLoaded(im, shard, counts)
		}
		if node == "" {
			a.setStatus(name, shard, i, StatusDecidersNo)
			continue
		}
		a.initialize(name, shard, i, node, a.newAllocationID(), Peer)
		counts[node]++
	}
}

// leastLoaded returns the allowed node with the fewest copies, ties to the
// lowest name, or "" if no node is allowed.
func (a *applier) leastLoaded(im *IndexMeta, shard routing.ShardID, counts map[string]int) string {
	best := ""
	for _, name := range a.nodes {
		if a.allowed(im, shard, name) && (best == "" || counts[name] < counts[best]) {
			best = name
		}
	}
	return best
}

// allowed reports whether a copy of the shard may go to the node: it holds
// no copy of the shard (SameShardAllocationDecider) and the shard did not
// just fail there.
func (a *applier) allowed(im *IndexMeta, shard routing.ShardID, node string) bool {
	if a.ignore[shardKey{im.Name, shard}] == node {
		return false
	}
	return !slices.ContainsFunc(im.Copies[shard], func(c ShardCopy) bool { return c.Node == node })
}

// setStatus records the allocator's decision on an unassigned copy.
func (a *applier) setStatus(name string, shard routing.ShardID, i int, status string) {
	if a.next.Indices[name].Copies[shard][i].AllocationStatus != status {
		a.mutIndex(name).Copies[shard][i].AllocationStatus = status
	}
}

// StatusDelayedAllocation is the status of a replica waiting for the node
// it left (AllocationStatus.DELAYED_ALLOCATION).
const StatusDelayedAllocation = "delayed_allocation"

// SettingDelayedTimeout is index.unassigned.node_left.delayed_timeout.
const SettingDelayedTimeout = "index.unassigned.node_left.delayed_timeout"

// DefaultDelayedTimeout is its default (UnassignedInfo's 1m).
const DefaultDelayedTimeout = time.Minute

// DelayedTimeout returns an index's delayed_timeout: how long a replica of
// a node that left waits for it to come back.
func DelayedTimeout(im *IndexMeta) time.Duration {
	v, ok := im.Settings[SettingDelayedTimeout]
	if !ok {
		return DefaultDelayedTimeout
	}
	d, err := parseDuration(v)
	if err != nil {
		return DefaultDelayedTimeout
	}
	return d
}

// parseDuration reads an OpenSearch time value: a whole number with one of
// the units d, h, m, s, ms, micros, nanos (or "0" or "-1").
func parseDuration(v string) (time.Duration, error) {
	if v == "0" || v == "-1" {
		return 0, nil
	}
	units := []struct {
		suffix string
		d      time.Duration
	}{{"nanos", time.Nanosecond}, {"micros", time.Microsecond}, {"ms", time.Millisecond}, {"d", 24 * time.Hour},
		{"h", time.Hour}, {"m", time.Minute}, {"s", time.Second}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			k, err := strconv.ParseInt(n, 10, 64)
			if err != nil || k < 0 {
				return 0, fmt.Errorf("cluster: failed to parse time value [%s]", v)
			}
			return time.Duration(k) * u.d, nil
		}
	}
	return 0, fmt.Errorf("cluster: failed to parse time value [%s]", v)
}

// expireDelayed lets the delayed replicas of the named nodes be built
// anywhere.
func (a *applier) expireDelayed(nodes []string) {
	for _, name := range a.next.IndexNames() {
		im := a.next.Indices[name]
		for _, shard := range im.ShardIDs() {
			for i, c := range im.Copies[shard] {
				if c.Delayed && slices.Contains(nodes, c.LastNode) {
					im = a.mutIndex(name)
					im.Copies[shard][i].Delayed = false
				}
			}
		}
	}
}
