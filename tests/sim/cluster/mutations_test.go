package clustersim

import (
	"testing"

	"github.com/shardsplit/shardsplit/tests/simkit"
)

// The mutations (doc.go, "Mutations") are patches against the live code;
// a patch that no longer applies shows nothing, so every patch must apply
// to the working tree (simkit.PatchesApply).
func TestMutationsApply(t *testing.T) { simkit.PatchesApply(t, "mutations/*.patch") }
