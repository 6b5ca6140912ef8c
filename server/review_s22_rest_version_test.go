package server_test

import (
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewS22RESTVersionAfterDelete: a document's _version never goes
// back while its delete is remembered (index.gc_deletes, 60 s by default):
// OpenSearch's engine keeps the delete's version as a tombstone, so index
// (v1), delete (v2) and index again answer "created" at _version 3, and a
// delete of a missing document leaves version 1 for the next write (which
// is then 2). The version restarted at 1 after a delete: a client that saw
// the delete's _version 2 then read _version 1.
func TestReviewS22RESTVersionAfterDelete(t *testing.T) {
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
