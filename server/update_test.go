package server_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

type updateAnswer struct {
	Result  string `json:"result"`
	Version int    `json:"_version"`
	SeqNo   int    `json:"_seq_no"`
	Get     struct {
		Source map[string]any `json:"_source"`
	} `json:"get"`
}

// TestUpdateMergesUpsertsAndDetectsNoop: _update merges a partial doc
// into the source (objects recursively, as XContentHelper.update), creates
// a missing document from upsert or, with doc_as_upsert, from the doc,
// answers noop without writing when nothing changes, and a missing
// document without an upsert is document_missing_exception; a script is
// refused clearly.
func TestUpdateMergesUpsertsAndDetectsNoop(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/u", `{"settings":{"number_of_replicas":0}}`, nil)
	ts.do(t, "PUT", "/u/_doc/1", `{"a":1,"o":{"x":1,"y":2}}`, nil)
	var res updateAnswer
	if st := ts.do(t, "POST", "/u/_update/1?_source=true", `{"doc":{"b":2,"o":{"y":3}}}`, &res); st != 200 || res.Result != "updated" || res.Version != 2 {
		t.Fatalf("update: %d %+v", st, res)
	}
	want := map[string]any{"a": 1.0, "b": 2.0, "o": map[string]any{"x": 1.0, "y": 3.0}}
	if got, _ := json.Marshal(res.Get.Source); string(got) != mustJSON(want) {
		t.Fatalf("merged source %s, want %s", got, mustJSON(want))
	}
	seq := res.SeqNo
	if st := ts.do(t, "POST", "/u/_update/1", `{"doc":{"b":2}}`, &res); st != 200 || res.Result != "noop" || res.Version != 2 || res.SeqNo != seq {
		t.Fatalf("a noop update: %d %+v", st, res)
	}
	if st := ts.do(t, "POST", "/u/_update/1", `{"doc":{"b":2},"detect_noop":false}`, &res); st != 200 || res.Result != "updated" || res.Version != 3 {
		t.Fatalf("detect_noop false: %d %+v", st, res)
	}
	if st := ts.do(t, "POST", "/u/_update/2", `{"doc":{"c":1},"upsert":{"c":0}}`, &res); st != 201 || res.Result != "created" {
		t.Fatalf("upsert: %d %+v", st, res)
	}
	var doc struct {
		Source map[string]any `json:"_source"`
	}
	ts.do(t, "GET", "/u/_doc/2", "", &doc)
	if doc.Source["c"] != 0.0 {
		t.Fatalf("the upsert wrote %v, want the upsert document", doc.Source)
	}
	if st := ts.do(t, "POST", "/u/_update/3", `{"doc":{"d":1},"doc_as_upsert":true}`, &res); st != 201 || res.Result != "created" {
		t.Fatalf("doc_as_upsert: %d %+v", st, res)
	}
	var eb errBody
	if st := ts.do(t, "POST", "/u/_update/4", `{"doc":{"d":1}}`, &eb); st != 404 || eb.Error.Type != "document_missing_exception" || eb.Error.Reason != "[4]: document missing" {
		t.Fatalf("missing document: %d %+v", st, eb)
	}
	if st := ts.do(t, "POST", "/u/_update/1", `{"script":{"source":"ctx._source.a += 1"}}`, &eb); st != 400 || !strings.Contains(eb.Error.Reason, "not supported") {
		t.Fatalf("a script: %d %+v", st, eb)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestBulkUpdateItems: a bulk update item does what _update does, each
// failing alone.
func TestBulkUpdateItems(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/b", `{"settings":{"number_of_replicas":0}}`, nil)
	body := `{"index":{"_index":"b","_id":"1"}}
{"n":1}
{"update":{"_index":"b","_id":"1"}}
{"doc":{"n":2}}
{"update":{"_index":"b","_id":"2","retry_on_conflict":3}}
{"doc":{"n":5},"doc_as_upsert":true}
{"update":{"_index":"b","_id":"3"}}
{"doc":{"n":5}}
`
	var res struct {
		Errors bool `json:"errors"`
		Items  []map[string]struct {
			Result string `json:"result"`
			Status int    `json:"status"`
			Error  struct {
				Type string `json:"type"`
			} `json:"error"`
		} `json:"items"`
	}
	if st := ts.do(t, "POST", "/_bulk", body, &res); st != 200 || !res.Errors || len(res.Items) != 4 {
		t.Fatalf("bulk: %d %+v", st, res)
	}
	for i, want := range []struct {
		result string
		status int
		err    string
	}{{"created", 201, ""}, {"updated", 200, ""}, {"created", 201, ""}, {"", 404, "document_missing_exception"}} {
		for _, it := range res.Items[i] {
			if it.Result != want.result || it.Status != want.status || it.Error.Type != want.err {
				t.Errorf("item %d: %+v, want %+v", i, it, want)
			}
		}
	}
	var doc struct {
		Source map[string]any `json:"_source"`
	}
	ts.do(t, "GET", "/b/_doc/1", "", &doc)
	if doc.Source["n"] != 2.0 {
		t.Errorf("document 1 after its update: %v", doc.Source)
	}
}

// TestMultiGet: _mget answers each document as a get does, in order, a
// missing one found:false and one that cannot be read an entry with its
// own error; ids with the index in the path; an item without an index is
// refused by validation.
func TestMultiGet(t *testing.T) {
	ts := startServer(t, service.Config{})
	ts.do(t, "PUT", "/m", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`, nil)
	ts.do(t, "PUT", "/m/_doc/1", `{"v":1}`, nil)
	ts.do(t, "PUT", "/m/_doc/2?routing=r", `{"v":2}`, nil)
	var res struct {
		Docs []struct {
			Index   string         `json:"_index"`
			ID      string         `json:"_id"`
			Found   bool           `json:"found"`
			Routing string         `json:"_routing"`
			Source  map[string]any `json:"_source"`
			Error   *struct {
				Type string `json:"type"`
			} `json:"error"`
		} `json:"docs"`
	}
	if st := ts.do(t, "POST", "/_mget", `{"docs":[{"_index":"m","_id":"1"},{"_index":"m","_id":"2","routing":"r"},{"_index":"m","_id":"9"},{"_index":"nope","_id":"1"}]}`, &res); st != 200 || len(res.Docs) != 4 {
		t.Fatalf("_mget: %d %+v", st, res)
	}
	d := res.Docs
	if !d[0].Found || d[0].Source["v"] != 1.0 || !d[1].Found || d[1].Routing != "r" || d[2].Found || d[2].Error != nil ||
		d[3].Error == nil || d[3].Error.Type != "index_not_found_exception" {
		t.Fatalf("_mget docs: %+v", d)
	}
	if st := ts.do(t, "GET", "/m/_mget", `{"ids":["1","9"]}`, &res); st != 200 || len(res.Docs) != 2 || !res.Docs[0].Found || res.Docs[1].Found {
		t.Fatalf("_mget ids: %d %+v", st, res)
	}
	var eb errBody
	if st := ts.do(t, "POST", "/_mget", `{"docs":[{"_id":"1"}]}`, &eb); st != 400 || eb.Error.Reason != "Validation Failed: 1: index is missing for doc 0;" {
		t.Fatalf("no index: %d %+v", st, eb)
	}
}
