package sim

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The mutations (doc.go, "Mutations") are patches against the live code,
// and a patch that no longer applies shows nothing, silently. Every patch
// must apply to the working tree. It needs git and a checkout (CI runs on
// a clean clone); without them it skips and says why.
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
		cmd.Dir = string(root[:len(root)-1]) // without the newline
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s no longer applies (%v): %s", p, err, out)
		}
	}
	if !t.Failed() {
		t.Logf("%d mutation patches apply", len(patches))
	}
}

// Every mutation patch is in doc.go's table (what it breaks and the seed
// that first finds it), under its file name, and doc.go names no patch
// that is not there.
func TestMutationsAreDocumented(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	patches, err := filepath.Glob("mutations/*.patch")
	if err != nil || len(patches) == 0 {
		t.Fatalf("no mutation patches found (%v)", err)
	}
	have := map[string]bool{}
	for _, p := range patches {
		name := strings.TrimSuffix(filepath.Base(p), ".patch")
		have[name] = true
		if !regexp.MustCompile(`(?m)^//\s+` + regexp.QuoteMeta(name) + `\s`).Match(doc) {
			t.Errorf("mutations/%s.patch has no line in doc.go's table", name)
		}
	}
	for _, m := range regexp.MustCompile(`mutations/([a-z0-9-]+)\.patch`).FindAllSubmatch(doc, -1) {
		if !have[string(m[1])] {
			t.Errorf("doc.go names mutations/%s.patch, which does not exist", m[1])
		}
	}
}
