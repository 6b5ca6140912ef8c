package server_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/service"
)

// track_total_hits was parsed and then ignored: every search answered an
// exact total. OpenSearch counts exactly up to the limit (10,000 by
// default; true: always; an integer n: up to n) and answers "gte" the
// limit beyond it, and leaves the total out for false
// (https://www.elastic.co/guide/en/elasticsearch/reference/7.1/search-request-track-total-hits.html;
// RestSearchAction refuses rest_total_hits_as_int with a limit that is not
// exact).
func TestTrackTotalHits(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"number_of_shards":2}}`, nil); st != 200 {
		t.Fatal(st)
	}
	const docs = trackTotalDefaultForTest + 5
	var bulk strings.Builder
	for i := range docs {
		fmt.Fprintf(&bulk, "{\"index\":{\"_id\":\"d%d\"}}\n{}\n", i)
	}
	if st := ts.do(t, "POST", "/logs/_bulk?refresh=true", bulk.String(), nil); st != 200 {
		t.Fatal(st)
	}
	type total struct {
		Value    int    `json:"value"`
		Relation string `json:"relation"`
	}
	for _, tc := range []struct {
		query, body string
		want        *total // nil: no total in the response
	}{
		{"", "", &total{trackTotalDefaultForTest, "gte"}},
		{"?track_total_hits=true", "", &total{docs, "eq"}},
		{"?track_total_hits=7", "", &total{7, "gte"}},
		{"?track_total_hits=20000", "", &total{docs, "eq"}},
		{"", `{"track_total_hits":7}`, &total{7, "gte"}},
		{"?track_total_hits=true", `{"track_total_hits":7}`, &total{docs, "eq"}}, // the parameter wins
		{"?track_total_hits=false", "", nil},
		{"?track_total_hits=-1", "", nil},
	} {
		var res struct {
			Hits map[string]any `json:"hits"`
		}
		if st := ts.do(t, "POST", "/logs/_search"+tc.query, tc.body, &res); st != 200 {
			t.Errorf("search%s %s: HTTP %d", tc.query, tc.body, st)
			continue
		}
		var got *total
		if v, ok := res.Hits["total"].(map[string]any); ok {
			got = &total{int(v["value"].(float64)), v["relation"].(string)}
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("search%s %s: hits.total (-want +got):\n%s", tc.query, tc.body, d)
		}
	}
	var asInt struct {
		Hits struct {
			Total int `json:"total"`
		} `json:"hits"`
	}
	if st := ts.do(t, "GET", "/logs/_search?rest_total_hits_as_int=true", "", &asInt); st != 200 || asInt.Hits.Total != docs {
		t.Errorf("rest_total_hits_as_int=true: HTTP %d total %d, want %d (exact)", st, asInt.Hits.Total, docs)
	}
	for _, bad := range []string{"?rest_total_hits_as_int=true&track_total_hits=7", "?track_total_hits=-2"} {
		if st := ts.do(t, "GET", "/logs/_search"+bad, "", nil); st != 400 {
			t.Errorf("search%s: HTTP %d, want 400", bad, st)
		}
	}
}

// trackTotalDefaultForTest is OpenSearch's default track_total_hits.
const trackTotalDefaultForTest = 10_000
