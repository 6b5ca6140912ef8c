package server_test

import (
	"strings"
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestCatTablesBeyondShardsIndicesNodes: _cat/health, aliases, count,
// allocation, cluster_manager, nodeattrs, templates and the tables of
// things this server has none of answer as OpenSearch's do, in text and
// in JSON.
func TestCatTablesBeyondShardsIndicesNodes(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/logs", `{"settings":{"number_of_shards":2,"number_of_replicas":0},"aliases":{"Current":{"is_write_index":true}}}`, nil)
	ts.do(t, "PUT", "/logs/_doc/1?refresh=true", `{}`, nil)
	ts.do(t, "PUT", "/logs/_doc/2?refresh=true", `{}`, nil)
	for _, tc := range []struct{ path, want string }{
		{"/_cat/health?h=cluster,status,node.total,shards,pri,unassign,active_shards_percent", "shardsplit green 1 2 2 0 100%\n"},
		{"/_cat/aliases?h=alias,index,is_write_index", "Current logs true\n"},
		{"/_cat/count/logs?h=count", "2\n"},
		{"/_cat/allocation?h=shards,node", "2 shardsplit-0\n"},
		{"/_cat/cluster_manager?h=node", "shardsplit-0\n"},
		{"/_cat/master?h=node", "shardsplit-0\n"},
		{"/_cat/nodeattrs?h=node,attr,value", "shardsplit-0 shard_indexing_pressure_enabled true\n"},
		{"/_cat/pending_tasks", ""}, {"/_cat/plugins", ""}, {"/_cat/repositories", ""}, {"/_cat/segments", ""},
		{"/_cat/thread_pool", ""}, {"/_cat/fielddata", ""}, {"/_cat/recovery", ""}, {"/_cat/tasks", ""}, {"/_cat/templates", ""},
	} {
		var got string
		if st := ts.do(t, "GET", tc.path, "", &got); st != 200 || got != tc.want {
			t.Errorf("GET %s: %d %q, want %q", tc.path, st, got, tc.want)
		}
	}
	var rows []map[string]any
	if st := ts.do(t, "GET", "/_cat/health?format=json", "", &rows); st != 200 || len(rows) != 1 || rows[0]["status"] != "green" || rows[0]["node.total"] != "1" {
		t.Errorf("_cat/health?format=json: %d %v", st, rows)
	}
	if st := ts.do(t, "GET", "/_cat/plugins?format=json", "", &rows); st != 200 || rows == nil || len(rows) != 0 {
		t.Errorf("_cat/plugins?format=json: %d %v", st, rows)
	}
	var help string
	ts.do(t, "GET", "/_cat", "", &help)
	if !strings.Contains(help, "/_cat/health\n") {
		t.Errorf("_cat help: %q", help)
	}
}
