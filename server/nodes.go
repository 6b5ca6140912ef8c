package server

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/shardsplit/shardsplit/service"
)

// The node APIs under /_nodes: info, stats, usage and hot threads.
// OpenSearch's path trie prefers a literal segment to a parameter, so
// /_nodes/stats is node stats and /_nodes/n1 is info of node n1; net/http's
// patterns cannot express both /_nodes/{node_id}/stats and
// /_nodes/stats/{metric} (neither is more specific), so one handler reads
// the segments in the trie's order.

// nodeStatsMetrics are NodesStatsRequest.Metric's names.
var nodeStatsMetrics = map[string]bool{"os": true, "process": true, "jvm": true, "thread_pool": true, "fs": true,
	"transport": true, "http": true, "breaker": true, "script": true, "discovery": true, "ingest": true,
	"adaptive_selection": true, "script_cache": true, "indexing_pressure": true, "shard_indexing_pressure": true,
	"search_backpressure": true, "cluster_manager_throttling": true, "weighted_routing": true, "file_cache": true,
	"task_cancellation": true, "search_pipeline": true, "resource_usage_stats": true,
	"segment_replication_backpressure": true, "repositories": true, "admission_control": true, "caches": true,
	"remote_store": true, "indices": true}

// nodeIndexMetrics are CommonStatsFlags.Flag's names (the index metrics
// of node stats).
var nodeIndexMetrics = map[string]bool{"store": true, "indexing": true, "get": true, "search": true, "merge": true,
	"flush": true, "refresh": true, "query_cache": true, "fielddata": true, "docs": true, "warmer": true,
	"completion": true, "segments": true, "translog": true, "suggest": true, "request_cache": true, "recovery": true}

// nodesRoute is GET /_nodes[/...].
func (s *Server) nodesRoute(w http.ResponseWriter, r *http.Request) error {
	var seg []string
	if p := r.PathValue("path"); p != "" {
		seg = strings.Split(strings.TrimSuffix(p, "/"), "/")
	}
	api := func(name string) bool {
		return name == "stats" || name == "usage" || name == "hot_threads" || name == "hotthreads"
	}
	filter, rest := "_all", seg
	if len(seg) > 0 && !api(seg[0]) {
		// /_nodes/{x}: x is info's metrics when it names one (as
		// RestNodesInfoAction reads a single segment), else a node filter.
		if len(seg) == 1 && nodeMetrics[strings.Split(seg[0], ",")[0]] {
			return s.nodes(w, r, "_all", seg[0])
		}
		filter, rest = seg[0], seg[1:]
	}
	if len(rest) == 0 {
		return s.nodes(w, r, filter, "")
	}
	switch rest[0] {
	case "stats":
		if len(rest) <= 3 {
			return s.nodesStats(w, r, filter, rest[1:])
		}
	case "usage":
		if len(rest) <= 2 {
			return s.nodesUsage(w, r, filter, rest[1:])
		}
	case "hot_threads", "hotthreads":
		if len(rest) == 1 {
			return s.hotThreads(w, r, filter)
		}
	default:
		if len(rest) == 1 {
			return s.nodes(w, r, filter, rest[0])
		}
	}
	return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
		Reason: fmt.Sprintf("no handler found for uri [%s] and method [%s]", r.URL.RequestURI(), r.Method)}
}

// nodeEntry is one node's identity as node stats and usage show it.
type nodeEntry struct {
	id, name, transport, host string
	local                     bool
}

// matchingNodes lists the nodes a filter selects, by id.
func (s *Server) matchingNodes(filter string) []nodeEntry {
	var out []nodeEntry
	if st := s.svc.ClusterState(); st != nil {
		for _, name := range st.NodeNames() {
			n := st.Nodes[name]
			if s.clusterNodeMatches(filter, n) {
				out = append(out, nodeEntry{id: n.ID, name: n.Name, transport: n.TransportAddr, host: hostOf(n.HTTPAddr),
					local: n.Name == s.svc.NodeName()})
			}
		}
	} else if s.nodeMatches(filter) {
		out = append(out, nodeEntry{id: s.svc.NodeID(), name: s.svc.NodeName(), transport: s.ipAddr + ":9300", host: s.ipAddr, local: true})
	}
	return out
}

func (s *Server) nodesHeader(n int) map[string]any {
	return map[string]any{"_nodes": map[string]int{"total": n, "successful": n, "failed": 0}, "cluster_name": s.cfg.ClusterName}
}

// metricList reads a comma-separated metric segment against the names
// known; _all or an absent segment is every one.
func metricList(r *http.Request, seg string, known map[string]bool) (map[string]bool, error) {
	out := map[string]bool{}
	if seg == "" || seg == "_all" {
		for k := range known {
			out[k] = true
		}
		return out, nil
	}
	var bad []string
	for _, m := range strings.Split(seg, ",") {
		if !known[m] {
			bad = append(bad, m)
			continue
		}
		out[m] = true
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		what := "metric"
		if len(bad) > 1 {
			what = "metrics"
		}
		return nil, &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
			Reason: fmt.Sprintf("request [%s] contains unrecognized %s: [%s]", r.URL.Path, what, strings.Join(bad, "], ["))}
	}
	return out, nil
}

