package server_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// A bulk action line with a field OpenSearch knows but shardsplit does not
// support (if_seq_no, version, pipeline, ...) was refused as "an unknown
// parameter", which tells a client its request is malformed; it is refused
// as unsupported, naming the field, and a field OpenSearch does not know
// is still unknown.
func TestBulkActionLineFieldsRefusedAsUnsupported(t *testing.T) {
	ts := startServer(t, service.Config{})
	for _, tc := range []struct{ field, want string }{
		{`"if_seq_no":3`, "parameter [if_seq_no] is not supported by shardsplit"},
		{`"version":2`, "parameter [version] is not supported by shardsplit"},
		{`"pipeline":"p"`, "parameter [pipeline] is not supported by shardsplit"},
		{`"bogus":1`, "contains an unknown parameter [bogus]"},
	} {
		var res struct {
			Error struct {
				Reason string `json:"reason"`
			} `json:"error"`
		}
		body := fmt.Sprintf("{\"index\":{\"_index\":\"logs\",\"_id\":\"1\",%s}}\n{}\n", tc.field)
		if st := ts.do(t, "POST", "/_bulk", body, &res); st != 400 || !strings.Contains(res.Error.Reason, tc.want) {
			t.Errorf("bulk action line with %s: HTTP %d %q, want 400 naming %q", tc.field, st, res.Error.Reason, tc.want)
		}
	}
}

