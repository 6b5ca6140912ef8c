package server_test

import (
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewS22RESTGetVersionChecked: a get's version parameter is a
// condition, as in OpenSearch's ShardGetService (VersionType
// isVersionConflictForReads): a document whose _version differs answers
// 409 version_conflict_engine_exception "[1]: version conflict, current
// version [2] is different than the one provided [5]", for _doc and for
// _source. It was accepted and ignored: the document came back with 200.
func TestReviewS22RESTGetVersionChecked(t *testing.T) {
	ts := startServer(t, service.Config{})
	for range 2 {
		if st := ts.do(t, "PUT", "/logs/_doc/1", `{"a":1}`, nil); st/100 != 2 {
			t.Fatal(st)
		}
	}
	for _, path := range []string{"/logs/_doc/1", "/logs/_source/1"} {
		var eb errBody
		st := ts.do(t, "GET", path+"?version=5", "", &eb)
		if st != 409 || eb.Error.Type != "version_conflict_engine_exception" ||
			eb.Error.Reason != "[1]: version conflict, current version [2] is different than the one provided [5]" {
			t.Errorf("GET %s?version=5 of a document at _version 2: HTTP %d %+v; want 409 version_conflict_engine_exception", path, st, eb.Error)
		}
		if st := ts.do(t, "GET", path+"?version=2", "", nil); st != 200 {
			t.Errorf("GET %s?version=2 of a document at _version 2: HTTP %d, want 200", path, st)
		}
	}
	if st := ts.do(t, "GET", "/logs/_doc/1?version=x", "", nil); st != 400 {
		t.Errorf("GET ?version=x: HTTP %d, want 400", st)
	}
}
