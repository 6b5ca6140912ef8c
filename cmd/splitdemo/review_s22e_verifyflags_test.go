package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestReviewS22eVerifyMissingAckedIsBadInput: verify's usage promises exit
// 2 on bad input, and a --data that does not exist is refused so; an
// --acked that does not exist was found only after the data directory had
// been recovered (changed) and exited 1, "something does not hold", as if
// the index had failed its check.
func TestReviewS22eVerifyMissingAckedIsBadInput(t *testing.T) {
	dir := t.TempDir()
	data, acked := filepath.Join(dir, "data"), filepath.Join(dir, "acked.jsonl")
	if _, errOut, code := runCmd("run", "--data", data, "--docs", "10", "--writers", "1", "--duration", "100ms"); code != exitOK {
		t.Fatalf("run: exit %d: %s", code, errOut)
	}
	missing := acked + ".typo"
	out, errOut, code := runCmd("verify", "--data", data, "--acked", missing)
	if code != exitUsage || !strings.Contains(errOut, missing) {
		t.Fatalf("verify --acked %s (no such file): exit %d, stdout %q, stderr %q; want exit %d naming it", missing, code, out, errOut, exitUsage)
	}
}
