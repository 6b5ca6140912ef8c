package server_test

import (
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewS22dRESTGetVersionTypes: a get's version_type is read by
// VersionType.fromString, which takes external_gt (as EXTERNAL) besides
// internal, external and external_gte; and the external types'
// validateVersionForReads accepts version 0 (version >= 0), which a
// document at _version 1 then answers with a 409 conflict. Both were
// refused with a 400.
func TestReviewS22dRESTGetVersionTypes(t *testing.T) {
	ts := startServer(t, service.Config{})
	if st := ts.do(t, "PUT", "/logs/_doc/1", `{"a":1}`, nil); st != 201 {
		t.Fatal(st)
	}
	if st := ts.do(t, "GET", "/logs/_doc/1?version=1&version_type=external_gt", "", nil); st != 200 {
		t.Errorf("GET ?version=1&version_type=external_gt of a document at _version 1: HTTP %d, want 200", st)
	}
	for _, vt := range []string{"external", "external_gt", "external_gte"} {
		var eb errBody
		if st := ts.do(t, "GET", "/logs/_doc/1?version=0&version_type="+vt, "", &eb); st != 409 ||
			eb.Error.Reason != "[1]: version conflict, current version [1] is different than the one provided [0]" {
			t.Errorf("GET ?version=0&version_type=%s of a document at _version 1: HTTP %d %+v; want 409 version_conflict_engine_exception", vt, st, eb.Error)
		}
	}
	var eb errBody
	if st := ts.do(t, "GET", "/logs/_doc/1?version=0", "", &eb); st != 400 ||
		eb.Error.Reason != "Validation Failed: 1: illegal version value [0] for version type [INTERNAL];" {
		t.Errorf("GET ?version=0 (internal): HTTP %d %+v; want 400 illegal version value", st, eb.Error)
	}
	if st := ts.do(t, "GET", "/logs/_doc/1?version=-1&version_type=external", "", &eb); st != 400 ||
		eb.Error.Reason != "Validation Failed: 1: illegal version value [-1] for version type [EXTERNAL];" {
		t.Errorf("GET ?version=-1&version_type=external: HTTP %d %+v; want 400 illegal version value", st, eb.Error)
	}
}
