package server_test

import (
	"strings"
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestDocumentsREST covers the document endpoints' shapes and statuses.
func TestDocumentsREST(t *testing.T) {
	ts := startServer(t, service.Config{})
	var m map[string]any
	// Auto-created index, auto id.
	if st := ts.do(t, "POST", "/auto/_doc", `{"a":1}`, &m); st != 201 || m["result"] != "created" || len(m["_id"].(string)) != 20 || m["_version"] != 1.0 {
		t.Fatalf("POST _doc: %d %v", st, m)
	}
	for _, tc := range []struct {
		method, path, body string
		status             int
		result             string
		version            float64
	}{
		{"PUT", "/auto/_doc/1?routing=r", `{"v":1}`, 201, "created", 1},
		{"PUT", "/auto/_doc/1?routing=r&refresh=true", `{"v":2}`, 200, "updated", 2},
		{"PUT", "/auto/_create/1?routing=r", `{"v":3}`, 409, "", 0},
		{"PUT", "/auto/_doc/1?routing=r&op_type=create", `{"v":3}`, 409, "", 0},
		{"PUT", "/auto/_create/2", `{"v":1}`, 201, "created", 1},
		{"DELETE", "/auto/_doc/2", "", 200, "deleted", 2},
		{"DELETE", "/auto/_doc/2", "", 404, "not_found", 1},
		{"DELETE", "/missing/_doc/2", "", 404, "", 0},
	} {
		m = nil
		st := ts.do(t, tc.method, tc.path, tc.body, &m)
		if st != tc.status || (tc.result != "" && (m["result"] != tc.result || m["_version"] != tc.version)) {
			t.Fatalf("%s %s: %d %v", tc.method, tc.path, st, m)
		}
	}
	m = nil
	if st := ts.do(t, "GET", "/auto/_doc/1?routing=r&stored_fields=_routing", "", &m); st != 200 || m["_routing"] != "r" || m["_source"] != nil || m["_version"] != 2.0 {
		t.Fatalf("GET with stored_fields=_routing: %d %v", st, m)
	}
	m = nil
	if st := ts.do(t, "GET", "/auto/_doc/1?routing=r", "", &m); st != 200 || m["found"] != true || m["_source"].(map[string]any)["v"] != 2.0 {
		t.Fatalf("GET: %d %v", st, m)
	}
	m = nil
	if st := ts.do(t, "GET", "/auto/_doc/nope", "", &m); st != 404 || m["found"] != false || m["_index"] != "auto" {
		t.Fatalf("GET of a missing doc: %d %v", st, m)
	}
	var body string
	if st := ts.do(t, "HEAD", "/auto/_doc/1?routing=r", "", &body); st != 200 || body != "" {
		t.Fatalf("HEAD: %d %q", st, body)
	}
	if st := ts.do(t, "HEAD", "/auto/_doc/nope", "", &body); st != 404 || body != "" {
		t.Fatalf("HEAD of a missing doc: %d %q", st, body)
	}
	if st := ts.do(t, "GET", "/auto/_source/1?routing=r", "", &body); st != 200 || body != `{"v":2}` {
		t.Fatalf("_source: %d %q", st, body)
	}
	// Bulk: each item on its own; a bad one fails alone.
	var bulk struct {
		Errors bool
		Items  []map[string]struct {
			Status int
			Result string
			Error  *struct{ Type string }
		}
	}
	nd := strings.Join([]string{
		`{"create":{"_index":"auto","_id":"1","routing":"r"}}`, `{"v":9}`,
		`{"index":{"_index":"other","_id":"x"}}`, `{"v":1}`,
		`{"update":{"_index":"auto","_id":"x"}}`, `{"doc":{}}`,
		`{"delete":{"_index":"auto","_id":"1","routing":"r"}}`,
		`{"index":{"_index":"auto"}}`, `not json`,
	}, "\n") + "\n"
	if st := ts.do(t, "POST", "/_bulk", nd, &bulk); st != 200 || !bulk.Errors || len(bulk.Items) != 5 {
		t.Fatalf("bulk: %d %+v", st, bulk)
	}
	want := []struct {
		op     string
		status int
		typ    string
	}{{"create", 409, "version_conflict_engine_exception"}, {"index", 201, ""}, {"update", 400, "illegal_argument_exception"},
		{"delete", 200, ""}, {"index", 400, "mapper_parsing_exception"}}
	for i, w := range want {
		it, ok := bulk.Items[i][w.op]
		if !ok || it.Status != w.status || (w.typ != "" && (it.Error == nil || it.Error.Type != w.typ)) || (w.typ == "" && it.Error != nil) {
			t.Fatalf("bulk item %d: %+v, want %+v", i, bulk.Items[i], w)
		}
	}
}
