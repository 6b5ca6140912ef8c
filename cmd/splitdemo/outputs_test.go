package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnwritableOutputsFailBeforeTheRun: compare and autosplit write their
// outputs at the end of a run of a minute or more, so an --out or --json
// they cannot write must be refused before anything is measured, as bad
// input (exit 2), with a message naming the flag and its value. Before
// prepareOutputs both ran to the end and then failed with exit 1.
func TestUnwritableOutputsFailBeforeTheRun(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	underFile := filepath.Join(file, "out")          // mkdir fails: a file is in the way
	noDir := filepath.Join(dir, "missing", "s.json") // --json in a directory that does not exist
	good := filepath.Join(dir, "good")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"compare --out", []string{"compare", "--docs", "500", "--writers", "2", "--rate", "100",
			"--steady", "100ms", "--after", "100ms", "--data", filepath.Join(dir, "d1"), "--out", underFile}, `--out "` + underFile + `"`},
		{"compare --json", []string{"compare", "--docs", "500", "--writers", "2", "--rate", "100",
			"--steady", "100ms", "--after", "100ms", "--data", filepath.Join(dir, "d2"), "--out", good, "--json", noDir}, `--json "` + noDir + `"`},
		{"compare --json dir", []string{"compare", "--docs", "500", "--writers", "2", "--rate", "100",
			"--steady", "100ms", "--after", "100ms", "--data", filepath.Join(dir, "d3"), "--out", good, "--json", dir}, "is a directory"},
		{"autosplit --out", []string{"autosplit", "--duration", "1s", "--rate", "100", "--writers", "2",
			"--data", filepath.Join(dir, "d4"), "--out", underFile}, `--out "` + underFile + `"`},
		{"autosplit --json", []string{"autosplit", "--duration", "1s", "--rate", "100", "--writers", "2",
			"--data", filepath.Join(dir, "d5"), "--out", good, "--json", noDir}, `--json "` + noDir + `"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runCmd(tc.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d (bad input)\nstdout: %s\nstderr: %s", code, exitUsage, stdout, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr does not name %s:\n%s", tc.want, stderr)
			}
			if stdout != "" || strings.Count(stderr, "\n") > 1 {
				t.Errorf("the run started before its outputs were checked:\nstdout: %s\nstderr: %s", stdout, stderr)
			}
		})
	}
	// The good --out was made for the checks and removed again with them
	// (bad input changes nothing: TestRevmineRefusedOutputsLeaveNothing).
	if _, err := os.Stat(good); err == nil {
		t.Errorf("--out %s left behind by the refused runs", good)
	}
}
