package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/service"
)

// The APIs that describe a cluster of several nodes (a service in cluster
// mode): nodes, the cluster state with its routing table, health.

// nodeIDOf returns the id of the node of that name, or the name.
func (s *Server) nodeIDOf(name string) string {
	if st := s.svc.ClusterState(); st != nil {
		if n, ok := st.Nodes[name]; ok {
			return n.ID
		}
	}
	return name
}

func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

func portOf(addr string) string {
	if _, p, err := net.SplitHostPort(addr); err == nil {
		return p
	}
	return ""
}

// clusterNodeCells is _cat/nodes of a cluster: one row per node, "*" for
// the cluster manager (the raft leader).
func (s *Server) clusterNodeCells(st *cluster.State) [][]catCell {
	leader := s.svc.ClusterLeader()
	var cells [][]catCell
	for _, name := range st.NodeNames() {
		n := st.Nodes[name]
		manager := "-"
		if name == leader {
			manager = "*"
		}
		cells = append(cells, []catCell{textCell(hostOf(n.HTTPAddr)), numCell(int64(heapPercent())), {}, {}, {}, {}, {},
			textCell("dimr"), textCell(strings.Join(nodeRoles, ",")), textCell(manager), textCell(name),
			textCell(n.ID), textCell(portOf(n.TransportAddr)), textCell(n.HTTPAddr), textCell(service.Version)})
	}
	return cells
}

// clusterNodeInfo is one node's entry of _nodes on a cluster.
func clusterNodeInfo(n cluster.NodeInfo) map[string]any {
	return map[string]any{
		"name":              n.Name,
		"transport_address": n.TransportAddr,
		"host":              hostOf(n.HTTPAddr),
		"ip":                hostOf(n.HTTPAddr),
		"version":           service.Version,
		"build_type":        "tar",
		"build_hash":        "unknown",
		"roles":             nodeRoles,
		"attributes":        map[string]any{"shard_indexing_pressure_enabled": "true"},
		"http": map[string]any{
			"bound_address":   []string{n.HTTPAddr},
			"publish_address": n.HTTPAddr,
		},
	}
}

// routingTable is _cluster/state's routing_table: every index's shards,
// each a list of its copies (ShardRouting's XContent).
func routingTable(st *cluster.State, names []string) map[string]any {
	indices := map[string]any{}
	for _, name := range names {
		im := st.Indices[name]
		if im == nil {
			continue
		}
		shards := map[string]any{}
		for _, id := range im.ShardIDs() {
			sh := int(id)
			var copies []any
			for _, c := range im.Copies[id] {
				entry := map[string]any{"state": string(c.State), "primary": c.Primary, "node": nil,
					"relocating_node": nil, "shard": sh, "index": name}
				if c.Node != "" {
					entry["node"] = st.Nodes[c.Node].ID
				}
				if c.AllocationID != "" {
					entry["allocation_id"] = map[string]any{"id": c.AllocationID}
				}
				if c.RecoverySource != "" && c.State == cluster.Initializing {
					entry["recovery_source"] = map[string]any{"type": string(c.RecoverySource)}
				}
				if c.UnassignedReason != "" {
					entry["unassigned_info"] = map[string]any{"reason": c.UnassignedReason, "details": c.UnassignedDetails,
						"allocation_status": c.AllocationStatus, "failed_attempts": c.FailedAllocations}
				}
				copies = append(copies, entry)
			}
			shards[strconv.Itoa(sh)] = copies
		}
		indices[name] = map[string]any{"shards": shards}
	}
	return map[string]any{"indices": indices}
}

// clusterNodesSection is _cluster/state's nodes: id → name and addresses.
func clusterNodesSection(st *cluster.State) map[string]any {
	out := map[string]any{}
	for _, name := range st.NodeNames() {
		n := st.Nodes[name]
		out[n.ID] = map[string]any{"name": n.Name, "ephemeral_id": n.EphemeralID, "transport_address": n.TransportAddr,
			"attributes": map[string]any{}}
	}
	return out
}

// inSyncSection is an index's in_sync_allocations and primary_terms, as
// IndexMetadata's XContent has them.
func inSyncSection(im *cluster.IndexMeta) (map[string]any, []uint64) {
	// primary_terms is indexed by shard id: a split's children have ids
	// past number_of_shards, and a handed-off parent keeps its slot (0).
	ids := map[string]any{}
	shards := im.ShardIDs()
	n := im.Shards
	if len(shards) > 0 {
		n = max(n, int(shards[len(shards)-1])+1)
	}
	terms := make([]uint64, n)
	for _, id := range shards {
		set := slices.Clone(im.InSync[id])
		slices.Sort(set)
		if set == nil {
			set = []string{}
		}
		ids[strconv.Itoa(int(id))] = set
		terms[id] = im.PrimaryTerms[id]
	}
	return ids, terms
}

