package server_test

import (
	"fmt"
	"testing"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/service"
)

// TestReviewS22RESTAliasSearchRouting: a search reaches the shards
// OpenSearch's IndexNameExpressionResolver.resolveSearchRouting chooses: an
// alias with search_routing named in the expression limits its index to
// those routing values, also beside other names ("t1,other"), and a
// routing parameter narrows them to the values in both ("t1" with
// search_routing a and ?routing=a,b searches a's shard only). The alias's
// routing was applied only when it was the whole expression, and a routing
// parameter replaced it: both searched shards OpenSearch does not.
func TestReviewS22RESTAliasSearchRouting(t *testing.T) {
	ts := startServer(t, service.Config{})
	for _, ix := range []string{"logs", "other"} {
		if st := ts.do(t, "PUT", "/"+ix, `{"settings":{"number_of_shards":4,"number_of_replicas":0}}`, nil); st != 200 {
			t.Fatal(st)
		}
	}
	if st := ts.do(t, "POST", "/_aliases", `{"actions":[{"add":{"index":"logs","alias":"t1","search_routing":"a"}}]}`, nil); st != 200 {
		t.Fatal(st)
	}
	// Two routing values on different shards of logs.
	settings, _ := routing.NewSettings("logs", 4, 0, 1)
	b := ""
	for i := range 100 {
		if v := fmt.Sprint("b", i); settings.Place("x", v).Root != settings.Place("x", "a").Root {
			b = v
			break
		}
	}
	for i, r := range []string{"a", "a", b, b, b} {
		if st := ts.do(t, "PUT", fmt.Sprintf("/logs/_doc/%d?routing=%s", i, r), `{}`, nil); st != 201 {
			t.Fatal(st)
		}
	}
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/t1/_count", 2},
		{"/t1,other/_count", 2},
		{"/t1/_count?routing=a," + b, 2},
		{"/logs/_count?routing=a," + b, 5},
		{"/t1,logs/_count", 5}, // the index named outright is not limited
	} {
		var c struct {
			Count int `json:"count"`
		}
		if st := ts.do(t, "GET", tc.path, "", &c); st != 200 || c.Count != tc.want {
			t.Errorf("GET %s: HTTP %d count %d, want %d", tc.path, st, c.Count, tc.want)
		}
	}
}
