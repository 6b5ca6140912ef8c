package node_test

import (
	"testing"

	"github.com/shardsplit/shardsplit/node"
)

// Open without an engine is bad input: an error saying so, not a nil
// pointer dereference.
func TestReviewNodeOpenWithoutEngine(t *testing.T) {
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("node.Open(Config{}) panicked: %v", r)
		}
	}()
	if n, err := node.Open(node.Config{}); err == nil {
		t.Fatalf("node.Open(Config{}) = %v, nil; want an error", n)
	}
}
