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
	// (bad input changes nothing: TestRefusedOutputsLeaveNothing).
	if _, err := os.Stat(good); err == nil {
		t.Errorf("--out %s left behind by the refused runs", good)
	}
}

// An --out or --json refused before the run is bad input (exit 2), and bad
// input must not change the file system: prepareOutputs checks --json
// before it makes --out (and its missing parents), an --out whose mkdir
// fails halfway (a name too long for the file system under a new parent)
// leaves no parent behind, and a run that fails before writing anything
// (exit 1, compare even says "nothing written") leaves no empty --out
// behind.
func TestRefusedOutputsLeaveNothing(t *testing.T) {
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

// --json may name a file in the --out directory that the run is about to
// make, given absolutely or relatively; that is not bad input.
func TestJSONInsideOutIsAccepted(t *testing.T) {
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

// --json naming a symbolic link whose target is in a directory that does
// not exist is written through the link at the end of the run, where
// os.WriteFile fails: the check must see the file the link names, not the
// link's own directory, or the run's summary is lost.
func TestJSONThroughADanglingSymlinkIsRefused(t *testing.T) {
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
