package server_test

import (
	"fmt"
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewS22RESTCountParamsNotIgnored: _count's terminate_after stops
// counting after that many documents per shard (OpenSearch's count API:
// the count is at most terminate_after on a one-shard index, with
// "terminated_early": true) and min_score drops documents scoring less
// (match_all scores 1.0, so min_score=2 counts none). Both were accepted
// and ignored: the count was every document. Either is answered or
// refused, never ignored.
func TestReviewS22RESTCountParamsNotIgnored(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"number_of_shards":1}}`, nil); st != 200 {
		t.Fatal(st)
	}
	for i := range 5 {
		if st := ts.do(t, "PUT", fmt.Sprintf("/logs/_doc/%d", i), `{}`, nil); st != 201 {
			t.Fatal(st)
		}
	}
	for _, tc := range []struct {
		param string
		want  int
	}{{"terminate_after=1", 1}, {"min_score=2", 0}} {
		var res struct {
			Count int `json:"count"`
		}
		st := ts.do(t, "GET", "/logs/_count?"+tc.param, "", &res)
		if st == 200 && res.Count != tc.want {
			t.Errorf("_count?%s: count %d, want %d (or a refusal)", tc.param, res.Count, tc.want)
		}
		if st != 200 && st != 400 {
			t.Errorf("_count?%s: HTTP %d", tc.param, st)
		}
	}
}
