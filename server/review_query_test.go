package server_test

import (
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewRESTQueryStringDecoding: query parameters are decoded as
// OpenSearch's RestUtils.decodeQueryString does. Go's url.Values dropped a
// pair it could not decode (a bad escape, "%%", a ';' separator) without a
// word, so PUT /logs/_doc/1?routing=%zz was acknowledged and stored the
// document without its routing, on the shard its _id hashes to: a write the
// client routed, misplaced.
func TestReviewRESTQueryStringDecoding(t *testing.T) {
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

// TestReviewRESTShardsPreferenceNotANumber: a _shards preference whose id
// is not a Java int fails as OpenSearch's Integer.parseInt does (a
// NumberFormatException: 400 number_format_exception), not as a 500; a
// negative id parses and names no shard.
func TestReviewRESTShardsPreferenceNotANumber(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`, nil); st != 200 {
		t.Fatal(st)
	}
	for _, path := range []string{"/logs/_search?preference=_shards:abc", "/logs/_count?preference=_shards:0,abc",
		"/logs/_search_shards?preference=_shards:abc"} {
		var eb errBody
		st := ts.do(t, "GET", path, "", &eb)
		if st != 400 || eb.Error.Type != "number_format_exception" || eb.Error.Reason != `For input string: "abc"` {
			t.Errorf("GET %s: HTTP %d %+v; want 400 number_format_exception", path, st, eb)
		}
	}
	var res struct {
		Shards struct{ Total int } `json:"_shards"`
	}
	if st := ts.do(t, "GET", "/logs/_search?preference=_shards:-1", "", &res); st != 200 || res.Shards.Total != 0 {
		t.Errorf("GET _shards:-1: HTTP %d, %d shards; want 200 and none", st, res.Shards.Total)
	}
}

// TestReviewRESTMalformedTaskID: a task id whose number is not a Java long
// is malformed (OpenSearch's TaskId: 400 illegal_argument_exception
// "malformed task id ..."), for a get and a cancel; only a well-formed id
// that names no task is a 404. "node:abc" was a 404.
func TestReviewRESTMalformedTaskID(t *testing.T) {
	ts := startServer(t, service.Config{})
	for _, tc := range []struct {
		method, path, id string
		status           int
	}{
		{"GET", "/_tasks/node:abc", "node:abc", 400},
		{"POST", "/_tasks/node:abc/_cancel", "node:abc", 400},
		{"GET", "/_tasks/node:1:2", "node:1:2", 400},
		{"GET", "/_tasks/node:99999999999999999999", "node:99999999999999999999", 400},
		{"GET", "/_tasks/node:7", "node:7", 404},
	} {
		var eb errBody
		st := ts.do(t, tc.method, tc.path, "", &eb)
		want := "malformed task id " + tc.id
		if tc.status == 404 {
			want = "task [" + tc.id + "] isn't running and hasn't stored its results"
		}
		if st != tc.status || eb.Error.Reason != want {
			t.Errorf("%s %s: HTTP %d %+v; want %d %q", tc.method, tc.path, st, eb, tc.status, want)
		}
	}
}
