package server

func (s *Server) routes() {
	sys, idx := s.sys, s.idx
	// Cluster.
	s.handle(sys, "GET /{$}", s.root)
	s.handle(sys, "GET /_cluster/health", s.health)
	s.handle(sys, "GET /_cluster/health/{index}", s.health)
	s.handle(sys, "GET /_cluster/state", s.clusterState)
	s.handle(sys, "GET /_cluster/state/{metrics}", s.clusterState)
	s.handle(sys, "GET /_cluster/state/{metrics}/{index}", s.clusterState)
	s.handle(sys, "GET /_cluster/state/metadata", s.stateMetadata)
	s.handle(sys, "GET /_cluster/state/metadata/{index}", s.stateMetadata)
	s.handle(sys, "GET /_cluster/settings", s.getClusterSettings)
	s.handle(sys, "PUT /_cluster/settings", s.putClusterSettings)
	s.handle(sys, "GET /_cluster/stats", s.clusterStats)
	s.handle(sys, "GET /_cluster/stats/nodes/{node_id}", s.clusterStats)
	s.handle(sys, "GET /_cluster/pending_tasks", s.pendingTasks)
	s.handle(sys, "GET /_nodes", s.nodesRoute)
	s.handle(sys, "GET /_nodes/{path...}", s.nodesRoute)
	s.handle(sys, "GET /_cat", s.catHelp)
	s.handle(sys, "GET /_cat/nodes", s.catNodes)
	s.handle(sys, "GET /_cat/shards", s.catShards)
	s.handle(sys, "GET /_cat/shards/{index}", s.catShards)
	s.handle(sys, "GET /_cat/indices", s.catIndices)
	s.handle(sys, "GET /_cat/indices/{index}", s.catIndices)
	// Aliases.
	s.handle(sys, "POST /_aliases", s.postAliases)
	s.handle(sys, "GET /_alias", s.getAlias)
	s.handle(sys, "GET /_alias/{name}", s.getAlias)
	s.handle(sys, "GET /_aliases", s.getAlias)
	s.handle(idx, "GET /{index}/_alias", s.getAlias)
	s.handle(idx, "GET /{index}/_alias/{name}", s.getAlias)
	s.handle(idx, "GET /{index}/_aliases", s.getAlias)
	for _, p := range []string{"/{index}/_alias/{name}", "/{index}/_aliases/{name}"} {
		s.handle(idx, "PUT "+p, s.putAlias)
		s.handle(idx, "POST "+p, s.putAlias)
		s.handle(idx, "DELETE "+p, s.deleteAlias)
	}
	// Indices.
	s.handle(idx, "PUT /{index}", s.createIndex)
	s.handle(idx, "DELETE /{index}", s.deleteIndex)
	s.handle(idx, "HEAD /{index}", s.headIndex)
	s.handle(idx, "GET /{index}", s.getIndex)
	s.handle(idx, "GET /{index}/_settings", s.getSettings)
	s.handle(idx, "GET /{index}/_settings/{name}", s.getSettings)
	s.handle(idx, "PUT /{index}/_settings", s.putSettings)
	s.handle(sys, "GET /_settings", s.getSettings)
	s.handle(sys, "PUT /_settings", s.putSettings)
	s.handle(idx, "GET /{index}/_mapping", s.getMapping)
	s.handle(idx, "PUT /{index}/_mapping", s.putMapping)
	for _, m := range []string{"GET", "POST"} {
		s.handle(idx, m+" /{index}/_refresh", s.refresh)
		s.handle(sys, m+" /_refresh", s.refresh)
		s.handle(idx, m+" /{index}/_flush", s.flush)
		s.handle(sys, m+" /_flush", s.flush)
	}
	for _, op := range []string{"_split", "_shrink", "_clone"} {
		s.handle(idx, "PUT /{index}/"+op+"/{target}", s.resize)
		s.handle(idx, "POST /{index}/"+op+"/{target}", s.resize)
	}
	// Documents.
	s.handle(idx, "PUT /{index}/_doc/{id}", s.indexDoc)
	s.handle(idx, "POST /{index}/_doc/{id}", s.indexDoc)
	s.handle(idx, "POST /{index}/_doc", s.indexDoc)
	s.handle(idx, "PUT /{index}/_create/{id}", s.createDoc)
	s.handle(idx, "POST /{index}/_create/{id}", s.createDoc)
	s.handle(idx, "GET /{index}/_doc/{id}", s.getDoc)
	s.handle(idx, "HEAD /{index}/_doc/{id}", s.getDoc)
	s.handle(idx, "DELETE /{index}/_doc/{id}", s.deleteDoc)
	s.handle(idx, "GET /{index}/_source/{id}", s.getSource)
	for _, m := range []string{"POST", "PUT"} {
		s.handle(sys, m+" /_bulk", s.bulk)
		s.handle(idx, m+" /{index}/_bulk", s.bulk)
	}
	for _, m := range []string{"GET", "POST"} {
		s.handle(sys, m+" /_search", s.search)
		s.handle(idx, m+" /{index}/_search", s.search)
		s.handle(sys, m+" /_count", s.count)
		s.handle(idx, m+" /{index}/_count", s.count)
		s.handle(sys, m+" /_search_shards", s.searchShards)
		s.handle(idx, m+" /{index}/_search_shards", s.searchShards)
	}
	// In-place split and merge, and tasks.
	s.handle(idx, "POST /{index}/_shards/{shard_id}/_split", s.splitShard)
	s.handle(idx, "PUT /{index}/_shards/{shard_id}/_split", s.splitShard)
	s.handle(idx, "POST /{index}/_shards/_merge", s.mergeShards)
	s.handle(idx, "PUT /{index}/_shards/_merge", s.mergeShards)
	s.handle(sys, "GET /_tasks", s.listTasks)
	s.handle(sys, "GET /_tasks/{task_id}", s.getTask)
	s.handle(sys, "POST /_tasks/{task_id}/_cancel", s.cancelTask)
}
