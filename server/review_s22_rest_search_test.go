package server_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/opensearch-project/opensearch-go/v4/opensearchapi"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewS22RESTSearchHitOptions: a search's version, seq_no_primary_term
// and _source (query parameters or body fields) shape each hit, as in
// OpenSearch (SearchSourceBuilder: "version": each hit's _version;
// "seq_no_primary_term": its _seq_no and _primary_term, for optimistic
// concurrency control, Elasticsearch #37639 which OpenSearch inherits;
// "_source": false leaves _source out, a field list keeps only those
// fields). They were accepted and ignored: the official client's
// SearchHit.SeqNo stayed nil, and a body's "_source": false still
// returned every source.
func TestReviewS22RESTSearchHitOptions(t *testing.T) {
	ts := startServer(t, service.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var put struct {
		SeqNo   int `json:"_seq_no"`
		Version int `json:"_version"`
	}
	for range 2 { // _version 2
		if st := ts.do(t, "PUT", "/logs/_doc/1", `{"a":1,"b":2}`, &put); st/100 != 2 {
			t.Fatalf("put: %d", st)
		}
	}
	yes := true
	res, err := ts.client.Search(ctx, &opensearchapi.SearchReq{Indices: []string{"logs"},
		Params: opensearchapi.SearchParams{SeqNoPrimaryTerm: &yes, Version: &yes}})
	if err != nil || len(res.Hits.Hits) != 1 {
		t.Fatalf("search: %+v %v", res, err)
	}
	if h := res.Hits.Hits[0]; h.SeqNo == nil || *h.SeqNo != put.SeqNo || h.PrimaryTerm == nil || *h.PrimaryTerm != 1 {
		t.Errorf("seq_no_primary_term=true: hit _seq_no %v _primary_term %v, want %d and 1", h.SeqNo, h.PrimaryTerm, put.SeqNo)
	}

	type hit map[string]json.RawMessage
	var out struct {
		Hits struct {
			Hits []hit `json:"hits"`
		} `json:"hits"`
	}
	search := func(path, body string) (int, hit) {
		t.Helper()
		out.Hits.Hits = nil
		st := ts.do(t, "POST", path, body, &out)
		if st == 200 && len(out.Hits.Hits) != 1 {
			t.Fatalf("%s %s: %d hits", path, body, len(out.Hits.Hits))
		}
		if st != 200 {
			return st, nil
		}
		return st, out.Hits.Hits[0]
	}
	if _, h := search("/logs/_search?version=true", ""); string(h["_version"]) != "2" {
		t.Errorf("version=true: hit _version %s, want 2 (hit %s)", h["_version"], h)
	}
	if _, h := search("/logs/_search", `{"version":true,"seq_no_primary_term":true}`); string(h["_version"]) != "2" || h["_seq_no"] == nil || string(h["_primary_term"]) != "1" {
		t.Errorf(`body {"version":true,"seq_no_primary_term":true}: hit %s`, h)
	}
	if _, h := search("/logs/_search", `{"_source":false}`); h["_source"] != nil {
		t.Errorf(`body {"_source":false}: hit has _source %s`, h["_source"])
	}
	if _, h := search("/logs/_search", `{"version":false}`); h["_version"] != nil {
		t.Errorf(`body {"version":false}: hit has _version %s`, h["_version"])
	}
	// A field list either filters the source or is refused: never the
	// whole source as if it were not there.
	var get map[string]json.RawMessage
	if st := ts.do(t, "GET", "/logs/_doc/1?_source=a", "", &get); st == 200 && strings.Contains(string(get["_source"]), `"b"`) {
		t.Errorf("GET ?_source=a: _source %s has a field the request left out", get["_source"])
	}
	for _, req := range [][2]string{{"/logs/_search?_source=a", ""}, {"/logs/_search", `{"_source":["a"]}`}} {
		st, h := search(req[0], req[1])
		if st == 200 && strings.Contains(string(h["_source"]), `"b"`) {
			t.Errorf("%s %s: _source %s has a field the request left out", req[0], req[1], h["_source"])
		}
		if st != 200 && st != 400 {
			t.Errorf("%s %s: status %d", req[0], req[1], st)
		}
	}
}

// TestReviewS22RESTSearchStoredFieldsLeavesSourceOut: a search body's
// stored_fields without _source leaves each hit's _source out, as a get's
// stored_fields parameter does here and as OpenSearch's fetch phase does
// (a request that names stored fields fetches _source only when it asks
// for it; "_none_" fetches none). stored_fields was accepted and ignored:
// every hit carried its source.
func TestReviewS22RESTSearchStoredFieldsLeavesSourceOut(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs/_doc/1", `{"a":1}`, nil); st != 201 {
		t.Fatal(st)
	}
	for _, tc := range []struct {
		body       string
		wantSource bool
	}{
		{`{"stored_fields":"_none_"}`, false},
		{`{"stored_fields":["a"]}`, false},
		{`{"stored_fields":["a"],"_source":true}`, true},
	} {
		var out struct {
			Hits struct {
				Hits []map[string]json.RawMessage `json:"hits"`
			} `json:"hits"`
		}
		if st := ts.do(t, "POST", "/logs/_search", tc.body, &out); st != 200 || len(out.Hits.Hits) != 1 {
			t.Fatalf("%s: HTTP %d, %d hits", tc.body, st, len(out.Hits.Hits))
		}
		if _, has := out.Hits.Hits[0]["_source"]; has != tc.wantSource {
			t.Errorf("%s: hit has _source %v, want %v", tc.body, has, tc.wantSource)
		}
	}
}
