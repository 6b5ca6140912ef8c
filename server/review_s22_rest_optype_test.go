package server_test

import (
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewS22RESTOpType: op_type is read as RestIndexAction reads it:
// case-insensitively (IndexRequest.opType lowercases it: "CREATE" is
// create), and the _create endpoint takes only create ("opType must be
// 'create', found: [index]", CreateHandler.validateOpType). "CREATE" was
// refused, and PUT /logs/_create/1?op_type=index was accepted as a create.
func TestReviewS22RESTOpType(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs/_doc/1?op_type=CREATE", `{}`, nil); st != 201 {
		t.Errorf("op_type=CREATE on a new id: HTTP %d, want 201", st)
	}
	if st := ts.do(t, "PUT", "/logs/_doc/1?op_type=CREATE", `{}`, nil); st != 409 {
		t.Errorf("op_type=CREATE on an existing id: HTTP %d, want 409", st)
	}
	var eb errBody
	if st := ts.do(t, "PUT", "/logs/_create/2?op_type=index", `{}`, &eb); st != 400 || eb.Error.Reason != "opType must be 'create', found: [index]" {
		t.Errorf("_create with op_type=index: HTTP %d %+v; want 400 opType must be 'create'", st, eb.Error)
	}
}

// TestReviewS22RESTDeleteParams: DELETE /{index}/_doc/{id} takes
// RestDeleteAction's parameters only; op_type, pipeline and require_alias
// (the index request's) are unrecognized there (400 "request [...]
// contains unrecognized parameter"). They were accepted and ignored: a
// delete with require_alias=true through an index name deleted the
// document.
func TestReviewS22RESTDeleteParams(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs/_doc/1", `{}`, nil); st != 201 {
		t.Fatal(st)
	}
	for _, p := range []string{"op_type=create", "pipeline=x", "require_alias=true"} {
		var eb errBody
		if st := ts.do(t, "DELETE", "/logs/_doc/1?"+p, "", &eb); st != 400 || eb.Error.Type != "illegal_argument_exception" {
			t.Errorf("DELETE ?%s: HTTP %d %+v; want 400 unrecognized parameter", p, st, eb.Error)
		}
	}
	if st := ts.do(t, "DELETE", "/logs/_doc/1?refresh=true&routing=&timeout=1m&wait_for_active_shards=1", "", nil); st != 200 {
		t.Errorf("DELETE with its own parameters: HTTP %d, want 200", st)
	}
}
