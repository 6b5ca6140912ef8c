package server_test

import (
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewS22RESTReplaceIndexWithAlias: one _aliases request may replace
// an index by an alias of the same name, as OpenSearch's
// MetadataIndexAliasesService.applyAliasActions deletes every remove_index
// index first ("so we don't cause error when attempting to replace an
// index with a alias"): [add alias old to new, remove_index old] leaves the
// alias old on new. It was refused because the alias's name was still an
// index's when the add was checked.
func TestReviewS22RESTReplaceIndexWithAlias(t *testing.T) {
	ts := startServer(t, service.Config{})
	for _, ix := range []string{"old", "new"} {
		if st := ts.do(t, "PUT", "/"+ix, "", nil); st != 200 {
			t.Fatal(st)
		}
	}
	if st := ts.do(t, "PUT", "/new/_doc/1", `{"v":"new"}`, nil); st != 201 {
		t.Fatal(st)
	}
	var eb errBody
	st := ts.do(t, "POST", "/_aliases", `{"actions":[{"add":{"index":"new","alias":"old"}},{"remove_index":{"index":"old"}}]}`, &eb)
	if st != 200 {
		t.Fatalf("replace index old by an alias old of new: HTTP %d %+v; want 200", st, eb.Error)
	}
	var got struct {
		Index string `json:"_index"`
		Found bool   `json:"found"`
	}
	if st := ts.do(t, "GET", "/old/_doc/1", "", &got); st != 200 || !got.Found || got.Index != "new" {
		t.Errorf("GET /old/_doc/1 through the alias: HTTP %d %+v; want new's document", st, got)
	}
	// An alias added to an index the same request removes goes with it:
	// the index is gone first, so the add names a missing index.
	if st := ts.do(t, "PUT", "/tmp", "", nil); st != 200 {
		t.Fatal(st)
	}
	if st := ts.do(t, "POST", "/_aliases", `{"actions":[{"add":{"index":"tmp","alias":"t"}},{"remove_index":{"index":"tmp"}}]}`, nil); st == 200 {
		if st := ts.do(t, "GET", "/_alias/t", "", nil); st != 404 {
			t.Errorf("alias t of the removed index tmp: GET /_alias/t HTTP %d, want 404", st)
		}
	}
}
