package main

import (
	"io"
	"strings"
	"testing"
)

// TestReviewS22eFindingsRunsZero: --runs 0 was accepted and silently ran
// the default 5 repetitions (2 with --quick), though the error for
// --runs -1 says "must be at least 1": a run asked for no repetitions
// quoted medians of five. It must be a usage error naming the value.
func TestReviewS22eFindingsRunsZero(t *testing.T) {
	c, code, err := parseFindings([]string{"--runs", "0"}, io.Discard)
	if err == nil {
		t.Fatalf("--runs 0 accepted (runs %d: findings.Config then uses its default)", c.runs)
	}
	if code != exitUsage || !strings.Contains(err.Error(), "--runs 0") {
		t.Fatalf("--runs 0: exit %d, error %q; want a usage error naming --runs 0", code, err)
	}
	if c, _, err := parseFindings(nil, io.Discard); err != nil || c.runs != 0 {
		t.Fatalf("no --runs: runs %v, error %v; want the default (0 for findings.Config)", c, err)
	}
}
