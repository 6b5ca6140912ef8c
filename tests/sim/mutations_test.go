package sim

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/shardsplit/shardsplit/tests/simkit"
)

// The mutations (doc.go, "Mutations") are patches against the live code,
// and a patch that no longer applies shows nothing, silently. Every patch
// must apply to the working tree (simkit.PatchesApply).
func TestMutationsApply(t *testing.T) { simkit.PatchesApply(t, "mutations/*.patch") }

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
