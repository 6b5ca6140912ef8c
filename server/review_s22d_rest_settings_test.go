package server_test

import (
	"strings"
	"testing"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewS22dRESTRefreshIntervalMinimum: index.refresh_interval is a
// time setting with a minimum of -1ms (IndexSettings'
// Setting.timeSetting(..., new TimeValue(-1, MILLISECONDS))): "-1s" or
// "-1m" parse as time values but are refused, "failed to parse value [-1s]
// for setting [index.refresh_interval], must be >= [-1ms]". They were
// accepted and stored.
func TestReviewS22dRESTRefreshIntervalMinimum(t *testing.T) {
	ts := startServer(t, service.Config{})
	for i, bad := range []string{"-1s", "-1m", "-1h", "-1d"} {
		var eb errBody
		if st := ts.do(t, "PUT", "/a"+string(rune('a'+i)), `{"settings":{"index.refresh_interval":"`+bad+`"}}`, &eb); st != 400 ||
			eb.Error.Type != "illegal_argument_exception" || !strings.Contains(eb.Error.Reason, "["+bad+"]") || !strings.Contains(eb.Error.Reason, ">= [-1ms]") {
			t.Errorf("create with refresh_interval %s: HTTP %d %+v; want 400 naming it and the minimum -1ms", bad, st, eb.Error)
		}
	}
	for _, ok := range []string{"-1", "-1ms", "-1nanos", "0", "1s"} {
		if st := ts.do(t, "PUT", "/ok"+strings.ToLower(strings.Trim(ok, "-")), `{"settings":{"index.refresh_interval":"`+ok+`"}}`, nil); st != 200 {
			t.Errorf("create with refresh_interval %s: HTTP %d, want 200", ok, st)
		}
	}
}
