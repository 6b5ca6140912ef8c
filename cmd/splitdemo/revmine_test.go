package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRevmineRefusedOutputsLeaveNothing: an --out or --json refused before
// the run is bad input (exit 2), and bad input must not change the file
// system. prepareOutputs made --out (and its missing parents) first and
// checked --json after, so a refused --json left --out's directories
// behind; an --out whose mkdir fails halfway (a name too long for the file
// system under a new parent) left the parent; and a run that failed
// before writing anything (exit 1, compare even says "nothing written")
// left the empty --out it had made up front, which before 6dd80c4 it
// never made.
func TestRevmineRefusedOutputsLeaveNothing(t *testing.T) {
	dir := t.TempDir()
	missingJSON := filepath.Join(dir, "missing", "s.json")
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		args  []string
		code  int
		fresh string // must not exist afterwards
	}{
		{"compare --json", []string{"compare", "--docs", "500", "--writers", "2", "--rate", "100", "--steady", "100ms", "--after", "100ms",
			"--data", filepath.Join(dir, "d1"), "--out", filepath.Join(dir, "c", "out"), "--json", missingJSON}, exitUsage, filepath.Join(dir, "c")},
		{"autosplit --json", []string{"autosplit", "--duration", "1s", "--rate", "100", "--writers", "2",
			"--data", filepath.Join(dir, "d2"), "--out", filepath.Join(dir, "a", "out"), "--json", missingJSON}, exitUsage, filepath.Join(dir, "a")},
		{"autosplit --out too long", []string{"autosplit", "--duration", "1s", "--rate", "100", "--writers", "2",
			"--data", filepath.Join(dir, "d3"), "--out", filepath.Join(dir, "l", strings.Repeat("x", 300))}, exitUsage, filepath.Join(dir, "l")},
		{"autosplit run fails", []string{"autosplit", "--duration", "1s", "--rate", "100", "--writers", "2",
			"--data", filepath.Join(file, "data"), "--out", filepath.Join(dir, "f", "out")}, exitFail, filepath.Join(dir, "f")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, errOut, code := runCmd(tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout, errOut)
			}
			if _, err := os.Stat(tc.fresh); err == nil {
				t.Errorf("exit %d, but left %s behind (stderr %q)", code, tc.fresh, errOut)
			}
		})
	}
}

// TestRevmineJSONInsideOut: --json may name a file in the --out directory
// that the run is about to make, given absolutely or relatively; that is
// not bad input.
func TestRevmineJSONInsideOut(t *testing.T) {
	out := filepath.Join(t.TempDir(), "new", "out")
	if _, err := prepareOutputs(out, filepath.Join(out, "s.json")); err != nil {
		t.Fatalf("--json inside a new --out: %v", err)
	}
	rel := filepath.Join(t.TempDir(), "rel")
	if err := os.MkdirAll(rel, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(rel)
	if _, err := prepareOutputs("./o/", "o/s.json"); err != nil {
		t.Fatalf("--out ./o/ --json o/s.json: %v", err)
	}
}

// TestRevmineJSONDanglingSymlink: --json naming a symbolic link whose
// target is in a directory that does not exist is written through the
// link at the end of the run, where os.WriteFile fails: the check must see
// the file the link names, not the link's own directory, or the run is
// lost as it was before 6dd80c4.
func TestRevmineJSONDanglingSymlink(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "s.json")
	if err := os.Symlink(filepath.Join("missing", "s.json"), link); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	_, err := prepareOutputs(out, link)
	if err == nil || !strings.Contains(err.Error(), `--json "`+link+`"`) {
		t.Fatalf("--json %s -> missing/s.json: %v, want an error naming --json", link, err)
	}
	if _, serr := os.Stat(out); serr == nil {
		t.Errorf("refused, but left %s behind", out)
	}
	// Proof that the run would have lost its summary: the write fails.
	if werr := os.WriteFile(link, []byte("{}\n"), 0o644); werr == nil {
		t.Fatalf("writing through the dangling link succeeded; the case proves nothing")
	}
	// A link to a file in an existing directory is fine.
	good := filepath.Join(dir, "good.json")
	if err := os.Symlink("target.json", good); err != nil {
		t.Fatal(err)
	}
	if _, err := prepareOutputs(out, good); err != nil {
		t.Fatalf("--json %s -> target.json (in %s): %v", good, dir, err)
	}
}
