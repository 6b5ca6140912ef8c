package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

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
	}{{"create", 409, "version_conflict_engine_exception"}, {"index", 201, ""}, {"update", 404, "document_missing_exception"},
		{"delete", 200, ""}, {"index", 400, "mapper_parsing_exception"}}
	for i, w := range want {
		it, ok := bulk.Items[i][w.op]
		if !ok || it.Status != w.status || (w.typ != "" && (it.Error == nil || it.Error.Type != w.typ)) || (w.typ == "" && it.Error != nil) {
			t.Fatalf("bulk item %d: %+v, want %+v", i, bulk.Items[i], w)
		}
	}
}

// TestGetVersionChecked: a get's version parameter is a condition, as in
// OpenSearch's ShardGetService (VersionType isVersionConflictForReads): a
// document whose _version differs answers 409
// version_conflict_engine_exception "[1]: version conflict, current
// version [2] is different than the one provided [5]", for _doc and for
// _source.
func TestGetVersionChecked(t *testing.T) {
	ts := startServer(t, service.Config{})
	for range 2 {
		if st := ts.do(t, "PUT", "/logs/_doc/1", `{"a":1}`, nil); st/100 != 2 {
			t.Fatal(st)
		}
	}
	for _, path := range []string{"/logs/_doc/1", "/logs/_source/1"} {
		var eb errBody
		st := ts.do(t, "GET", path+"?version=5", "", &eb)
		if st != 409 || eb.Error.Type != "version_conflict_engine_exception" ||
			eb.Error.Reason != "[1]: version conflict, current version [2] is different than the one provided [5]" {
			t.Errorf("GET %s?version=5 of a document at _version 2: HTTP %d %+v; want 409 version_conflict_engine_exception", path, st, eb.Error)
		}
		if st := ts.do(t, "GET", path+"?version=2", "", nil); st != 200 {
			t.Errorf("GET %s?version=2 of a document at _version 2: HTTP %d, want 200", path, st)
		}
	}
	if st := ts.do(t, "GET", "/logs/_doc/1?version=x", "", nil); st != 400 {
		t.Errorf("GET ?version=x: HTTP %d, want 400", st)
	}
}

// TestOpType: op_type is read as RestIndexAction reads it:
// case-insensitively (IndexRequest.opType lowercases it: "CREATE" is
// create), and the _create endpoint takes only create ("opType must be
// 'create', found: [index]", CreateHandler.validateOpType).
func TestOpType(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs/_doc/1?op_type=CREATE", `{}`, nil); st != 201 {
		t.Errorf("op_type=CREATE on a new id: HTTP %d, want 201", st)
	}
	if st := ts.do(t, "PUT", "/logs/_doc/1?op_type=CREATE", `{}`, nil); st != 409 {
		t.Errorf("op_type=CREATE on an existing id: HTTP %d, want 409", st)
	}
	var eb errBody
	if st := ts.do(t, "PUT", "/logs/_create/2?op_type=index", `{}`, &eb); st != 400 || eb.Error.Reason != "opType must be 'create', found: [index]" {
		t.Errorf("_create with op_type=index: HTTP %d %+v; want 400 opType must be 'create'", st, eb.Error)
	}
}

