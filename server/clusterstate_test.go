package server_test

import (
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestClusterStateAnswersTheWholeStateAndEachMetric: GET /_cluster/state
// (the official client's readiness check) answers every metric, and a
// metric list narrows it; an unknown metric is refused as OpenSearch does.
func TestClusterStateAnswersTheWholeStateAndEachMetric(t *testing.T) {
	ts := startServer(t, service.Config{Dir: t.TempDir()})
	defer ts.stop(t)
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"number_of_shards":2,"number_of_replicas":1}}`, nil); st != 200 {
		t.Fatalf("create logs: %d", st)
	}
	var whole map[string]any
	if st := ts.do(t, "GET", "/_cluster/state", "", &whole); st != 200 {
		t.Fatalf("GET /_cluster/state = %d", st)
	}
	for _, k := range []string{"cluster_name", "cluster_uuid", "version", "state_uuid", "master_node", "cluster_manager_node",
		"blocks", "nodes", "metadata", "routing_table", "routing_nodes"} {
		if _, ok := whole[k]; !ok {
			t.Errorf("GET /_cluster/state has no %q: %v", k, whole)
		}
	}
	rt := whole["routing_table"].(map[string]any)["indices"].(map[string]any)["logs"].(map[string]any)["shards"].(map[string]any)
	if len(rt) != 2 || len(rt["0"].([]any)) != 2 {
		t.Fatalf("routing_table of logs = %v, want 2 shards of a primary and a replica", rt)
	}
	var narrow map[string]any
	if st := ts.do(t, "GET", "/_cluster/state/routing_table,nodes/logs", "", &narrow); st != 200 {
		t.Fatalf("GET /_cluster/state/routing_table,nodes/logs = %d", st)
	}
	if _, ok := narrow["metadata"]; ok {
		t.Errorf("a routing_table,nodes state has metadata: %v", narrow)
	}
	if _, ok := narrow["routing_table"]; !ok {
		t.Errorf("a routing_table,nodes state has no routing_table: %v", narrow)
	}
	var bad map[string]any
	if st := ts.do(t, "GET", "/_cluster/state/bogus", "", &bad); st != 400 {
		t.Fatalf("GET /_cluster/state/bogus = %d %v, want 400", st, bad)
	}
}
