package main

import (
	"strings"
	"testing"
)

// TestReviewS22eServeBadPortIsBadInput: serve checked --addr's shape
// (HOST:PORT) but not its port, so "--addr 127.0.0.1:99999" got as far as
// opening the data directory and listening, and exited 1 ("the command
// ran and found a problem") instead of 2 naming the value.
func TestReviewS22eServeBadPortIsBadInput(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:99999", "127.0.0.1:-1", "127.0.0.1:http-alt-nonexistent"} {
		out, errOut, code := runCmd("serve", "--addr", addr, "--data", t.TempDir())
		if code != exitUsage || !strings.Contains(errOut, `"`+addr+`"`) {
			t.Errorf("serve --addr %s: exit %d, stdout %q, stderr %q; want exit %d naming it", addr, code, out, errOut, exitUsage)
		}
	}
}
