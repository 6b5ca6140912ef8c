package server_test

import (
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewS22RESTBulkEmptyID: a bulk index or create whose action line
// names "_id": "" fails alone with 400 illegal_argument_exception "if _id
// is specified it must not be empty", as OpenSearch's IndexRequest.process
// refuses it (only an absent _id asks for a generated one). It was
// acknowledged with 201 under a generated id: a document the client did
// not ask for, which a retry of the same bulk would write again.
func TestReviewS22RESTBulkEmptyID(t *testing.T) {
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

// TestReviewS22RESTBulkPipelineRefused: a bulk's pipeline parameter names
// an ingest pipeline that would transform every document (OpenSearch fails
// each item whose pipeline does not exist); shardsplit has none, and the
// single-document index refuses pipeline as unsupported. The bulk accepted
// it and stored every document untransformed, answering 201s.
func TestReviewS22RESTBulkPipelineRefused(t *testing.T) {
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

// TestReviewS22RESTBulkMustEndWithNewline: OpenSearch's BulkRequestParser
// refuses a body whose last line is not terminated ("The bulk request must
// be terminated by a newline [\n]", findNextMarker), before applying
// anything, so a body cut short after a whole line is not taken for the
// whole request. A last source or delete line without its newline was
// applied.
func TestReviewS22RESTBulkMustEndWithNewline(t *testing.T) {
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
