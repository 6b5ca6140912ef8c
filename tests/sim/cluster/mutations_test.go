package clustersim

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// The mutations (doc.go, "Mutations") are patches against the live code;
// a patch that no longer applies shows nothing, so every patch must apply
// to the working tree. It needs git and a checkout; without them it skips
// and says why.
func TestMutationsApply(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git on this machine")
	}
	root, err := exec.Command(git, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	patches, err := filepath.Glob("mutations/*.patch")
	if err != nil || len(patches) == 0 {
		t.Fatalf("no mutation patches found (%v)", err)
	}
	for _, p := range patches {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(git, "apply", "--check", abs)
		cmd.Dir = string(root[:len(root)-1])
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s no longer applies (%v): %s", p, err, out)
		}
	}
	if !t.Failed() {
		t.Logf("%d mutation patches apply", len(patches))
	}
}