// clusterNodeMatches applies a node filter to one node of a cluster.
func (s *Server) clusterNodeMatches(filter string, n cluster.NodeInfo) bool {
	match := false
	for _, f := range strings.Split(filter, ",") {
		switch f = strings.TrimSpace(f); {
		case f == "_all":
			match = true
		case f == "_local":
			match = match || n.Name == s.svc.NodeName()
		case f == "_cluster_manager" || f == "_master":
			match = match || n.Name == s.svc.ClusterLeader()
		case f == n.ID || f == n.Name || f == hostOf(n.HTTPAddr):
			match = true
		case strings.Contains(f, "*") && (service.GlobMatch(f, n.Name) || service.GlobMatch(f, n.ID)):
			match = true
		}
	}
	return match
}

// clusterHealthBody is _cluster/health of a cluster, or of the indices of
// expr.
func (s *Server) clusterHealthBody(expr string) (map[string]any, string, error) {
	h, err := s.svc.ClusterHealth()
	if err != nil {
		return nil, "", err
	}
	status := string(h.Status)
	active, primaries, initializing, unassigned, delayed := h.ActiveShards, h.ActivePrimaryShards, h.InitializingShards,
		h.UnassignedShards, h.DelayedUnassignedShards
	if expr != "" {
		names, err := s.svc.Resolve(expr, service.IndicesOptions{})
		if err != nil {
			return nil, "", err
		}
		status, active, primaries, initializing, unassigned, delayed = "green", 0, 0, 0, 0, 0
		for _, name := range names {
			ih, ok := h.Indices[name]
			if !ok {
				continue
			}
			if healthRank[string(ih.Status)] > healthRank[status] {
				status = string(ih.Status)
			}
			active += ih.ActiveShards
			primaries += ih.ActivePrimaryShards
			initializing += ih.InitializingShards
			unassigned += ih.UnassignedShards
			delayed += ih.DelayedUnassignedShards
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
		"number_of_nodes":                  h.NumberOfNodes,
		"number_of_data_nodes":             h.NumberOfDataNodes,
		"discovered_master":                s.svc.ClusterLeader() != "",
		"discovered_cluster_manager":       s.svc.ClusterLeader() != "",
		"active_primary_shards":            primaries,
		"active_shards":                    active,
		"relocating_shards":                0,
		"initializing_shards":              initializing,
		"unassigned_shards":                unassigned,
		"delayed_unassigned_shards":        delayed,
		"number_of_pending_tasks":          0,
		"number_of_in_flight_fetch":        0,
		"task_max_waiting_in_queue_millis": 0,
		"active_shards_percent_as_number":  pct,
	}, status, nil
}

// waitForNodes parses _cluster/health's wait_for_nodes: N, >=N, <=N, >N,
// <N, ge(N), le(N), gt(N), lt(N) (ClusterHealthRequest); "" waits for
// nothing.
func waitForNodes(v string) (func(int) bool, error) {
	if v == "" {
		return func(int) bool { return true }, nil
	}
	ops := []struct {
		prefix, suffix string
		cmp            func(n, want int) bool
	}{
		{">=", "", func(n, w int) bool { return n >= w }}, {"<=", "", func(n, w int) bool { return n <= w }},
		{">", "", func(n, w int) bool { return n > w }}, {"<", "", func(n, w int) bool { return n < w }},
		{"ge(", ")", func(n, w int) bool { return n >= w }}, {"le(", ")", func(n, w int) bool { return n <= w }},
		{"gt(", ")", func(n, w int) bool { return n > w }}, {"lt(", ")", func(n, w int) bool { return n < w }},
		{"", "", func(n, w int) bool { return n == w }},
	}
	for _, op := range ops {
		rest, ok := strings.CutPrefix(v, op.prefix)
		if !ok {
			continue
		}
		rest, ok = strings.CutSuffix(rest, op.suffix)
		if !ok {
			continue
		}
		want, err := strconv.Atoi(rest)
		if err != nil {
			break
		}
		cmp := op.cmp
		return func(n int) bool { return cmp(n, want) }, nil
	}
	return nil, &service.Error{Type: service.TypeIllegalArgument, Status: 400,
		Reason: "failed to parse wait_for_nodes [" + v + "]"}
}

// clusterStateMetrics are _cluster/state's metrics (ClusterStateRequest).
var clusterStateMetrics = []string{"version", "master_node", "cluster_manager_node", "blocks", "nodes", "metadata",
	"routing_table", "routing_nodes", "customs"}

// clusterState is GET /_cluster/state[/{metrics}[/{index}]]: the whole
// state or the metrics named, of every index or those of the expression.
func (s *Server) clusterState(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "local", "master_timeout", "cluster_manager_timeout", "flat_settings", "wait_for_metadata_version",
		"wait_for_timeout", "ignore_unavailable", "allow_no_indices", "expand_wildcards")
	if err != nil {
		return err
	}
	want := map[string]bool{}
	if m := r.PathValue("metrics"); m != "" && m != "_all" {
		for _, name := range strings.Split(m, ",") {
			if !slices.Contains(clusterStateMetrics, name) {
				return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
					Reason: fmt.Sprintf("request [%s] contains unrecognized metric: [%s]", r.URL.Path, name)}
			}
			want[name] = true
		}
	} else {
		for _, name := range clusterStateMetrics {
			want[name] = true
		}
	}
	o, err := lenientExpandOpen(q)
	if err != nil {
		return err
	}
	names, err := s.svc.Resolve(r.PathValue("index"), o)
	if err != nil {
		return err
	}
	st := s.svc.ClusterState()
	body := map[string]any{"cluster_name": s.cfg.ClusterName, "cluster_uuid": s.svc.ClusterUUID()}
	manager := s.svc.NodeID()
	if st != nil {
		manager = s.nodeIDOf(s.svc.ClusterLeader())
	}
	if want["version"] {
		version := uint64(1)
		if st != nil {
			version = st.Version
		}
		body["version"] = version
		body["state_uuid"] = fmt.Sprintf("%s-%d", s.svc.ClusterUUID(), version)
	}
	if want["master_node"] {
		body["master_node"] = manager
	}
	if want["cluster_manager_node"] {
		body["cluster_manager_node"] = manager
	}
	if want["blocks"] {
		body["blocks"] = map[string]any{}
	}
	if want["nodes"] {
		if st != nil {
			body["nodes"] = clusterNodesSection(st)
		} else {
			body["nodes"] = map[string]any{s.svc.NodeID(): map[string]any{"name": s.svc.NodeName(),
				"ephemeral_id": s.svc.NodeID(), "transport_address": s.ipAddr + ":9300", "attributes": map[string]any{}}}
		}
	}
	if want["metadata"] {
		body["metadata"] = s.metadataSection(names)
	}
	if want["routing_table"] || want["routing_nodes"] {
		rt, byNode, unassigned := s.routingSections(st, names)
		if want["routing_table"] {
			body["routing_table"] = rt
		}
		if want["routing_nodes"] {
			body["routing_nodes"] = map[string]any{"unassigned": unassigned, "nodes": byNode}
		}
	}
	s.writeJSON(w, r, http.StatusOK, body)
	return nil
}

