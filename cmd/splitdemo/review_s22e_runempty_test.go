package main

import (
	"testing"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/recovery"
	"github.com/shardsplit/shardsplit/storage"
)

// TestReviewS22eRunLoadsIntoAnEmptyDataDir: run creates the index in
// --data and loads --docs documents into it, but it decided the index was
// new by --data not existing, so a directory made beforehand (--data
// $(mktemp -d)) got a new index and none of its documents.
func TestReviewS22eRunLoadsIntoAnEmptyDataDir(t *testing.T) {
	data := t.TempDir() // exists, empty
	if _, errOut, code := runCmd("run", "--data", data, "--docs", "20", "--writers", "1", "--duration", "100ms"); code != exitOK {
		t.Fatalf("run: exit %d: %s", code, errOut)
	}
	n, _, _, err := recovery.Open(storage.Options{Dir: data, Durability: storage.DurabilityRequest}, nil, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	r := node.NewRouter(n, n.Table(), node.RouterConfig{})
	for _, i := range []int{0, 19} {
		id, _ := baseDoc(i)
		if _, found, err := r.Get(id, ""); err != nil || !found {
			t.Errorf("%s of --docs 20 in a --data that existed empty: found %v, error %v", id, found, err)
		}
	}
}
