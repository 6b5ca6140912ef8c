package server_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/service"
)

// TestReviewRESTTimeValues: a timeout parameter is parsed as OpenSearch's
// TimeValue.parseTimeValue: whole numbers with a unit (case-insensitive
// except m), "0" and "-1" without one; every refusal an
// illegal_argument_exception with its message. Before, "abc" was a
// parse_exception, "-5s" got the unit message, "1.5s" was accepted, "0"
// refused, and a value beyond a Java long overflowed to a negative
// duration: wait_for_status answered 408 at once instead of refusing.
func TestReviewRESTTimeValues(t *testing.T) {
	ts := startServer(t, service.Config{})
	// One replica that cannot be assigned: yellow, so waiting for green
	// lasts until the timeout.
	if st := ts.do(t, "PUT", "/y", `{"settings":{"number_of_replicas":1}}`, nil); st != 200 {
		t.Fatal(st)
	}
	for _, tc := range []struct{ value, reason string }{
		{"abc", "failed to parse setting [timeout] with value [abc] as a time value: unit is missing or unrecognized"},
		{"-5s", "failed to parse setting [timeout] with value [-5s] as a time value: negative durations are not supported"},
		{"1.5s", "failed to parse [1.5s], fractional time values are not supported"},
		// Not a Java long, but a double: Java's message says fractional.
		{"99999999999999999999s", "failed to parse [99999999999999999999s], fractional time values are not supported"},
		{"abcs", "failed to parse [abcs]"},
		{"5x", "failed to parse setting [timeout] with value [5x] as a time value: unit is missing or unrecognized"},
	} {
		var body string
		st := ts.do(t, "GET", "/_cluster/health?wait_for_status=green&timeout="+tc.value, "", &body)
		var eb errBody
		_ = json.Unmarshal([]byte(body), &eb)
		if st != 400 || eb.Error.Type != "illegal_argument_exception" || eb.Error.Reason != tc.reason {
			t.Errorf("timeout=%s: HTTP %d %s; want 400 illegal_argument_exception %q", tc.value, st, body, tc.reason)
		}
	}
	for _, tc := range []struct {
		value    string
		min, max time.Duration
	}{
		{"0", 0, 2 * time.Second},
		{"200MS", 150 * time.Millisecond, 5 * time.Second},
		{"1s", 900 * time.Millisecond, 6 * time.Second},
	} {
		var body struct {
			TimedOut bool `json:"timed_out"`
		}
		start := time.Now()
		st := ts.do(t, "GET", "/_cluster/health?wait_for_status=green&timeout="+tc.value, "", &body)
		took := time.Since(start)
		if st != 408 || !body.TimedOut || took < tc.min || took > tc.max {
			t.Errorf("timeout=%s: HTTP %d timed_out %v after %v; want 408 after %v to %v", tc.value, st, body.TimedOut, took, tc.min, tc.max)
		}
	}
}