// TestBulkMetadataValues: a bulk action line's _id, _index and routing take
// any simple JSON value, as OpenSearch's BulkRequestParser reads them with
// parser.text() (a number id is common); an array or an object is refused
// with its message, and a numeric _id fails neither its item nor the
// request.
func TestBulkMetadataValues(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`, nil); st != 200 {
		t.Fatal(st)
	}
	var res struct {
		Errors bool `json:"errors"`
		Items  []map[string]struct {
			ID     string `json:"_id"`
			Status int    `json:"status"`
		} `json:"items"`
	}
	body := "{\"index\":{\"_index\":\"logs\",\"_id\":5}}\n{\"a\":1}\n" +
		"{\"index\":{\"_index\":\"logs\",\"_id\":\"6\",\"routing\":7}}\n{\"a\":2}\n" +
		"{\"delete\":{\"_index\":\"logs\",\"_id\":5}}\n"
	if st := ts.do(t, "POST", "/_bulk", body, &res); st != 200 || res.Errors || len(res.Items) != 3 ||
		res.Items[0]["index"].ID != "5" || res.Items[0]["index"].Status != 201 ||
		res.Items[1]["index"].Status != 201 || res.Items[2]["delete"].Status != 200 {
		t.Fatalf("bulk with numeric _id and routing: HTTP %d %+v", st, res)
	}
	var got struct {
		Found   bool   `json:"found"`
		Routing string `json:"_routing"`
	}
	if st := ts.do(t, "GET", "/logs/_doc/6?routing=7", "", &got); st != 200 || !got.Found || got.Routing != "7" {
		t.Fatalf("doc 6 with routing 7: %d %+v", st, got)
	}
	for _, tc := range []struct{ body, reason string }{
		{"{\"index\":{\"_index\":\"logs\",\"_id\":[1]}}\n{}\n",
			"Malformed action/metadata line [1], expected a simple value for field [_id] but found [START_ARRAY]"},
		{"{\"index\":{\"_index\":\"logs\",\"_id\":{\"a\":1}}}\n{}\n",
			"Malformed action/metadata line [1], expected a simple value for field [_id] but found [START_OBJECT]"},
	} {
		var eb errBody
		if st := ts.do(t, "POST", "/_bulk", tc.body, &eb); st != 400 || eb.Error.Type != "illegal_argument_exception" || eb.Error.Reason != tc.reason {
			t.Errorf("bulk %q: HTTP %d %+v; want 400 %q", tc.body, st, eb, tc.reason)
		}
	}
}

// TestBulkEmptyID: a bulk index or create whose action line names
// "_id": "" fails alone with 400 illegal_argument_exception "if _id is
// specified it must not be empty", as OpenSearch's IndexRequest.process
// refuses it (only an absent _id asks for a generated one): a 201 under a
// generated id would be a document the client did not ask for, which a
// retry of the same bulk would write again.
func TestBulkEmptyID(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs", "", nil); st != 200 {
		t.Fatal(st)
	}
	var res struct {
		Errors bool `json:"errors"`
		Items  []map[string]struct {
			ID     string `json:"_id"`
			Status int    `json:"status"`
			Error  struct {
				Type   string `json:"type"`
				Reason string `json:"reason"`
			} `json:"error"`
		} `json:"items"`
	}
	body := "{\"index\":{\"_id\":\"\"}}\n{\"a\":1}\n{\"create\":{\"_id\":\"\"}}\n{\"a\":2}\n{\"index\":{\"_id\":\"x\"}}\n{\"a\":3}\n"
	if st := ts.do(t, "POST", "/logs/_bulk", body, &res); st != 200 || len(res.Items) != 3 {
		t.Fatalf("bulk: HTTP %d %+v", st, res)
	}
	if !res.Errors {
		t.Errorf("bulk with empty _ids: errors false")
	}
	for i, op := range []string{"index", "create"} {
		it := res.Items[i][op]
		if it.Status != 400 || it.Error.Type != "illegal_argument_exception" || it.Error.Reason != "if _id is specified it must not be empty" {
			t.Errorf("item %d (%s with _id \"\"): status %d, _id %q, error %+v; want 400 illegal_argument_exception", i, op, it.Status, it.ID, it.Error)
		}
	}
	if it := res.Items[2]["index"]; it.Status != 201 {
		t.Errorf("item 2: status %d, want 201", it.Status)
	}
	var count struct {
		Count int `json:"count"`
	}
	if st := ts.do(t, "GET", "/logs/_count", "", &count); st != 200 || count.Count != 1 {
		t.Errorf("documents after the bulk: %d (HTTP %d), want 1", count.Count, st)
	}
}

// TestBulkPipelineRefused: a bulk's pipeline parameter names an ingest
// pipeline that would transform every document (OpenSearch fails each item
// whose pipeline does not exist); shardsplit has none, and the bulk
// refuses it as the single-document index does, rather than store every
// document untransformed.
func TestBulkPipelineRefused(t *testing.T) {
	ts := startServer(t, service.Config{})
	var res struct {
		Errors bool `json:"errors"`
	}
	st := ts.do(t, "POST", "/logs/_bulk?pipeline=redact", "{\"index\":{\"_id\":\"1\"}}\n{\"secret\":\"s\"}\n", &res)
	if st == 200 && !res.Errors {
		t.Errorf("bulk with pipeline=redact: HTTP 200 without errors; the pipeline was ignored")
	}
	var got map[string]any
	if st := ts.do(t, "GET", "/logs/_doc/1", "", &got); st == 200 {
		t.Errorf("the document was stored without its pipeline: %v", got)
	}
}

// TestBulkMustEndWithNewline: OpenSearch's BulkRequestParser refuses a
// body whose last line is not terminated ("The bulk request must be
// terminated by a newline [\n]", findNextMarker), before applying anything,
// so a body cut short after a whole line is not taken for the whole
// request.
func TestBulkMustEndWithNewline(t *testing.T) {
	ts := startServer(t, service.Config{})
	for _, body := range []string{
		"{\"index\":{\"_index\":\"logs\",\"_id\":\"1\"}}\n{\"a\":1}",
		"{\"index\":{\"_index\":\"logs\",\"_id\":\"1\"}}\n{\"a\":1}\n{\"delete\":{\"_index\":\"logs\",\"_id\":\"2\"}}",
	} {
		var eb errBody
		if st := ts.do(t, "POST", "/_bulk", body, &eb); st != 400 || eb.Error.Reason != "The bulk request must be terminated by a newline [\\n]" {
			t.Errorf("bulk %q: HTTP %d %+v; want 400 terminated by a newline", body, st, eb.Error)
		}
	}
	if st := ts.do(t, "GET", "/logs/_doc/1", "", nil); st != 404 {
		t.Errorf("a document of a refused bulk: GET HTTP %d, want 404", st)
	}
}
