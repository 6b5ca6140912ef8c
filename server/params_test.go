package server_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/shardsplit/shardsplit/service"
)

// allow_no_indices and ignore_unavailable are read, with each request's
// OpenSearch default (IndicesOptions), not accepted and ignored: a search
// of logs,missing with ignore_unavailable=true answers logs' hits, a
// wildcard matching nothing under allow_no_indices=false is a 404, and
// the cluster state and _search_shards are lenient by default.
func TestIndicesOptionsParameters(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`, nil); st != 200 {
		t.Fatalf("create: %d", st)
	}
	if st := ts.do(t, "PUT", "/logs/_doc/1?refresh=true", `{"a":1}`, nil); st != 201 {
		t.Fatalf("index: %d", st)
	}
	type result struct {
		Status int
		Type   string
		Reason string
		Hits   int
	}
	do := func(method, path, body string) result {
		var out struct {
			errBody
			Hits struct {
				Total struct {
					Value int `json:"value"`
				} `json:"total"`
			} `json:"hits"`
		}
		st := ts.do(t, method, path, body, &out)
		return result{st, out.Error.Type, out.Error.Reason, out.Hits.Total.Value}
	}
	notFound := func(reason string) result { return result{404, "index_not_found_exception", reason, 0} }
	for _, tc := range []struct {
		method, path, body string
		want               result
	}{
		{"GET", "/logs,missing/_search", "", notFound("no such index [missing]")},
		{"GET", "/logs,missing/_search?ignore_unavailable=true", "", result{200, "", "", 1}},
		{"GET", "/missing/_search?ignore_unavailable=true", "", result{200, "", "", 0}},
		{"GET", "/missing/_search?ignore_unavailable=true&allow_no_indices=false", "", notFound("no such index [missing]")},
		{"GET", "/missing,gone/_search?ignore_unavailable=true&allow_no_indices=false", "", notFound("no such index [null]")},
		{"GET", "/nope*/_search", "", result{200, "", "", 0}},
		{"GET", "/nope*/_search?allow_no_indices=false", "", notFound("no such index [nope*]")},
		{"GET", "/nope*/_count?allow_no_indices=false", "", notFound("no such index [nope*]")},
		{"GET", "/logs/_search?ignore_unavailable=maybe", "", result{400, "illegal_argument_exception", "Failed to parse value [maybe] as only [true] or [false] are allowed.", 0}},
		{"PUT", "/nope*/_settings", `{"index.number_of_replicas":0}`, notFound("no such index [nope*]")},
		{"PUT", "/nope*/_settings?allow_no_indices=true", `{"index.number_of_replicas":0}`, result{200, "", "", 0}},
		{"PUT", "/logs,missing/_settings?ignore_unavailable=true", `{"index.number_of_replicas":0}`, result{200, "", "", 0}},
		{"GET", "/missing/_settings", "", notFound("no such index [missing]")},
		{"GET", "/missing/_settings?ignore_unavailable=true", "", result{200, "", "", 0}},
		{"GET", "/missing/_search_shards", "", result{200, "", "", 0}},
		{"GET", "/missing/_search_shards?ignore_unavailable=false", "", notFound("no such index [missing]")},
		{"GET", "/_cluster/state/metadata/missing", "", result{200, "", "", 0}},
		{"POST", "/logs,missing/_refresh?ignore_unavailable=true", "", result{200, "", "", 0}},
		{"DELETE", "/missing?ignore_unavailable=true", "", result{200, "", "", 0}},
		{"DELETE", "/missing", "", notFound("no such index [missing]")},
	} {
		if diff := cmp.Diff(tc.want, do(tc.method, tc.path, tc.body)); diff != "" {
			t.Errorf("%s %s (-want +got):\n%s", tc.method, tc.path, diff)
		}
	}
	if got := do("GET", "/logs/_search", ""); got.Hits != 1 {
		t.Errorf("logs after the requests: %+v, want its one document", got)
	}
}

// preserve_existing=true is refused, not ignored: ignoring it overwrote
// the settings it asks to keep.
func TestPreserveExistingIsRefused(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"number_of_replicas":0,"refresh_interval":"5s"}}`, nil); st != 200 {
		t.Fatalf("create: %d", st)
	}
	var out errBody
	if st := ts.do(t, "PUT", "/logs/_settings?preserve_existing=true", `{"index.refresh_interval":"1s"}`, &out); st != 400 ||
		out.Error.Reason != "parameter [preserve_existing] is not supported by shardsplit" {
		t.Errorf("preserve_existing=true: %d %+v, want 400 not supported", st, out.Error)
	}
	var got map[string]struct {
		Settings map[string]string `json:"settings"`
	}
	if st := ts.do(t, "GET", "/logs/_settings?flat_settings=true", "", &got); st != 200 || got["logs"].Settings["index.refresh_interval"] != "5s" {
		t.Errorf("refresh_interval after the refused update: %d %v, want 5s", st, got["logs"].Settings["index.refresh_interval"])
	}
	if st := ts.do(t, "PUT", "/logs/_settings?preserve_existing=false", `{"index.refresh_interval":"1s"}`, nil); st != 200 {
		t.Errorf("preserve_existing=false: %d, want 200", st)
	}
}

