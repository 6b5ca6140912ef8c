package main

import (
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/recovery"
	"github.com/shardsplit/shardsplit/storage"
)

// TestReviewS22eVerifyFindsALostLoadedDocument: 'run' loads --docs
// documents (base-N), each acknowledged, before its writers start, and
// verify skipped every base-N id: a data directory that lost one of them
// verified "ok". A completed load is in the write log, and verify must
// find each of its documents, with its value.
func TestReviewS22eVerifyFindsALostLoadedDocument(t *testing.T) {
	dir := t.TempDir()
	data, acked := filepath.Join(dir, "data"), filepath.Join(dir, "acked.jsonl")
	if _, errOut, code := runCmd("run", "--data", data, "--acked", acked, "--docs", "50", "--writers", "2", "--duration", "200ms"); code != exitOK {
		t.Fatalf("run: exit %d: %s", code, errOut)
	}
	if out, errOut, code := runCmd("verify", "--data", data, "--acked", acked); code != exitOK {
		t.Fatalf("verify of the run as it ended: exit %d: %s%s", code, out, errOut)
	}
	n, _, _, err := recovery.Open(storage.Options{Dir: data, Durability: storage.DurabilityRequest}, nil, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := node.NewRouter(n, n.Table(), node.RouterConfig{}).Delete("base-7", ""); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runCmd("verify", "--data", data, "--acked", acked); code != exitFail {
		t.Fatalf("verify of an index that lost the loaded document base-7: exit %d, want %d: %s%s", code, exitFail, out, errOut)
	} else {
		t.Log(out)
	}
}
