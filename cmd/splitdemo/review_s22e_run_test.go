package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReviewS22eRunAfterATornLogLine: a run killed mid-line leaves its
// write log without a final newline (verify skips such a torn line), and a
// rerun appends to the same log. The rerun's first line was glued to the
// torn one, so verify skipped that attempt too and then refused the log
// ("acknowledges ..., which writer W never attempted"), exit 1 on an index
// that lost nothing. The rerun must start its lines on a line of their own.
func TestReviewS22eRunAfterATornLogLine(t *testing.T) {
	dir := t.TempDir()
	data, acked := filepath.Join(dir, "data"), filepath.Join(dir, "acked.jsonl")
	if err := os.WriteFile(acked, []byte(`{"w":0,"seq":0,"state":"att`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := runCmd("run", "--data", data, "--acked", acked, "--docs", "10", "--writers", "2", "--duration", "300ms"); code != exitOK {
		t.Fatalf("run: exit %d: %s", code, errOut)
	}
	if out, errOut, code := runCmd("verify", "--data", data, "--acked", acked); code != exitOK {
		t.Fatalf("verify after a rerun on a log with a torn last line: exit %d: %s%s", code, out, errOut)
	}
}
