package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardsplit/shardsplit/service"
)

func (s *Server) root(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r); err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{
		"name":         s.svc.NodeName(),
		"cluster_name": s.cfg.ClusterName,
		"cluster_uuid": s.svc.ClusterUUID(),
		"version": map[string]any{
			"distribution":                        "shardsplit",
			"number":                              service.Version,
			"build_type":                          "tar",
			"build_hash":                          "unknown",
			"build_date":                          "2026-11-30T00:00:00Z",
			"build_snapshot":                      false,
			"lucene_version":                      "none (pebble)",
			"minimum_wire_compatibility_version":  "2.19.0",
			"minimum_index_compatibility_version": "2.0.0",
		},
		"tagline": "The OpenSearch Project: https://opensearch.org/",
	})
	return nil
}

var healthRank = map[string]int{"green": 0, "yellow": 1, "red": 2}

func (s *Server) health(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "wait_for_status", "timeout", "master_timeout", "cluster_manager_timeout", "level", "local",
		"wait_for_active_shards", "wait_for_nodes", "wait_for_events", "wait_for_no_relocating_shards", "wait_for_no_initializing_shards", "expand_wildcards")
	if err != nil {
		return err
	}
	want := q.Get("wait_for_status")
	if _, ok := healthRank[want]; want != "" && !ok {
		return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
			Reason: fmt.Sprintf("unknown cluster health status [%s]", want)}
	}
	timeout, err := durationParam(q, "timeout", 30*time.Second)
	if err != nil {
		return err
	}
	nodesOK, err := waitForNodes(q.Get("wait_for_nodes"))
	if err != nil {
		return err
	}
	noInitializing := q.Get("wait_for_no_initializing_shards") == "true"
	activeOK := waitForActiveShards(q.Get("wait_for_active_shards"))
	expr := r.PathValue("index")
	deadline := time.Now().Add(timeout)
	for {
		body, status, err := s.healthBody(expr)
		if err != nil {
			return err
		}
		if s.svc.Clustered() && s.svc.ClusterLeader() == "" {
			// No cluster manager: the state this node has may be stale.
			if time.Now().After(deadline) {
				return &service.Error{Type: "cluster_manager_not_discovered_exception", Status: http.StatusServiceUnavailable}
			}
			select {
			case <-r.Context().Done():
				return r.Context().Err()
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		if (want == "" || healthRank[status] <= healthRank[want]) && nodesOK(body["number_of_nodes"].(int)) &&
			(!noInitializing || body["initializing_shards"].(int) == 0) && activeOK(body) {
			s.writeJSON(w, r, http.StatusOK, body)
			return nil
		}
		if time.Now().After(deadline) {
			body["timed_out"] = true
			s.writeJSON(w, r, http.StatusRequestTimeout, body)
			return nil
		}
		select {
		case <-r.Context().Done():
			return r.Context().Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitForActiveShards is _cluster/health's wait_for_active_shards, checked
// by params: "all" waits until no shard copy is unassigned or
// initializing, a number until that many copies are active; "" (and
// index-setting, the index's default, which is none for health) waits for
// nothing (TransportClusterHealthAction).
func waitForActiveShards(v string) func(body map[string]any) bool {
	switch v {
	case "", "index-setting":
		return func(map[string]any) bool { return true }
	case "all":
		return func(b map[string]any) bool {
			return b["unassigned_shards"].(int) == 0 && b["initializing_shards"].(int) == 0
		}
	}
	n, _ := strconv.Atoi(v)
	return func(b map[string]any) bool { return b["active_shards"].(int) >= n }
}

func (s *Server) healthBody(expr string) (map[string]any, string, error) {
	if s.svc.Clustered() {
		return s.clusterHealthBody(expr)
	}
	stats, err := s.svc.Stats(expr)
	if err != nil {
		return nil, "", err
	}
	status := "green"
	var active, initializing, unassigned int
	for _, st := range stats {
		active += st.Active
		initializing += st.Initializing
		unassigned += st.Unassigned
		if healthRank[st.Health] > healthRank[status] {
			status = st.Health
		}
	}
	total := active + initializing + unassigned
	pct := 100.0
	if total > 0 {
		pct = 100 * float64(active) / float64(total)
	}
	return map[string]any{
		"cluster_name":                     s.cfg.ClusterName,
		"status":                           status,
		"timed_out":                        false,
		"number_of_nodes":                  1,
		"number_of_data_nodes":             1,
		"discovered_master":                true,
		"discovered_cluster_manager":       true,
		"active_primary_shards":            active,
		"active_shards":                    active,
		"relocating_shards":                0,
		"initializing_shards":              initializing,
		"unassigned_shards":                unassigned,
		"delayed_unassigned_shards":        0,
		"number_of_pending_tasks":          0,
		"number_of_in_flight_fetch":        0,
		"task_max_waiting_in_queue_millis": 0,
		"active_shards_percent_as_number":  pct,
	}, status, nil
}

// noTimeout is what a timeout of -1 (none) waits at most.
const noTimeout = service.NoTimeout

var nodeRoles = []string{"cluster_manager", "data", "ingest", "remote_cluster_client"}

var nodeMetrics = map[string]bool{"settings": true, "os": true, "process": true, "jvm": true, "thread_pool": true,
	"transport": true, "http": true, "plugins": true, "ingest": true, "aggregations": true, "indices": true, "search_pipelines": true}

// nodeMatches applies a node filter (OpenSearch's DiscoveryNodes
// resolveNodes): each comma-separated part adds the node (_all, _local,
// _cluster_manager, its id, name or address, a wildcard, role:true) or
// removes it (role:false), in order.
func (s *Server) nodeMatches(filter string) bool {
	match := false
	for _, f := range strings.Split(filter, ",") {
		f = strings.TrimSpace(f)
		if role, val, ok := strings.Cut(f, ":"); ok {
			if role == "master" {
				role = "cluster_manager"
			}
			has := slices.Contains(nodeRoles, role)
			switch val {
			case "true":
				match = match || has
			case "false":
				match = match && !has
			}
			continue
		}
		switch {
		case f == "_all" || f == "_local" || f == "_cluster_manager" || f == "_master":
			match = true
		case f == s.svc.NodeID() || f == s.svc.NodeName() || f == s.ipAddr || f == s.host:
			match = true
		case strings.Contains(f, "*") && (service.GlobMatch(f, s.svc.NodeName()) || service.GlobMatch(f, s.svc.NodeID())):
			match = true
		}
	}
	return match
}

func (s *Server) nodeInfo() map[string]any {
	return map[string]any{
		"name":              s.svc.NodeName(),
		"transport_address": s.ipAddr + ":9300",
		"host":              s.ipAddr,
		"ip":                s.ipAddr,
		"version":           service.Version,
		"build_type":        "tar",
		"build_hash":        "unknown",
		"roles":             nodeRoles,
		"attributes":        map[string]any{"shard_indexing_pressure_enabled": "true"},
		"http": map[string]any{
			"bound_address":   []string{s.cfg.Addr},
			"publish_address": s.cfg.Addr,
		},
	}
}

// nodes is node info: GET /_nodes[/{node_id}][/{metric}]. Its entries
// have the fields of OpenSearch's NodeInfo (no "distribution": that is
// GET /'s version object only).
func (s *Server) nodes(w http.ResponseWriter, r *http.Request, filter, metric string) error {
	if _, err := params(r, "timeout", "flat_settings"); err != nil {
		return err
	}
	if metric != "" {
		if _, err := metricList(r, metric, nodeMetrics); err != nil {
			return err
		}
	}
	nodes := map[string]any{}
	if st := s.svc.ClusterState(); st != nil {
		for _, name := range st.NodeNames() {
			n := st.Nodes[name]
			if s.clusterNodeMatches(filter, n) {
				nodes[n.ID] = clusterNodeInfo(n)
			}
		}
	} else if s.nodeMatches(filter) {
		nodes[s.svc.NodeID()] = s.nodeInfo()
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{
		"_nodes":       map[string]int{"total": len(nodes), "successful": len(nodes), "failed": 0},
		"cluster_name": s.cfg.ClusterName,
		"nodes":        nodes,
	})
	return nil
}

func (s *Server) stateMetadata(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "local", "master_timeout", "cluster_manager_timeout", "flat_settings", "wait_for_metadata_version",
		"wait_for_timeout", "ignore_unavailable", "allow_no_indices", "expand_wildcards")
	if err != nil {
		return err
	}
	o, err := lenientExpandOpen(q)
	if err != nil {
		return err
	}
	names, err := s.svc.Resolve(r.PathValue("index"), o)
	if err != nil {
		return err
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{
		"cluster_name": s.cfg.ClusterName,
		"cluster_uuid": s.svc.ClusterUUID(),
		"metadata":     s.metadataSection(names),
	})
	return nil
}

// metadataSection is _cluster/state's metadata of the named indices.
func (s *Server) metadataSection(names []string) map[string]any {
	indices := map[string]any{}
	for _, name := range names {
		m, ok := s.svc.Meta(name)
		t, err := s.svc.Table(name)
		if !ok || err != nil {
			continue
		}
		settings, _ := s.svc.GetSettings(name)
		if settings == nil { // metadata-blocked: show what routing needs
			settings = m.Settings
		}
		aliases := []string{}
		for a := range m.Aliases {
			aliases = append(aliases, a)
		}
		var terms, inSync any
		if st := s.svc.ClusterState(); st != nil && st.Indices[name] != nil {
			inSync, terms = inSyncSection(st.Indices[name])
		} else {
			tm, is := map[string]int{}, map[string][]string{}
			for _, id := range t.ActiveShards() {
				k := strconv.Itoa(int(id))
				tm[k] = 1
				is[k] = []string{allocationID(m.UUID, id)}
			}
			terms, inSync = tm, is
		}
		mappings := json.RawMessage(`{}`)
		if len(m.Mappings) > 0 {
			mappings = m.Mappings
		}
		indices[name] = map[string]any{
			"version":               t.Version(),
			"mapping_version":       1,
			"settings_version":      1,
			"aliases_version":       1,
			"routing_num_shards":    t.Settings().RoutingShards,
			"state":                 "open",
			"settings":              service.NestedSettings(settings),
			"mappings":              mappings,
			"aliases":               aliases,
			"primary_terms":         terms,
			"in_sync_allocations":   inSync,
			"rollover_info":         map[string]any{},
			"system":                false,
			"split_shards_metadata": json.RawMessage(t.MarshalXContent()),
		}
	}
	coordination := map[string]any{"term": 1, "last_committed_config": []string{s.svc.NodeID()},
		"last_accepted_config": []string{s.svc.NodeID()}, "voting_config_exclusions": []any{}}
	if st := s.svc.ClusterState(); st != nil {
		var voters []string
		for _, name := range st.NodeNames() {
			if st.Nodes[name].Manager {
				voters = append(voters, st.Nodes[name].ID)
			}
		}
		coordination = map[string]any{"term": 1, "last_committed_config": voters, "last_accepted_config": voters,
			"voting_config_exclusions": []any{}}
	}
	return map[string]any{
		"cluster_uuid":           s.svc.ClusterUUID(),
		"cluster_uuid_committed": true,
		"cluster_coordination":   coordination,
		"templates":              map[string]any{},
		"indices":                indices,
		"index-graveyard":        map[string]any{"tombstones": []any{}},
	}
}

func heapPercent() int {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if ms.Sys == 0 {
		return 0
	}
	return int(100 * ms.HeapAlloc / ms.Sys)
}
