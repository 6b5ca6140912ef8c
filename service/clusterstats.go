package service

import "github.com/shardsplit/shardsplit/clusternode"

// ClusterNodeStats are a cluster node's counters of what splits cost it
// (clusternode.Stats).
type ClusterNodeStats = clusternode.Stats

// ClusterNodeStats returns this node's counters; false outside cluster
// mode.
func (s *Service) ClusterNodeStats() (ClusterNodeStats, bool) {
	if s.cl == nil {
		return ClusterNodeStats{}, false
	}
	return s.cl.p.Stats(), true
}
