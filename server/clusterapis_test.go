package server_test

import (
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestClusterSettingsStoredAndShown: PUT /_cluster/settings stores the
// settings it takes (null resets one) and answers the changes; GET shows
// them, nested or flat, with the defaults on include_defaults; an unknown
// setting is refused whole with OpenSearch's words.
func TestClusterSettingsStoredAndShown(t *testing.T) {
	ts := startServer(t, service.Config{})
	var put map[string]any
	if st := ts.do(t, "PUT", "/_cluster/settings", `{"persistent":{"cluster.routing.allocation.enable":"primaries"},"transient":{"indices":{"recovery":{"max_bytes_per_sec":null}}}}`, &put); st != 200 || put["acknowledged"] != true {
		t.Fatalf("PUT: %d %v", st, put)
	}
	var got struct {
		Persistent map[string]string `json:"persistent"`
		Transient  map[string]string `json:"transient"`
		Defaults   map[string]string `json:"defaults"`
	}
	if st := ts.do(t, "GET", "/_cluster/settings?flat_settings=true&include_defaults=true", "", &got); st != 200 ||
		got.Persistent["cluster.routing.allocation.enable"] != "primaries" || len(got.Transient) != 0 ||
		got.Defaults["indices.recovery.max_bytes_per_sec"] != "40mb" {
		t.Fatalf("GET: %d %+v", st, got)
	}
	var eb errBody
	if st := ts.do(t, "PUT", "/_cluster/settings", `{"transient":{"no.such.setting":1}}`, &eb); st != 400 ||
		eb.Error.Type != "illegal_argument_exception" || eb.Error.Reason != "transient setting [no.such.setting], not recognized" {
		t.Fatalf("unknown setting: %d %+v", st, eb)
	}
	ts.do(t, "PUT", "/_cluster/settings", `{"persistent":{"cluster.routing.allocation.enable":null}}`, nil)
	got.Persistent, got.Defaults = nil, nil
	ts.do(t, "GET", "/_cluster/settings?flat_settings=true", "", &got)
	if len(got.Persistent) != 0 || got.Defaults != nil {
		t.Fatalf("after a reset: %+v", got)
	}
}

// TestClusterStatsAndPendingTasks: _cluster/stats counts the indices,
// shards and documents there are; pending_tasks lists none.
func TestClusterStatsAndPendingTasks(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/a", `{"settings":{"number_of_shards":3,"number_of_replicas":0}}`, nil)
	ts.do(t, "PUT", "/a/_doc/1?refresh=true", `{}`, nil)
	var st struct {
		Status  string `json:"status"`
		Indices struct {
			Count  int `json:"count"`
			Shards struct {
				Total int `json:"total"`
			} `json:"shards"`
			Docs struct {
				Count int `json:"count"`
			} `json:"docs"`
		} `json:"indices"`
		Nodes struct {
			Count struct {
				Total int `json:"total"`
			} `json:"count"`
		} `json:"nodes"`
	}
	for _, path := range []string{"/_cluster/stats", "/_cluster/stats/nodes/data:true"} {
		if code := ts.do(t, "GET", path, "", &st); code != 200 || st.Status != "green" || st.Indices.Count != 1 ||
			st.Indices.Shards.Total != 3 || st.Indices.Docs.Count != 1 || st.Nodes.Count.Total != 1 {
			t.Fatalf("GET %s: %d %+v", path, code, st)
		}
	}
	var pt struct {
		Tasks []any `json:"tasks"`
	}
	if code := ts.do(t, "GET", "/_cluster/pending_tasks", "", &pt); code != 200 || pt.Tasks == nil || len(pt.Tasks) != 0 {
		t.Fatalf("pending_tasks: %d %+v", code, pt)
	}
}