// TestDeleteParams: DELETE /{index}/_doc/{id} takes RestDeleteAction's
// parameters only; op_type, pipeline and require_alias (the index
// request's) are unrecognized there (400 "request [...] contains
// unrecognized parameter"), never accepted and ignored (a delete with
// require_alias=true through an index name must not delete the document).
func TestDeleteParams(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs/_doc/1", `{}`, nil); st != 201 {
		t.Fatal(st)
	}
	for _, p := range []string{"op_type=create", "pipeline=x", "require_alias=true"} {
		var eb errBody
		if st := ts.do(t, "DELETE", "/logs/_doc/1?"+p, "", &eb); st != 400 || eb.Error.Type != "illegal_argument_exception" {
			t.Errorf("DELETE ?%s: HTTP %d %+v; want 400 unrecognized parameter", p, st, eb.Error)
		}
	}
	if st := ts.do(t, "DELETE", "/logs/_doc/1?refresh=true&routing=&timeout=1m&wait_for_active_shards=1", "", nil); st != 200 {
		t.Errorf("DELETE with its own parameters: HTTP %d, want 200", st)
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

// TestReadYourWritesDuringSplits: each worker owns a few ids
// and overwrites, deletes and re-creates them over HTTP while shards split
// in place through the API, reading every id back after each acknowledged
// write: a GET must answer the last acknowledged state (the source written,
// or not found after a delete), and the _version must grow by one per
// acknowledged overwrite of a live document.
func TestReadYourWritesDuringSplits(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/rw", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`, nil); st != 200 {
		t.Fatal(st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	const workers, idsEach = 4, 8
	var wg sync.WaitGroup
	errs := make(chan string, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			version := map[string]int{} // 0: not live
			for n := 0; ctx.Err() == nil; n++ {
				id := fmt.Sprintf("w%d-%d", w, n%idsEach)
				routing := fmt.Sprint("r", n%idsEach%3) // one routing per id
				if n%5 == 4 {
					var res struct {
						Result string `json:"result"`
					}
					st := ts.do(t, "DELETE", "/rw/_doc/"+id+"?routing="+routing, "", &res)
					if (version[id] > 0 && st != 200) || (version[id] == 0 && st != 404) {
						errs <- fmt.Sprintf("delete %s (live version %d): HTTP %d %s", id, version[id], st, res.Result)
						return
					}
					version[id] = 0
				} else {
					var res struct {
						Version int `json:"_version"`
					}
					st := ts.do(t, "PUT", "/rw/_doc/"+id+"?routing="+routing, fmt.Sprintf(`{"n":%d}`, n), &res)
					if st != 200 && st != 201 {
						errs <- fmt.Sprintf("index %s: HTTP %d", id, st)
						return
					}
					if version[id] > 0 && res.Version != version[id]+1 {
						errs <- fmt.Sprintf("index %s over live version %d: _version %d", id, version[id], res.Version)
						return
					}
					version[id] = res.Version
				}
				var got struct {
					Found  bool            `json:"found"`
					Source json.RawMessage `json:"_source"`
				}
				st := ts.do(t, "GET", "/rw/_doc/"+id+"?routing="+routing, "", &got)
				if version[id] == 0 && (st != 404 || got.Found) {
					errs <- fmt.Sprintf("get %s after its acknowledged delete: HTTP %d %s", id, st, got.Source)
					return
				}
				if version[id] > 0 && (st != 200 || string(got.Source) != fmt.Sprintf(`{"n":%d}`, n)) {
					errs <- fmt.Sprintf("get %s after acknowledged {\"n\":%d}: HTTP %d %s", id, n, st, got.Source)
					return
				}
			}
		}()
	}
	// Split the last shard in place, again and again, until the time is up.
	splits := 0
	for ; ctx.Err() == nil; splits++ {
		tab, err := ts.svc.Table("rw")
		if err != nil {
			t.Fatal(err)
		}
		var task struct {
			Task string `json:"task"`
		}
		shard := tab.ActiveShards()[len(tab.ActiveShards())-1]
		if st := ts.do(t, "POST", fmt.Sprintf("/rw/_shards/%d/_split?wait_for_completion=true", shard), `{"number_of_splits":2}`, &task); st != 200 {
			break // too deep to split further: stop splitting, let the writers finish
		}
	}
	wg.Wait()
	t.Logf("%d splits", splits)
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestVersionAfterDelete: a document's _version never goes back while its
// delete is remembered (index.gc_deletes, 60 s by default): OpenSearch's
// engine keeps the delete's version as a tombstone, so index (v1), delete
// (v2) and index again answer "created" at _version 3, and a delete of a
// missing document leaves version 1 for the next write (which is then 2).
// A client that saw the delete's _version 2 never reads _version 1.
func TestVersionAfterDelete(t *testing.T) {
	ts := startServer(t, service.Config{})
	type res struct {
		Result  string `json:"result"`
		Version int    `json:"_version"`
	}
	steps := []struct {
		method, path, body string
		want               res
	}{
		{"PUT", "/logs/_doc/1", `{}`, res{"created", 1}},
		{"DELETE", "/logs/_doc/1", ``, res{"deleted", 2}},
		{"PUT", "/logs/_doc/1", `{}`, res{"created", 3}},
		{"DELETE", "/logs/_doc/2", ``, res{"not_found", 1}},
		{"PUT", "/logs/_doc/2", `{}`, res{"created", 2}},
	}
	for _, s := range steps {
		var got res
		ts.do(t, s.method, s.path, s.body, &got)
		if got != s.want {
			t.Errorf("%s %s: %+v, want %+v", s.method, s.path, got, s.want)
		}
	}
	var g struct {
		Version int `json:"_version"`
	}
	if ts.do(t, "GET", "/logs/_doc/1", "", &g); g.Version != 3 {
		t.Errorf("GET /logs/_doc/1: _version %d, want 3", g.Version)
	}
}

// TestGetVersionTypes: a get's version_type is read by
// VersionType.fromString, which takes external_gt (as EXTERNAL) besides
// internal, external and external_gte; and the external types'
// validateVersionForReads accepts version 0 (version >= 0), which a
// document at _version 1 then answers with a 409 conflict.
func TestGetVersionTypes(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs/_doc/1", `{"a":1}`, nil); st != 201 {
		t.Fatal(st)
	}
	if st := ts.do(t, "GET", "/logs/_doc/1?version=1&version_type=external_gt", "", nil); st != 200 {
		t.Errorf("GET ?version=1&version_type=external_gt of a document at _version 1: HTTP %d, want 200", st)
	}
	for _, vt := range []string{"external", "external_gt", "external_gte"} {
		var eb errBody
		if st := ts.do(t, "GET", "/logs/_doc/1?version=0&version_type="+vt, "", &eb); st != 409 ||
			eb.Error.Reason != "[1]: version conflict, current version [1] is different than the one provided [0]" {
			t.Errorf("GET ?version=0&version_type=%s of a document at _version 1: HTTP %d %+v; want 409 version_conflict_engine_exception", vt, st, eb.Error)
		}
	}
	var eb errBody
	if st := ts.do(t, "GET", "/logs/_doc/1?version=0", "", &eb); st != 400 ||
		eb.Error.Reason != "Validation Failed: 1: illegal version value [0] for version type [INTERNAL];" {
		t.Errorf("GET ?version=0 (internal): HTTP %d %+v; want 400 illegal version value", st, eb.Error)
	}
	if st := ts.do(t, "GET", "/logs/_doc/1?version=-1&version_type=external", "", &eb); st != 400 ||
		eb.Error.Reason != "Validation Failed: 1: illegal version value [-1] for version type [EXTERNAL];" {
		t.Errorf("GET ?version=-1&version_type=external: HTTP %d %+v; want 400 illegal version value", st, eb.Error)
	}
}

// TestIndexWithoutBodyIsAParseException: an index request with no body is
// RestRequest.requiredContent's parse_exception "request body is required"
// (the official client's TestIndexClient checks type and reason), whether
// the id is given or generated; a body of only whitespace has content, and
// is the request validation's "source is missing".
func TestIndexWithoutBodyIsAParseException(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/docs", `{"settings":{"number_of_replicas":0}}`, nil); st != 200 {
		t.Fatal(st)
	}
	for _, tc := range []struct{ method, path string }{{"POST", "/docs/_doc"}, {"PUT", "/docs/_doc/1"}, {"PUT", "/docs/_create/1"}} {
		var eb errBody
		if st := ts.do(t, tc.method, tc.path, "", &eb); st != 400 || eb.Error.Type != "parse_exception" || eb.Error.Reason != "request body is required" {
			t.Errorf("%s %s without a body: %d %+v", tc.method, tc.path, st, eb)
		}
	}
	var eb errBody
	if st := ts.do(t, "PUT", "/docs/_doc/1", " \n", &eb); st != 400 || eb.Error.Reason != "Validation Failed: 1: source is missing;" {
		t.Errorf("a body of whitespace: %d %+v", st, eb)
	}
}

