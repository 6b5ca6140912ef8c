package server_test

import (
	"strings"
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewS22RESTParamValuesValidated: a parameter an endpoint accepts
// and does not act on still has its value checked, as OpenSearch's REST
// layer parses each one (TimeValue for timeouts, Booleans for flags,
// SearchType.fromString, IndicesOptions' expand_wildcards,
// ActiveShardCount.parseString, track_total_hits as an int or a boolean):
// a bad value is a 400 naming it. Each of these was accepted.
func TestReviewS22RESTParamValuesValidated(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", "", nil); st != 200 {
		t.Fatal(st)
	}
	for _, tc := range []struct{ method, path, body, bad string }{
		{"GET", "/logs/_search?timeout=abc", "", "abc"},
		{"PUT", "/logs/_doc/1?timeout=abc", `{}`, "abc"},
		{"DELETE", "/logs/_doc/1?timeout=abc", "", "abc"},
		{"POST", "/logs/_bulk?timeout=abc", "{\"index\":{}}\n{}\n", "abc"},
		{"PUT", "/logs/_doc/1?wait_for_active_shards=abc", `{}`, "abc"},
		{"GET", "/logs/_search?track_total_hits=abc", "", "abc"},
		{"GET", "/logs/_search?request_cache=abc", "", "abc"},
		{"GET", "/logs/_search?rest_total_hits_as_int=abc", "", "abc"},
		{"GET", "/logs/_search?search_type=foo", "", "foo"},
		{"GET", "/logs/_search?expand_wildcards=bogus", "", "bogus"},
		{"PUT", "/x1", `{}`, ""}, // control: a create without parameters
	} {
		var eb errBody
		st := ts.do(t, tc.method, tc.path, tc.body, &eb)
		if tc.bad == "" {
			if st != 200 {
				t.Errorf("%s %s: HTTP %d, want 200", tc.method, tc.path, st)
			}
			continue
		}
		if st != 400 || !(strings.Contains(eb.Error.Reason, "["+tc.bad+"]") || strings.Contains(eb.Error.Reason, `"`+tc.bad+`"`)) {
			t.Errorf("%s %s: HTTP %d %q; want 400 naming [%s]", tc.method, tc.path, st, eb.Error.Reason, tc.bad)
		}
	}
	for _, ok := range []string{"timeout=30s", "wait_for_active_shards=all", "wait_for_active_shards=1", "track_total_hits=100",
		"track_total_hits=true", "request_cache=false", "search_type=dfs_query_then_fetch", "expand_wildcards=open,hidden"} {
		path := "/logs/_search?" + ok
		if strings.HasPrefix(ok, "wait_for") {
			path = "/logs/_doc/1?" + ok
		}
		method := "GET"
		if strings.HasPrefix(ok, "wait_for") {
			method = "PUT"
		}
		if st := ts.do(t, method, path, `{}`, nil); st/100 != 2 {
			t.Errorf("%s %s: HTTP %d, want 2xx", method, path, st)
		}
	}
}

// TestReviewS22RESTSearchBodyValuesValidated: a search body's timeout is a
// time value and its track_total_hits a boolean or an integer, as
// SearchSourceBuilder.parseXContent reads them; any value was accepted.
func TestReviewS22RESTSearchBodyValuesValidated(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", "", nil); st != 200 {
		t.Fatal(st)
	}
	for _, body := range []string{`{"timeout":"abc"}`, `{"timeout":true}`, `{"track_total_hits":"abc"}`, `{"track_total_hits":1.5}`} {
		if st := ts.do(t, "POST", "/logs/_search", body, nil); st != 400 {
			t.Errorf("search %s: HTTP %d, want 400", body, st)
		}
	}
	for _, body := range []string{`{"timeout":"10s"}`, `{"track_total_hits":false}`, `{"track_total_hits":1000}`} {
		if st := ts.do(t, "POST", "/logs/_search", body, nil); st != 200 {
			t.Errorf("search %s: HTTP %d, want 200", body, st)
		}
	}
}
