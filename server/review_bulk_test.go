package server_test

import (
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewRESTBulkMetadataValues: a bulk action line's _id, _index and
// routing take any simple JSON value, as OpenSearch's BulkRequestParser
// reads them with parser.text() (a number id is common); an array or an
// object is refused with its message. A numeric _id failed the whole
// request ("field [_id] must be a string"), every other item with it.
func TestReviewRESTBulkMetadataValues(t *testing.T) {
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