// routingSections is the routing table of the named indices and the same
// copies by node: a cluster's from its state, a single node's from its
// shards (every primary here, replicas unassigned).
func (s *Server) routingSections(st *cluster.State, names []string) (map[string]any, map[string][]any, []any) {
	byNode := map[string][]any{}
	unassigned := []any{}
	var rt map[string]any
	if st != nil {
		rt = routingTable(st, names)
	} else {
		indices := map[string]any{}
		for _, name := range names {
			rows, err := s.svc.ShardRows(name)
			if err != nil {
				continue
			}
			shards := map[string][]any{}
			for _, row := range rows {
				entry := map[string]any{"state": row.State, "primary": row.Primary, "node": nil, "relocating_node": nil,
					"shard": int(row.Shard), "index": name}
				if row.State != service.StateUnassigned {
					entry["node"] = s.svc.NodeID()
					entry["allocation_id"] = map[string]any{"id": allocationID(row.UUID, row.Shard)}
				} else {
					entry["unassigned_info"] = map[string]any{"reason": "INDEX_CREATED"}
				}
				k := strconv.Itoa(int(row.Shard))
				shards[k] = append(shards[k], entry)
			}
			indices[name] = map[string]any{"shards": shards}
		}
		rt = map[string]any{"indices": indices}
	}
	for _, ix := range rt["indices"].(map[string]any) {
		for _, copies := range shardsOf(ix.(map[string]any)["shards"]) {
			for _, c := range copies {
				entry := c.(map[string]any)
				if node, ok := entry["node"].(string); ok {
					byNode[node] = append(byNode[node], entry)
				} else {
					unassigned = append(unassigned, entry)
				}
			}
		}
	}
	return rt, byNode, unassigned
}

// shardsOf lists the copies of a routing table's index entry, whichever
// map type built it.
func shardsOf(v any) [][]any {
	var out [][]any
	switch m := v.(type) {
	case map[string]any:
		for _, k := range sortedKeysOf(m) {
			out = append(out, m[k].([]any))
		}
	case map[string][]any:
		for _, k := range sortedKeysOf(m) {
			out = append(out, m[k])
		}
	}
	return out
}

func sortedKeysOf[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// forwardTask answers a request about a task another node of the cluster
// holds (GET _tasks/{id}, POST _tasks/{id}/_cancel) by asking that node, as
// TransportGetTaskAction and the cancel's broadcast reach the task's node;
// handled is false when the id names no other node.
func (s *Server) forwardTask(w http.ResponseWriter, r *http.Request, id string) (handled bool, err error) {
	st := s.svc.ClusterState()
	node, _, ok := strings.Cut(id, ":")
	if st == nil || !ok || node == s.svc.NodeID() {
		return false, nil
	}
	var addr string
	for _, n := range st.Nodes {
		if n.ID == node {
			addr = n.HTTPAddr
		}
	}
	if addr == "" {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.Method, "http://"+addr+r.URL.RequestURI(), nil)
	if err != nil {
		return true, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return true, &service.Error{Type: "node_not_connected_exception", Status: http.StatusInternalServerError,
			Reason: fmt.Sprintf("[%s][%s] Node not connected", node, addr)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return true, err
	}
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
	return true, nil
}
