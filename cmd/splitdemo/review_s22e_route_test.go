package main

import (
	"strings"
	"testing"
)

// TestReviewS22eRouteFlagAfterIDs: route's flags come before the ids ("--"
// ends them, so that ids may start with "-"). A flag given after an id
// was taken for two more ids: "route user-42 --shards 8" printed user-42
// on a 1-shard index, and lines for ids "--shards" and "8", exit 0. An id
// that looks like a flag, not after "--", must be a usage error naming it.
func TestReviewS22eRouteFlagAfterIDs(t *testing.T) {
	out, errOut, code := runCmd("route", "user-42", "--shards", "8")
	if code != exitUsage || out != "" || !strings.Contains(errOut, `"--shards"`) {
		t.Fatalf("route user-42 --shards 8: exit %d, stdout %q, stderr %q; want exit %d naming \"--shards\"", code, out, errOut, exitUsage)
	}
	for _, args := range [][]string{
		{"route", "--shards", "8", "--", "-leading-dash-id", "--also"},
		{"route", "--", "user-42"},
	} {
		if _, errOut, code := runCmd(args...); code != exitOK {
			t.Errorf("%v: exit %d: %s", args, code, errOut)
		}
	}
}