// TestShardSeqNoStartsAtZero: a shard numbers its operations from 0
// (SequenceNumbers.NO_OPS_PERFORMED is -1), in the write's answer, a get
// and a search hit alike, as a cluster's replication numbers them.
func TestShardSeqNoStartsAtZero(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/s", `{"settings":{"number_of_shards":1,"number_of_replicas":0}}`, nil)
	var w struct {
		SeqNo int `json:"_seq_no"`
	}
	for i, id := range []string{"a", "b"} {
		if st := ts.do(t, "PUT", "/s/_doc/"+id+"?refresh=true", `{}`, &w); st != 201 || w.SeqNo != i {
			t.Fatalf("write %d: %d _seq_no %d, want %d", i, st, w.SeqNo, i)
		}
	}
	if ts.do(t, "GET", "/s/_doc/a", "", &w); w.SeqNo != 0 {
		t.Errorf("get of the first write: _seq_no %d, want 0", w.SeqNo)
	}
	var sr struct {
		Hits struct {
			Hits []struct {
				ID    string `json:"_id"`
				SeqNo int    `json:"_seq_no"`
			} `json:"hits"`
		} `json:"hits"`
	}
	ts.do(t, "POST", "/s/_search", `{"seq_no_primary_term":true,"query":{"ids":{"values":["a"]}}}`, &sr)
	if len(sr.Hits.Hits) != 1 || sr.Hits.Hits[0].SeqNo != 0 {
		t.Errorf("search hit: %+v, want _seq_no 0", sr.Hits.Hits)
	}
	if ts.do(t, "DELETE", "/s/_doc/b", "", &w); w.SeqNo != 2 {
		t.Errorf("the third operation, a delete: _seq_no %d, want 2", w.SeqNo)
	}
}
