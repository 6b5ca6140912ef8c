package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReviewS22eRunStopsWhenAWriterFails: a writer that failed (its write
// or its write log line) returned its error, but nothing stopped the run:
// it idled, writers dead, until --duration or a kill, and only then
// reported the error (a kill -9 never did). Here every log write fails
// (/dev/full), so the run must end at once with the error.
func TestReviewS22eRunStopsWhenAWriterFails(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	data := filepath.Join(t.TempDir(), "data")
	if _, errOut, code := runCmd("run", "--data", data, "--docs", "10", "--writers", "1", "--duration", "100ms"); code != exitOK {
		t.Fatalf("run: exit %d: %s", code, errOut)
	}
	began := time.Now() // a rerun: no load, the writers' own lines fail
	_, errOut, code := runCmd("run", "--data", data, "--acked", "/dev/full", "--docs", "10", "--writers", "2", "--duration", "20s")
	took := time.Since(began)
	if code != exitFail || !strings.Contains(errOut, "no space left on device") {
		t.Fatalf("run with an unwritable write log: exit %d, stderr %q; want exit %d with the error", code, errOut, exitFail)
	}
	if took > 5*time.Second {
		t.Fatalf("run went on %v after every writer had failed (--duration 20s); stderr %q", took.Round(time.Millisecond), errOut)
	}
}
