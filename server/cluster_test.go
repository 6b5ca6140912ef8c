package server_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/service"
)

// TestClusterEndpoints covers health (yellow with unassignable replicas,
// wait_for_status with timeout), _nodes filters, _cat/nodes, _cat/indices
// and the split metadata in _cluster/state/metadata.
func TestClusterEndpoints(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/green", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`, nil)
	var h map[string]any
	if st := ts.do(t, "GET", "/_cluster/health?wait_for_status=green&timeout=1s", "", &h); st != 200 || h["status"] != "green" || h["active_primary_shards"] != 2.0 {
		t.Fatalf("health: %d %v", st, h)
	}
	ts.do(t, "PUT", "/yellow", `{"settings":{"number_of_shards":1}}`, nil) // one replica by default
	if st := ts.do(t, "GET", "/_cluster/health?wait_for_status=green&timeout=100ms", "", &h); st != 408 || h["status"] != "yellow" || h["timed_out"] != true || h["unassigned_shards"] != 1.0 {
		t.Fatalf("health waiting for green with a replica: %d %v", st, h)
	}
	// wait_for_active_shards: "all" waits for the unassigned replica, a
	// count for that many active copies (two primaries of green, one of
	// yellow: three).
	for _, tc := range []struct {
		param  string
		status int
	}{{"all", 408}, {"3", 200}, {"4", 408}, {"0", 200}} {
		if st := ts.do(t, "GET", "/_cluster/health?wait_for_active_shards="+tc.param+"&timeout=100ms", "", &h); st != tc.status || h["active_shards"] != 3.0 {
			t.Fatalf("health with wait_for_active_shards=%s: %d %v; want %d", tc.param, st, h, tc.status)
		}
	}
	if st := ts.do(t, "GET", "/_cluster/health/green?wait_for_active_shards=all&timeout=100ms", "", &h); st != 200 || h["active_shards"] != 2.0 {
		t.Fatalf("health of green with wait_for_active_shards=all: %d %v", st, h)
	}
	if st := ts.do(t, "GET", "/_cluster/health/green", "", &h); st != 200 || h["status"] != "green" {
		t.Fatalf("health of one index: %d %v", st, h)
	}
	var cat string
	ts.do(t, "GET", "/_cat/shards/yellow", "", &cat)
	if lines := strings.Split(strings.TrimSpace(cat), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "r UNASSIGNED") {
		t.Fatalf("_cat/shards with a replica:\n%s", cat)
	}
	ts.do(t, "GET", "/_cat/indices?v&s=index:desc&h=index,health,pri,rep", "", &cat)
	if want := "index  health pri rep\nyellow yellow   1   1\ngreen  green    2   0\n"; cat != want {
		t.Fatalf("_cat/indices:\n%q\nwant\n%q", cat, want)
	}
	for _, tc := range []struct {
		filter string
		nodes  int
	}{{"", 1}, {"/_local", 1}, {"/data:true", 1}, {"/ingest:false", 0}, {"/nobody", 0}, {"/_all,data:false", 0}, {"/settings", 1}} {
		var n struct {
			Nodes map[string]struct {
				Version string   `json:"version"`
				Roles   []string `json:"roles"`
			} `json:"nodes"`
		}
		ts.do(t, "GET", "/_nodes"+tc.filter, "", &n)
		if len(n.Nodes) != tc.nodes {
			t.Fatalf("_nodes%s: %d nodes, want %d", tc.filter, len(n.Nodes), tc.nodes)
		}
	}
	ts.do(t, "GET", "/_cat/nodes?h=name,node.role", "", &cat)
	if strings.TrimSpace(cat) != "shardsplit-0 dimr" {
		t.Fatalf("_cat/nodes: %q", cat)
	}
	// Split metadata after an in-place split, read back from XContent.
	ts.do(t, "POST", "/green/_shards/1/_split?wait_for_completion=true", `{"number_of_splits":2}`, nil)
	var state struct {
		Metadata struct {
			Indices map[string]struct {
				RoutingNumShards int             `json:"routing_num_shards"`
				Split            json.RawMessage `json:"split_shards_metadata"`
				Settings         struct {
					Index map[string]any `json:"index"`
				} `json:"settings"`
			} `json:"indices"`
		} `json:"metadata"`
	}
	ts.do(t, "GET", "/_cluster/state/metadata/green", "", &state)
	ix := state.Metadata.Indices["green"]
	tab, _ := ts.svc.Table("green")
	got, err := routing.ParseXContent(tab.Mode(), tab.Settings(), tab.Version(), ix.Split)
	if err != nil || !got.SameLayout(tab) || ix.RoutingNumShards != tab.Settings().RoutingShards || ix.Settings.Index["number_of_shards"] != "2" {
		t.Fatalf("metadata: %s %+v: %v", ix.Split, ix, err)
	}
	if len(state.Metadata.Indices) != 1 {
		t.Fatalf("metadata of one index lists %d", len(state.Metadata.Indices))
	}
}
