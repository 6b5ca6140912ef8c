package server_test

import (
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestIndexTemplatesApplyAtCreation: a composable index template is
// stored, listed, simulated and deleted; an index created with a name its
// patterns match takes its settings and aliases under the request's own,
// the highest priority template winning; data streams are refused.
func TestIndexTemplatesApplyAtCreation(t *testing.T) {
	ts := startServer(t, service.Config{})
	for i, body := range []string{
		`{"index_patterns":["logs-*"],"priority":10,"template":{"settings":{"number_of_shards":4,"number_of_replicas":0}}}`,
		`{"index_patterns":["logs-app*"],"priority":60,"template":{"settings":{"index":{"number_of_shards":3,"number_of_replicas":0}},"aliases":{"app":{}}}}`,
	} {
		if st := ts.do(t, "PUT", "/_index_template/t"+string(rune('1'+i)), body, nil); st != 200 {
			t.Fatalf("PUT template: %d", st)
		}
	}
	var got struct {
		Templates []struct {
			Name string `json:"name"`
		} `json:"index_templates"`
	}
	if st := ts.do(t, "GET", "/_index_template", "", &got); st != 200 || len(got.Templates) != 2 {
		t.Fatalf("GET /_index_template: %d %+v", st, got)
	}
	if st := ts.do(t, "PUT", "/logs-app1", `{"settings":{"number_of_replicas":0}}`, nil); st != 200 {
		t.Fatal(st)
	}
	if st := ts.do(t, "PUT", "/logs-web", "", nil); st != 200 {
		t.Fatal(st)
	}
	for index, want := range map[string]string{"logs-app1": "3", "logs-web": "4"} {
		var s map[string]struct {
			Settings struct {
				Index map[string]any `json:"index"`
			} `json:"settings"`
		}
		ts.do(t, "GET", "/"+index+"/_settings", "", &s)
		if s[index].Settings.Index["number_of_shards"] != want {
			t.Errorf("%s: number_of_shards %v, want %s", index, s[index].Settings.Index["number_of_shards"], want)
		}
	}
	if st := ts.do(t, "GET", "/app/_doc/x", "", nil); st != 404 {
		t.Errorf("alias app from the template: GET through it %d, want 404 (a missing document)", st)
	}
	var sim struct {
		Template struct {
			Settings struct {
				Index map[string]any `json:"index"`
			} `json:"settings"`
		} `json:"template"`
		Overlapping []map[string]any `json:"overlapping"`
	}
	if st := ts.do(t, "POST", "/_index_template/_simulate_index/logs-app2", "", &sim); st != 200 ||
		sim.Template.Settings.Index["number_of_shards"] != "3" || len(sim.Overlapping) != 1 {
		t.Errorf("simulate_index: %d %+v", st, sim)
	}
	var eb errBody
	if st := ts.do(t, "PUT", "/_index_template/ds", `{"index_patterns":["ds"],"data_stream":{}}`, &eb); st != 400 || eb.Error.Type != "illegal_argument_exception" {
		t.Errorf("a data stream template: %d %+v", st, eb)
	}
	if st := ts.do(t, "DELETE", "/_index_template/t*", "", nil); st != 200 {
		t.Errorf("DELETE: %d", st)
	}
	if st := ts.do(t, "GET", "/_index_template/t1", "", &eb); st != 404 || eb.Error.Reason != "index template matching [t1] not found" {
		t.Errorf("GET after delete: %d %+v", st, eb)
	}
}
