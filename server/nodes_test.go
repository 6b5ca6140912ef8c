package server_test

import (
	"strings"
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// nodesBody is the part of a /_nodes answer these tests read.
type nodesBody struct {
	Nodes map[string]map[string]any `json:"nodes"`
}

// TestNodeInfoHasNoDistribution: a node's info has NodeInfo's fields;
// "distribution" belongs to GET /'s version object only, and the official
// client's strict response check fails on a key its NodesInfo lacks.
func TestNodeInfoHasNoDistribution(t *testing.T) {
	ts := startServer(t, service.Config{})
	for _, path := range []string{"/_nodes", "/_nodes/_all", "/_nodes/*/settings,os"} {
		var n nodesBody
		if st := ts.do(t, "GET", path, "", &n); st != 200 || len(n.Nodes) != 1 {
			t.Fatalf("GET %s: %d, %d nodes", path, st, len(n.Nodes))
		}
		for id, info := range n.Nodes {
			if _, ok := info["distribution"]; ok {
				t.Errorf("GET %s: node %s has a distribution key: %v", path, id, info)
			}
		}
	}
}

// TestNodeAPIsAreNotNodeFilters: /_nodes/stats, /_nodes/usage and
// /_nodes/hot_threads are APIs (OpenSearch's path trie prefers the
// literal segment), not info of a node named "stats": each answers the
// one node, and under a node filter only the nodes it selects.
func TestNodeAPIsAreNotNodeFilters(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`, nil); st != 200 {
		t.Fatal(st)
	}
	for i := range 3 {
		if st := ts.do(t, "PUT", "/logs/_doc/"+string(rune('a'+i)), `{"n":1}`, nil); st != 201 {
			t.Fatal(st)
		}
	}
	for _, tc := range []struct {
		path  string
		nodes int
	}{
		{"/_nodes/stats", 1}, {"/_nodes/stats/indices", 1}, {"/_nodes/*/stats/indices/store", 1}, {"/_nodes/_local/stats", 1},
		{"/_nodes/nobody/stats", 0}, {"/_nodes/usage", 1}, {"/_nodes/*/usage/*", 1}, {"/_nodes/nobody/usage", 0},
	} {
		var n nodesBody
		if st := ts.do(t, "GET", tc.path, "", &n); st != 200 || len(n.Nodes) != tc.nodes {
			t.Errorf("GET %s: %d, %d nodes, want %d", tc.path, st, len(n.Nodes), tc.nodes)
		}
		for _, node := range n.Nodes {
			if strings.Contains(tc.path, "stats") && node["name"] != "shardsplit-0" {
				t.Errorf("GET %s: %v", tc.path, node)
			}
		}
	}
	var n struct {
		Nodes map[string]struct {
			Indices struct {
				Docs struct {
					Count int `json:"count"`
				} `json:"docs"`
			} `json:"indices"`
			RestActions map[string]int `json:"rest_actions"`
		} `json:"nodes"`
	}
	ts.do(t, "GET", "/_nodes/stats/indices", "", &n)
	for _, node := range n.Nodes {
		if node.Indices.Docs.Count != 3 {
			t.Errorf("node stats count %d documents, want 3", node.Indices.Docs.Count)
		}
	}
	ts.do(t, "GET", "/_nodes/usage", "", &n)
	for _, node := range n.Nodes {
		if node.RestActions["PUT /{index}/_doc/{id}"] != 3 {
			t.Errorf("node usage: %v, want 3 of PUT /{index}/_doc/{id}", node.RestActions)
		}
	}
	var text string
	if st := ts.do(t, "GET", "/_nodes/hot_threads", "", &text); st != 200 || !strings.HasPrefix(text, "::: {shardsplit-0}") {
		t.Errorf("GET /_nodes/hot_threads: %d %q", st, text)
	}
	var eb errBody
	if st := ts.do(t, "GET", "/_nodes/stats/bogus", "", &eb); st != 400 ||
		eb.Error.Reason != "request [/_nodes/stats/bogus] contains unrecognized metric: [bogus]" {
		t.Errorf("GET /_nodes/stats/bogus: %d %+v", st, eb)
	}
}
