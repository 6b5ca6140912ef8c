package routing

import (
	"fmt"
	"strconv"
	"strings"
)

// MinSplitVersion is the lowest node version that can run an in-place split
// (MetadataInPlaceSplitShardService).
const MinSplitVersion = "3.7.0"

// ClusterState is what MetadataInPlaceSplitShardService reads besides the
// split metadata: the index, its virtual-shard setting, node versions and
// primary shard states.
type ClusterState struct {
	Index         string
	VirtualShards int      // index.number_of_virtual_shards; -1 = disabled
	NodeVersions  []string // versions of every node; empty = all current
	// PrimaryStates maps a shard to its primary's state (STARTED,
	// RELOCATING, UNASSIGNED, INITIALIZING); a missing shard is STARTED.
	PrimaryStates map[ShardID]string
}

// SplitRequest asks for an in-place split of one shard.
type SplitRequest struct {
	Index     string
	Shard     ShardID
	SplitInto int
}

// BeginInPlaceSplit reproduces MetadataInPlaceSplitShardService
// .applySplitShardRequest: the service checks in OpenSearch's order, then
// the table edit BeginSplit.
func BeginInPlaceSplit(cs ClusterState, t *Table, req SplitRequest) (*Table, error) {
	if req.Index != cs.Index {
		return nil, newError(IllegalArgument, "Index [%s] not found", req.Index)
	}
	if cs.VirtualShards != -1 {
		return nil, newError(IllegalArgument, "In-place shard split is not supported on index [%s] with virtual shards enabled", req.Index)
	}
	if err := checkNodeVersions(cs.NodeVersions); err != nil {
		return nil, err
	}
	if sp, ok := t.Split(req.Shard); ok && sp.InProgress {
		return nil, newError(IllegalArgument, "Splitting of shard [%d] is already in progress", req.Shard)
	}
	if t.IsSplitParent(req.Shard) {
		return nil, newError(IllegalArgument, "Shard [%d] has already been split.", req.Shard)
	}
	if _, _, ok := t.findLeaf(req.Shard); !ok {
		return nil, newError(ShardNotFound, "no such shard [%s][%d]", req.Index, req.Shard)
	}
	state := cs.PrimaryStates[req.Shard]
	switch state {
	case "", "STARTED":
	case "RELOCATING":
		return nil, newError(IllegalArgument, "Cannot split shard [%d] on index [%s] because it is currently relocating", req.Shard, req.Index)
	default:
		return nil, newError(IllegalArgument,
			"Cannot split shard [%d] on index [%s] because the primary shard is not started, current state: %s", req.Shard, req.Index, state)
	}
	return Apply(t, Edit{Kind: BeginSplit, Shard: req.Shard, Ways: req.SplitInto})
}

// checkNodeVersions requires all nodes on one version >= MinSplitVersion.
func checkNodeVersions(versions []string) error {
	if len(versions) == 0 {
		return nil
	}
	minV, maxV := versions[0], versions[0]
	for _, v := range versions[1:] {
		if compareVersions(v, minV) < 0 {
			minV = v
		}
		if compareVersions(v, maxV) > 0 {
			maxV = v
		}
	}
	if minV != maxV || compareVersions(minV, MinSplitVersion) < 0 {
		return newError(IllegalArgument, "In-place shard split requires all nodes to be on the same version, at or above %s", MinSplitVersion)
	}
	return nil
}

// compareVersions compares dotted numeric versions ("3.6.0").
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// Reason is the reroute reason the service logs after a split begins.
func (r SplitRequest) Reason() string {
	return fmt.Sprintf("shard [%d] of index [%s] split", r.Shard, r.Index)
}
