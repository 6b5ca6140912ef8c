package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/shardsplit/shardsplit/server"
	"github.com/shardsplit/shardsplit/service"
)

type errBody struct {
	Error struct {
		RootCause []struct {
			Type   string `json:"type"`
			Reason string `json:"reason"`
		} `json:"root_cause"`
		Type   string `json:"type"`
		Reason string `json:"reason"`
		Index  string `json:"index"`
	} `json:"error"`
	Status int `json:"status"`
}

// TestErrorBodies checks that every kind of failure answers OpenSearch's
// error body with the right status and type, and changes nothing.
func TestErrorBodies(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`, nil); st != 200 {
		t.Fatalf("create: %d", st)
	}
	long := strings.Repeat("x", 513)
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		typ, reason              string
	}{
		{"malformed JSON", "PUT", "/other", `{"settings":`, 400, "parse_exception", ""},
		{"malformed document", "PUT", "/logs/_doc/1", `{"a":`, 400, "mapper_parsing_exception", "failed to parse"},
		{"document not an object", "PUT", "/logs/_doc/1", `[1]`, 400, "mapper_parsing_exception", "failed to parse"},
		{"unknown setting", "PUT", "/other", `{"settings":{"index.foo":1}}`, 400, "illegal_argument_exception",
			"unknown setting [index.foo] please check that any required plugins are installed, or check the breaking changes documentation for removed settings"},
		{"bad boolean", "PUT", "/logs/_settings", `{"index.blocks.write":"yes"}`, 400, "illegal_argument_exception",
			"Failed to parse value [yes] as only [true] or [false] are allowed."},
		{"static setting", "PUT", "/logs/_settings", `{"index.number_of_shards":4}`, 400, "illegal_argument_exception", ""},
		{"final setting", "PUT", "/logs/_settings", `{"index.number_of_routing_shards":4}`, 400, "illegal_argument_exception",
			"final index setting [index.number_of_routing_shards], not updateable"},
		{"unknown parameter", "GET", "/logs/_doc/1?bogus=1", "", 400, "illegal_argument_exception",
			"request [/logs/_doc/1] contains unrecognized parameter: [bogus]"},
		{"unknown URI", "GET", "/_nope", "", 400, "illegal_argument_exception", "no handler found for uri [/_nope] and method [GET]"},
		{"wrong method", "PATCH", "/logs/_doc/1", "", 405, "illegal_argument_exception", ""},
		{"id over 512 bytes", "PUT", "/logs/_doc/" + long, `{}`, 400, "action_request_validation_exception",
			"Validation Failed: 1: id [" + long + "] is too long, must be no longer than 512 bytes but was: 513;"},
		{"missing index", "GET", "/nope/_doc/1", "", 404, "index_not_found_exception", "no such index [nope]"},
		{"invalid index name", "PUT", "/_bad", "", 400, "illegal_argument_exception", ""}, // no such route for PUT /_bad
		{"uppercase index name", "PUT", "/Bad", "", 400, "invalid_index_name_exception", "Invalid index name [Bad], must be lowercase"},
		{"unsupported query", "POST", "/logs/_search", `{"query":{"match":{"a":"b"}}}`, 400, "illegal_argument_exception", ""},
		{"bad split body", "POST", "/logs/_shards/0/_split", `{"number_of_splits":1}`, 400, "action_request_validation_exception", ""},
		{"split of a missing shard", "POST", "/logs/_shards/7/_split", `{"number_of_splits":2}`, 404, "shard_not_found_exception", ""},
		{"malformed bulk action", "POST", "/_bulk", "{\"index\":\n{}\n", 400, "illegal_argument_exception", ""},
		{"unknown task", "GET", "/_tasks/abc:9", "", 404, "resource_not_found_exception", ""},
		{"result window", "GET", "/logs/_search?from=9995&size=10", "", 400, "illegal_argument_exception",
			"Result window is too large, from + size must be less than or equal to: [10000] but was [10005]. See the scroll api for a more efficient way to request large data sets. This limit can be set by changing the [index.max_result_window] index level setting."},
		{"size overflow", "GET", "/logs/_search?from=1&size=9223372036854775807", "", 400, "illegal_argument_exception", ""},
		{"only_nodes elsewhere", "GET", "/logs/_search_shards?preference=_only_nodes:other", "", 400, "illegal_argument_exception",
			"No data node with criteria [other] found"},
		{"bad preference", "GET", "/logs/_search?preference=_bogus", "", 400, "illegal_argument_exception", ""},
		{"refresh value", "PUT", "/logs/_doc/1?refresh=soon", `{}`, 400, "illegal_argument_exception", "Unknown value for refresh: [soon]."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var eb errBody
			st := ts.do(t, tc.method, tc.path, tc.body, &eb)
			if st != tc.status || eb.Status != tc.status || eb.Error.Type != tc.typ || len(eb.Error.RootCause) != 1 ||
				eb.Error.RootCause[0].Type != tc.typ || (tc.reason != "" && eb.Error.Reason != tc.reason) {
				t.Fatalf("%s %s: HTTP %d %+v; want %d %s %q", tc.method, tc.path, st, eb, tc.status, tc.typ, tc.reason)
			}
		})
	}
	// Nothing changed: no index "other", no document 1.
	if st := ts.do(t, "HEAD", "/other", "", nil); st != 404 {
		t.Fatalf("a failed create left index other: %d", st)
	}
	var cnt struct{ Count int }
	if ts.do(t, "GET", "/logs/_count", "", &cnt); cnt.Count != 0 {
		t.Fatalf("failed writes left %d documents", cnt.Count)
	}
}

// TestBodyTooLarge checks the 413 for bodies over http.max_content_length,
// both announced (Content-Length) and streamed.
func TestBodyTooLarge(t *testing.T) {
	svc, err := service.Open(service.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	h := server.New(server.Config{Service: svc, MaxContentLength: 1 << 10})
	for _, chunked := range []bool{false, true} {
		body := strings.Repeat("x", 2<<10)
		req, _ := http.NewRequestWithContext(context.Background(), "PUT", "/logs/_doc/1", strings.NewReader(body))
		if chunked {
			req.ContentLength = -1
		}
		rec := newRecorder()
		h.ServeHTTP(rec, req)
		if rec.status != http.StatusRequestEntityTooLarge || !strings.Contains(rec.body.String(), `"status":413`) {
			t.Fatalf("chunked=%v: %d %s", chunked, rec.status, rec.body.String())
		}
	}
	if names := svc.Names(); len(names) != 0 {
		t.Fatalf("a refused request created %v", names)
	}
}

func TestFormatBytes(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0b"}, {230, "230b"}, {1023, "1023b"}, {1024, "1kb"}, {5222, "5kb"}, {5223, "5.1kb"}, {1258292, "1.2mb"},
		{1 << 30, "1gb"}, {3*(1<<30) + (1 << 29), "3.5gb"},
	} {
		if got := server.FormatBytes(tc.n); got != tc.want {
			t.Errorf("FormatBytes(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

// TestUnsupportedContentTypeIs406: a request with a body whose
// Content-Type is not one the server parses is refused before its handler
// runs, with RestController's 406 and words; a missing Content-Type is
// "Content-Type header is missing"; a request without a body is not
// checked, and JSON with a charset passes.
func TestUnsupportedContentTypeIs406(t *testing.T) {
	ts := startServer(t, service.Config{})
	send := func(ct, body string) (int, string) {
		req, _ := http.NewRequestWithContext(context.Background(), "PUT", ts.url+"/ct/_doc/1", strings.NewReader(body))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, b := send("text/plain", `{"a":1}`); st != 406 || b != `{"error":"Content-Type header [text/plain] is not supported","status":406}` {
		t.Errorf("text/plain: %d %s", st, b)
	}
	if st, b := send("", `{"a":1}`); st != 406 || b != `{"error":"Content-Type header is missing","status":406}` {
		t.Errorf("no Content-Type: %d %s", st, b)
	}
	if names := ts.svc.Names(); len(names) != 0 {
		t.Errorf("a refused request created %v", names)
	}
	if st, b := send("application/json; charset=UTF-8", `{"a":1}`); st != 201 {
		t.Errorf("application/json with a charset: %d %s", st, b)
	}
	if st, b := send("text/plain", ""); st != 400 || !strings.Contains(b, "request body is required") {
		t.Errorf("no body with text/plain: %d %s", st, b)
	}
}
