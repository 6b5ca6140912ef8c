package node_test

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// A table edit on a closed node (a driver still running after its node's
// Close) wrote the TABLE file into the data directory all the same, which
// by then may be another node's: the node reopened there has its table
// replaced under it, and its next open reads an edit it never made.
func TestApplyOnAClosedNodeWritesNothing(t *testing.T) {
	fs := vfs.NewMem()
	old, _ := openNode(t, fs, storage.LayoutPerShard)
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	eng, err := storage.Open(storage.Options{Dir: "/data", FS: fs, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	reopened, err := node.Open(node.Config{Engine: eng})
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	v := reopened.Table().Version()
	for _, edit := range []struct {
		name string
		do   func() error
	}{
		{"Apply", func() error {
			_, err := old.Apply(routing.Edit{Kind: routing.BeginSplit, Shard: 0, Ways: 2})
			return err
		}},
		{"Publish", func() error {
			p, err := old.Publish(routing.Edit{Kind: routing.BeginSplit, Shard: 0, Ways: 2})
			if err == nil {
				err = p.Stage()
			}
			return err
		}},
	} {
		if err := edit.do(); !errors.Is(err, node.ErrClosed) {
			t.Errorf("%s on the closed node = %v, want node.ErrClosed", edit.name, err)
		}
	}
	onDisk, err := node.LoadTable(eng)
	if err != nil {
		t.Fatal(err)
	}
	if onDisk.Version() != v {
		t.Errorf("the reopened node's table file is v%d, its table v%d: the closed node wrote it", onDisk.Version(), v)
	}
}