// nodesStats is GET /_nodes[/{node_id}]/stats[/{metric}[/{index_metric}]]:
// each node's identity and, of the metrics, what this node measures: its
// indices' documents and store (a single node holds every copy; a node of
// a cluster reports no per-node index totals, so the section is left out
// rather than shown as zeros).
func (s *Server) nodesStats(w http.ResponseWriter, r *http.Request, filter string, seg []string) error {
	if _, err := params(r, "timeout", "level", "types", "completion_fields", "fielddata_fields", "fields", "groups",
		"include_segment_file_sizes"); err != nil {
		return err
	}
	metric, indexMetric := "", ""
	if len(seg) > 0 {
		metric = seg[0]
	}
	if len(seg) > 1 {
		indexMetric = seg[1]
	}
	metrics, err := metricList(r, metric, nodeStatsMetrics)
	if err != nil {
		return err
	}
	if _, err := metricList(r, indexMetric, nodeIndexMetrics); err != nil {
		return err
	}
	if indexMetric != "" && !metrics["indices"] {
		return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
			Reason: fmt.Sprintf("request [%s] contains index metrics [%s] but indices stats not requested", r.URL.Path, indexMetric)}
	}
	nodes := map[string]any{}
	for _, n := range s.matchingNodes(filter) {
		entry := map[string]any{"timestamp": time.Now().UnixMilli(), "name": n.name, "transport_address": n.transport,
			"host": n.host, "ip": n.host, "roles": nodeRoles, "attributes": map[string]any{"shard_indexing_pressure_enabled": "true"}}
		if metrics["indices"] && s.svc.ClusterState() == nil {
			stats, err := s.svc.Stats("")
			if err != nil {
				return err
			}
			var docs, bytes int64
			for _, st := range stats {
				docs += st.Docs
				bytes += st.Bytes
			}
			entry["indices"] = map[string]any{"docs": map[string]int64{"count": docs, "deleted": 0},
				"store": map[string]int64{"size_in_bytes": bytes, "reserved_in_bytes": 0}}
		}
		if sent, ok := s.svc.TransportSent(); ok && n.local && metrics["transport"] {
			// TransportStats' tx size, and what it was made of: peer
			// recoveries (their files), replication, the rest.
			entry["transport"] = map[string]any{"tx_size_in_bytes": sent.Recovery + sent.Replication + sent.Other,
				"tx_size_in_bytes_by_kind": sent}
		}
		nodes[n.id] = entry
	}
	body := s.nodesHeader(len(nodes))
	body["nodes"] = nodes
	s.writeJSON(w, r, http.StatusOK, body)
	return nil
}

// nodesUsage is GET /_nodes[/{node_id}]/usage[/{metric}]: since when this
// node counts, and how many requests each of its REST endpoints answered
// (named by route pattern; OpenSearch names them by handler).
func (s *Server) nodesUsage(w http.ResponseWriter, r *http.Request, filter string, seg []string) error {
	if _, err := params(r, "timeout"); err != nil {
		return err
	}
	metric := ""
	if len(seg) > 0 {
		metric = seg[0]
	}
	metrics, err := metricList(r, metric, map[string]bool{"rest_actions": true, "aggregations": true, "*": true})
	if err != nil {
		return err
	}
	all := metrics["*"] || metric == "" || metric == "_all"
	nodes := map[string]any{}
	for _, n := range s.matchingNodes(filter) {
		entry := map[string]any{"timestamp": time.Now().UnixMilli(), "since": s.svc.Started().UnixMilli()}
		if n.local && (all || metrics["rest_actions"]) {
			actions := map[string]int64{}
			s.usage.Range(func(k, v any) bool {
				actions[k.(string)] = v.(*atomic.Int64).Load()
				return true
			})
			entry["rest_actions"] = actions
		}
		if all || metrics["aggregations"] {
			entry["aggregations"] = map[string]any{}
		}
		nodes[n.id] = entry
	}
	body := s.nodesHeader(len(nodes))
	body["nodes"] = nodes
	s.writeJSON(w, r, http.StatusOK, body)
	return nil
}

// countUse counts one request answered by the endpoint of pattern.
func (s *Server) countUse(pattern string) {
	v, ok := s.usage.Load(pattern)
	if !ok {
		v, _ = s.usage.LoadOrStore(pattern, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(1)
}

// hotThreads is GET /_nodes[/{node_id}]/hot_threads: OpenSearch's text
// report, one header per node. A Go process has goroutines, not threads
// it can sample by CPU, so no thread is listed under a header.
func (s *Server) hotThreads(w http.ResponseWriter, r *http.Request, filter string) error {
	q, err := params(r, "interval", "snapshots", "threads", "ignore_idle_threads", "type", "timeout")
	if err != nil {
		return err
	}
	interval, threads, typ := q.Get("interval"), q.Get("threads"), q.Get("type")
	if interval == "" {
		interval = "500ms"
	}
	if threads == "" {
		threads = "3"
	}
	if typ == "" {
		typ = "cpu"
	}
	var b strings.Builder
	now := time.Now().UTC().Format("2006-01-02T15:04:05.000Z")
	for _, n := range s.matchingNodes(filter) {
		fmt.Fprintf(&b, "::: {%s}{%s}{%s}{%s}{%s}{dimr}{shard_indexing_pressure_enabled=true}\n", n.name, n.id, n.id, n.host, n.transport)
		fmt.Fprintf(&b, "   Hot threads at %s, interval=%s, busiestThreads=%s, ignoreIdleThreads=true:\n\n", now, interval, threads)
	}
	w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write([]byte(b.String()))
	}
	return nil
}
