package server_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/shardsplit/shardsplit/routing"
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

// An _id indexed with two routing values that reach one shard is one
// document there, as OpenSearch keeps it (the shard's engine looks a
// document up by its _id alone; the routing value only chose the shard):
// the second index answers "updated" with the next _version, _count says
// one, and a get or delete with any routing value that reaches the shard
// finds it; a delete's version continues when the _id comes back under
// another routing value. After an in-place split a routing value that
// reaches the document's child replaces it there, one that reaches the
// other child makes a document of its own; a merge of the two children
// keeps both (as OpenSearch's shrink does), and the next index of the _id
// leaves one.
func TestAnIDIndexedWithTwoRoutingValuesThatReachOneShardIsOneDocument(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"number_of_shards":1}}`, nil); st != 200 {
		t.Fatal(st)
	}
	type written struct {
		Result  string `json:"result"`
		Version int    `json:"_version"`
	}
	write := func(method, path, body string, wantStatus int, want written) {
		t.Helper()
		var w written
		if st := ts.do(t, method, path, body, &w); st != wantStatus || w != want {
			t.Errorf("%s %s: HTTP %d %+v; want %d %+v", method, path, st, w, wantStatus, want)
		}
	}
	count := func(step string, want int) {
		t.Helper()
		var c struct {
			Count int `json:"count"`
		}
		if ts.do(t, "GET", "/logs/_count", "", &c); c.Count != want {
			t.Errorf("%s: _count %d, want %d", step, c.Count, want)
		}
	}
	get := func(path string, wantFound bool, wantRouting string, wantV int) {
		t.Helper()
		var g struct {
			Found   bool           `json:"found"`
			Routing string         `json:"_routing"`
			Source  map[string]int `json:"_source"`
		}
		ts.do(t, "GET", path, "", &g)
		if g.Found != wantFound || wantFound && (g.Routing != wantRouting || g.Source["v"] != wantV) {
			t.Errorf("GET %s: found %v _routing %q _source %v; want found %v _routing %q v %d", path, g.Found, g.Routing, g.Source, wantFound, wantRouting, wantV)
		}
	}
	write("PUT", "/logs/_doc/1", `{"v":1}`, 201, written{"created", 1})
	write("PUT", "/logs/_doc/1?routing=x", `{"v":2}`, 200, written{"updated", 2})
	count("two routing values", 1)
	get("/logs/_doc/1", true, "x", 2)
	get("/logs/_doc/1?routing=y", true, "x", 2)
	write("DELETE", "/logs/_doc/1?routing=y", "", 200, written{"deleted", 3})
	get("/logs/_doc/1?routing=x", false, "", 0)
	write("PUT", "/logs/_doc/1?routing=z", `{"v":4}`, 201, written{"created", 4})
	count("indexed again", 1)

	// The split's children own the two halves of the 1024 partitions.
	settings := routing.Settings{Shards: 1, RoutingShards: 1024, PartitionSize: 1}
	half := func(r string) uint32 { return settings.Place("1", r).Partition / 512 }
	var same, other string
	for i := 0; same == "" || other == ""; i++ {
		r := fmt.Sprintf("r%d", i)
		switch {
		case half(r) != half("z"):
			other = r
		case settings.Place("1", r).Partition != settings.Place("1", "z").Partition:
			same = r
		}
	}
	if st := ts.do(t, "POST", "/logs/_shards/0/_split?wait_for_completion=true", `{"number_of_splits":2}`, nil); st != 200 {
		t.Fatalf("split: HTTP %d", st)
	}
	write("PUT", "/logs/_doc/1?routing="+same, `{"v":5}`, 200, written{"updated", 5})
	count("split, the same child", 1)
	write("PUT", "/logs/_doc/1?routing="+other, `{"v":6}`, 201, written{"created", 1})
	count("split, the other child", 2)
	get("/logs/_doc/1?routing=z", true, same, 5)
	get("/logs/_doc/1?routing="+other, true, other, 6)

	if st := ts.do(t, "POST", "/logs/_shards/_merge?wait_for_completion=true", `{"shards":[1,2]}`, nil); st != 200 {
		t.Fatalf("merge: HTTP %d", st)
	}
	count("merged: both documents kept", 2)
	var w written
	if st := ts.do(t, "PUT", "/logs/_doc/1?routing=z", `{"v":7}`, &w); st != 200 || w.Result != "updated" {
		t.Errorf("index after the merge: HTTP %d %+v, want 200 updated", st, w)
	}
	count("merged, indexed again", 1)
	get("/logs/_doc/1?routing="+other, true, "z", 7)
}
