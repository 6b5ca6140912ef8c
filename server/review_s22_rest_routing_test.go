package server_test

import (
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewS22RESTOneDocumentPerIDPerShard: OpenSearch keeps one document
// per _id in a shard (Lucene's uid term is the _id): an index of an _id that
// is already in the shard replaces it, whatever routing value led there, and
// answers "updated" with the next _version. On a one-shard index every
// routing leads to shard 0, so PUT /logs/_doc/1 then PUT
// /logs/_doc/1?routing=x is one document at _version 2. Here storage keys a
// document by [root][routing key][_id], so the second write made a second
// document with _id 1 in shard 0 ("created", _version 1), _count said 2,
// and GET /logs/_doc/1 returned the overwritten {"v":1}.
func TestReviewS22RESTOneDocumentPerIDPerShard(t *testing.T) {
	t.Skip("finding: one shard holds two documents with one _id when two routing values reach it (not fixed: storage keys documents by [root][routing key][_id] and has no per-shard _id index; uniqueness by _id needs one that moves with a split's spans, a storage redesign)")
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"number_of_shards":1}}`, nil); st != 200 {
		t.Fatal(st)
	}
	var w struct {
		Result  string `json:"result"`
		Version int    `json:"_version"`
	}
	if st := ts.do(t, "PUT", "/logs/_doc/1", `{"v":1}`, &w); st != 201 {
		t.Fatal(st)
	}
	st := ts.do(t, "PUT", "/logs/_doc/1?routing=x", `{"v":2}`, &w)
	if st != 200 || w.Result != "updated" || w.Version != 2 {
		t.Errorf("second index of _id 1 in the one shard (routing x): HTTP %d result %q _version %d; want 200 updated 2", st, w.Result, w.Version)
	}
	var c struct {
		Count int `json:"count"`
	}
	if ts.do(t, "GET", "/logs/_count", "", &c); c.Count != 1 {
		t.Errorf("_count: %d documents with _id 1 in one shard, want 1", c.Count)
	}
	var g struct {
		Found  bool           `json:"found"`
		Source map[string]int `json:"_source"`
	}
	if ts.do(t, "GET", "/logs/_doc/1", "", &g); !g.Found || g.Source["v"] != 2 {
		t.Errorf("GET /logs/_doc/1: found %v source %v; want the acknowledged last write {\"v\":2}", g.Found, g.Source)
	}
}
