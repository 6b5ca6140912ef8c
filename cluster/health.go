package cluster

// HealthStatus is green, yellow or red (ClusterHealthStatus).
type HealthStatus string

const (
	Green  HealthStatus = "green"
	Yellow HealthStatus = "yellow"
	Red    HealthStatus = "red"
)

func (h HealthStatus) rank() int {
	switch h {
	case Green:
		return 0
	case Yellow:
		return 1
	}
	return 2
}

func worse(a, b HealthStatus) HealthStatus {
	if b.rank() > a.rank() {
		return b
	}
	return a
}

// Health is the cluster's health as _cluster/health reports it
// (ClusterStateHealth); the fields that depend on the request or on the
// cluster manager's queue (timed_out, number_of_pending_tasks, ...) are
// the caller's.
type Health struct {
	ClusterName         string       `json:"cluster_name"`
	Status              HealthStatus `json:"status"`
	NumberOfNodes       int          `json:"number_of_nodes"`
	NumberOfDataNodes   int          `json:"number_of_data_nodes"`
	ActivePrimaryShards int          `json:"active_primary_shards"`
	ActiveShards        int          `json:"active_shards"`
	RelocatingShards    int          `json:"relocating_shards"`
	InitializingShards  int          `json:"initializing_shards"`
	UnassignedShards    int          `json:"unassigned_shards"`
	// DelayedUnassignedShards counts the replicas waiting for their node
	// (ShardCopy.Delayed).
	DelayedUnassignedShards int                    `json:"delayed_unassigned_shards"`
	ActiveShardsPercent     float64                `json:"active_shards_percent_as_number"`
	Indices                 map[string]IndexHealth `json:"indices,omitempty"`
}

// IndexHealth is one index's part of Health (ClusterIndexHealth).
type IndexHealth struct {
	Status              HealthStatus `json:"status"`
	NumberOfShards      int          `json:"number_of_shards"`
	NumberOfReplicas    int          `json:"number_of_replicas"`
	ActivePrimaryShards int          `json:"active_primary_shards"`
	ActiveShards        int          `json:"active_shards"`
	RelocatingShards    int          `json:"relocating_shards"`
	InitializingShards  int          `json:"initializing_shards"`
	UnassignedShards    int          `json:"unassigned_shards"`
	// DelayedUnassignedShards counts the index's delayed replicas.
	DelayedUnassignedShards int `json:"delayed_unassigned_shards"`
}

// Health computes the cluster's health, with every index's.
//
// A shard is green when its primary and all its replicas are active,
// yellow when its primary is active and a replica is not, red when its
// primary is not active (ClusterShardHealth), with one exception
// (ClusterShardHealth.getInactivePrimaryHealth): a primary of a shard that
// never had an active copy, that has not failed and that the allocator
// did not refuse is yellow, so that creating an index does not turn the
// cluster red while its primaries initialize. An index is its worst shard,
// the cluster its worst index (green with none). active_shards_percent is
// 100 when green, else active copies over all copies.
func (s *State) Health() Health {
	h := Health{
		ClusterName: s.ClusterName, Status: Green,
		NumberOfNodes: len(s.Nodes), NumberOfDataNodes: len(s.Nodes),
		Indices: make(map[string]IndexHealth, len(s.Indices)),
	}
	total := 0
	for name, im := range s.Indices {
		ih := indexHealth(im)
		h.Indices[name] = ih
		h.Status = worse(h.Status, ih.Status)
		h.ActivePrimaryShards += ih.ActivePrimaryShards
		h.ActiveShards += ih.ActiveShards
		h.RelocatingShards += ih.RelocatingShards
		h.InitializingShards += ih.InitializingShards
		h.UnassignedShards += ih.UnassignedShards
		h.DelayedUnassignedShards += ih.DelayedUnassignedShards
		total += ih.ActiveShards + ih.InitializingShards + ih.UnassignedShards
	}
	h.ActiveShardsPercent = 100
	if h.Status != Green && total > 0 {
		h.ActiveShardsPercent = float64(h.ActiveShards) / float64(total) * 100
	}
	return h
}

func indexHealth(im *IndexMeta) IndexHealth {
	ih := IndexHealth{Status: Green, NumberOfShards: len(im.ServingShards()), NumberOfReplicas: im.Replicas}
	for _, sh := range im.ShardIDs() {
		status, active := Green, 0
		var primary ShardCopy
		for _, c := range im.Copies[sh] {
			switch c.State {
			case Started:
				active++
			case Initializing:
				ih.InitializingShards++
			case Unassigned:
				ih.UnassignedShards++
				if c.Delayed {
					ih.DelayedUnassignedShards++
				}
			}
			if c.Primary {
				primary = c
			}
		}
		ih.ActiveShards += active
		switch {
		case primary.Active():
			ih.ActivePrimaryShards++
			if active < len(im.Copies[sh]) {
				status = Yellow
			}
		case primary.AllocationStatus != StatusDecidersNo && primary.FailedAllocations == 0 && primary.RecoverySource == EmptyStore:
			status = Yellow
		default:
			status = Red
		}
		if _, child := im.SplitOf(sh); child && status == Red {
			// A child of a split in progress serves nothing yet: its
			// parent serves its range.
			status = Yellow
		}
		ih.Status = worse(ih.Status, status)
	}
	return ih
}