// TestQueryStringDecoding: query parameters are decoded as OpenSearch's
// RestUtils.decodeQueryString does. Go's url.Values drops a pair it cannot
// decode (a bad escape, "%%", a ';' separator) without a word, and PUT
// /logs/_doc/1?routing=%zz would store the document without its routing,
// on the shard its _id hashes to: a write the client routed, misplaced.
func TestQueryStringDecoding(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"number_of_shards":4,"number_of_replicas":0}}`, nil); st != 200 {
		t.Fatal(st)
	}
	for _, tc := range []struct {
		path, typ, reason string
	}{
		{"/logs/_doc/1?routing=%zz", "bad_parameter_exception",
			"java.lang.IllegalArgumentException: invalid escape sequence `%zz' at index 0 of: %zz"},
		{"/logs/_doc/2?routing=a%", "bad_parameter_exception",
			"java.lang.IllegalArgumentException: unterminated escape sequence at end of string: a%"},
		{"/logs/_doc/3?routing=a%4", "bad_parameter_exception",
			"java.lang.IllegalArgumentException: partial escape sequence at end of string: a%4"},
		{"/logs/_doc/4?routing=a;b", "illegal_argument_exception",
			"request [/logs/_doc/4] contains unrecognized parameter: [b]"},
	} {
		var eb errBody
		st := ts.do(t, "PUT", tc.path, `{}`, &eb)
		if st != 400 || eb.Status != 400 || eb.Error.Type != tc.typ || eb.Error.Reason != tc.reason ||
			len(eb.Error.RootCause) != 1 || eb.Error.RootCause[0].Type != tc.typ {
			t.Errorf("PUT %s: HTTP %d %+v; want 400 %s %q", tc.path, st, eb, tc.typ, tc.reason)
		}
	}
	var cnt struct{ Count int }
	if ts.do(t, "GET", "/logs/_count", "", &cnt); cnt.Count != 0 {
		t.Errorf("refused writes stored %d documents", cnt.Count)
	}
	// "%%" is a '%' and '+' a space, as OpenSearch decodes them: the
	// document keeps the routing it was sent with.
	if st := ts.do(t, "PUT", "/logs/_doc/5?routing=a%%b+c", `{}`, nil); st != 201 {
		t.Fatalf("PUT with routing a%%%%b+c: %d", st)
	}
	var got struct {
		Found   bool   `json:"found"`
		Routing string `json:"_routing"`
	}
	if st := ts.do(t, "GET", "/logs/_doc/5?routing=a%25b%20c", "", &got); st != 200 || !got.Found || got.Routing != "a%b c" {
		t.Fatalf("GET with routing \"a%%b c\": %d %+v", st, got)
	}
}

// TestParamValuesValidated: a parameter an endpoint accepts and does not
// act on still has its value checked, as OpenSearch's REST layer parses
// each one (TimeValue for timeouts, Booleans for flags,
// SearchType.fromString, IndicesOptions' expand_wildcards,
// ActiveShardCount.parseString, track_total_hits as an int or a boolean):
// a bad value is a 400 naming it.
func TestParamValuesValidated(t *testing.T) {
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

// TestTimeValues: a timeout parameter is parsed as OpenSearch's
// TimeValue.parseTimeValue: whole numbers with a unit (case-insensitive
// except m), "0" and "-1" without one; every refusal an
// illegal_argument_exception with its message ("abc", "-5s" and "1.5s"
// refused, "0" accepted), and a value beyond a Java long refused rather
// than overflowed to a negative duration (wait_for_status would answer
// 408 at once).
func TestTimeValues(t *testing.T) {
	ts := startServer(t, service.Config{})
	// One replica that cannot be assigned: yellow, so waiting for green
	// lasts until the timeout.
	if st := ts.do(t, "PUT", "/y", `{"settings":{"number_of_replicas":1}}`, nil); st != 200 {
		t.Fatal(st)
	}
	for _, tc := range []struct{ value, reason string }{
		{"abc", "failed to parse setting [timeout] with value [abc] as a time value: unit is missing or unrecognized"},
		{"-5s", "failed to parse setting [timeout] with value [-5s] as a time value: negative durations are not supported"},
		{"1.5s", "failed to parse [1.5s], fractional time values are not supported"},
		// Not a Java long, but a double: Java's message says fractional.
		{"99999999999999999999s", "failed to parse [99999999999999999999s], fractional time values are not supported"},
		{"abcs", "failed to parse [abcs]"},
		{"5x", "failed to parse setting [timeout] with value [5x] as a time value: unit is missing or unrecognized"},
	} {
		var body string
		st := ts.do(t, "GET", "/_cluster/health?wait_for_status=green&timeout="+tc.value, "", &body)
		var eb errBody
		_ = json.Unmarshal([]byte(body), &eb)
		if st != 400 || eb.Error.Type != "illegal_argument_exception" || eb.Error.Reason != tc.reason {
			t.Errorf("timeout=%s: HTTP %d %s; want 400 illegal_argument_exception %q", tc.value, st, body, tc.reason)
		}
	}
	for _, tc := range []struct {
		value    string
		min, max time.Duration
	}{
		{"0", 0, 2 * time.Second},
		{"200MS", 150 * time.Millisecond, 5 * time.Second},
		{"1s", 900 * time.Millisecond, 6 * time.Second},
	} {
		var body struct {
			TimedOut bool `json:"timed_out"`
		}
		start := time.Now()
		st := ts.do(t, "GET", "/_cluster/health?wait_for_status=green&timeout="+tc.value, "", &body)
		took := time.Since(start)
		if st != 408 || !body.TimedOut || took < tc.min || took > tc.max {
			t.Errorf("timeout=%s: HTTP %d timed_out %v after %v; want 408 after %v to %v", tc.value, st, body.TimedOut, took, tc.min, tc.max)
		}
	}
}
