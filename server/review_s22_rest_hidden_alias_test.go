package server_test

import (
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewS22RESTHiddenAliasNotIgnored: an alias made with is_hidden: true
// is not matched by a wildcard under the default expand_wildcards=open
// (OpenSearch's WildcardExpressionResolver skips hidden index abstractions
// unless hidden is expanded). is_hidden was accepted and dropped, so
// GET /h*/_search searched the hidden alias's index. Either the alias is
// hidden or it is refused: never a visible alias the client thinks hidden.
func TestReviewS22RESTHiddenAliasNotIgnored(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs/_doc/1", `{}`, nil); st != 201 {
		t.Fatal(st)
	}
	st := ts.do(t, "POST", "/_aliases", `{"actions":[{"add":{"index":"logs","alias":"hid","is_hidden":true}}]}`, nil)
	if st == 400 {
		return // refused: fine
	}
	if st != 200 {
		t.Fatalf("add a hidden alias: HTTP %d", st)
	}
	var res struct {
		Hits struct {
			Total struct {
				Value int `json:"value"`
			} `json:"total"`
		} `json:"hits"`
	}
	if st := ts.do(t, "GET", "/h*/_search", "", &res); st != 200 || res.Hits.Total.Value != 0 {
		t.Errorf("GET /h*/_search with only a hidden alias matching: HTTP %d, %d hits; want 200 and none", st, res.Hits.Total.Value)
	}
}
