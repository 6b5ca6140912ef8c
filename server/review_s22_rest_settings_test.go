package server_test

import (
	"strings"
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewS22RESTRefreshIntervalIsATimeValue: index.refresh_interval is
// OpenSearch's time setting (IndexSettings.INDEX_REFRESH_INTERVAL_SETTING):
// a value that is not a time value is refused with a 400 naming it ("failed
// to parse setting [index.refresh_interval] with value [abc] as a time
// value: unit is missing or unrecognized"), on create and on an update.
// Any string was accepted and stored.
func TestReviewS22RESTRefreshIntervalIsATimeValue(t *testing.T) {
	ts := startServer(t, service.Config{})
	for _, tc := range []struct{ method, path, body string }{
		{"PUT", "/a", `{"settings":{"index.refresh_interval":"abc"}}`},
		{"PUT", "/b", `{"settings":{"index":{"refresh_interval":"1.5s"}}}`},
	} {
		var eb errBody
		if st := ts.do(t, tc.method, tc.path, tc.body, &eb); st != 400 || eb.Error.Type != "illegal_argument_exception" {
			t.Errorf("%s %s %s: HTTP %d %+v; want 400 illegal_argument_exception", tc.method, tc.path, tc.body, st, eb.Error)
		}
	}
	if st := ts.do(t, "PUT", "/logs", `{"settings":{"index.refresh_interval":"30s"}}`, nil); st != 200 {
		t.Fatalf("refresh_interval 30s: HTTP %d", st)
	}
	var eb errBody
	if st := ts.do(t, "PUT", "/logs/_settings", `{"index.refresh_interval":"abc"}`, &eb); st != 400 || !strings.Contains(eb.Error.Reason, "[abc]") {
		t.Errorf("update refresh_interval to abc: HTTP %d %+v; want 400 naming [abc]", st, eb.Error)
	}
	for _, ok := range []string{"-1", "1s", "500ms"} {
		if st := ts.do(t, "PUT", "/logs/_settings", `{"index.refresh_interval":"`+ok+`"}`, nil); st != 200 {
			t.Errorf("update refresh_interval to %s: HTTP %d, want 200", ok, st)
		}
	}
}
