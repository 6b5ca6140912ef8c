package simkit

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// PatchesApply fails t for every patch matching glob (relative to the
// test's directory) that no longer applies to the working tree (git apply
// --check from the checkout's root), and if none matches: a mutation patch
// that no longer applies shows nothing, silently. It needs git and a
// checkout (CI runs on a clean clone); without them it skips t and says
// why.
func PatchesApply(t testing.TB, glob string) {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git on this machine")
	}
	root, err := exec.Command(git, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	patches, err := filepath.Glob(glob)
	if err != nil || len(patches) == 0 {
		t.Fatalf("no mutation patches found (%v)", err)
	}
	for _, p := range patches {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(git, "apply", "--check", abs)
		cmd.Dir = strings.TrimSuffix(string(root), "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s no longer applies (%v): %s", p, err, out)
		}
	}
	if !t.Failed() {
		t.Logf("%d mutation patches apply", len(patches))
	}
}
