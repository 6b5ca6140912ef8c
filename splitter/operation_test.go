package splitter

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// fenceFailureNode is a node of two roots on a filesystem whose WAL syncs
// of shard 1 fail once failSync is set: a write to shard 1 then fails the
// node (an acknowledged-looking value that a power loss could take back),
// whatever operation is running on shard 0's leaves.
type fenceFailureNode struct {
	n        *node.Node
	r        *node.Router
	failSync atomic.Bool
}

func openFenceFailureNode(t *testing.T) *fenceFailureNode {
	t.Helper()
	f := &fenceFailureNode{}
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		sync := op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo
		if f.failSync.Load() && sync && strings.Contains(op.Path, "shard-1/") && strings.HasSuffix(op.Path, ".log") {
			return fmt.Errorf("injected: %w", syscall.EIO)
		}
		return nil
	})
	f.n = openNode(t, storage.Options{FS: errorfs.Wrap(vfs.NewMem(), inj)}, newTable(t, routing.ModePartition, 2, 16), 40)
	f.r = node.NewRouter(f.n, f.n.Table(), node.RouterConfig{})
	return f
}

// idOn returns a document id the current table routes to shard id.
func (f *fenceFailureNode) idOn(t *testing.T, id routing.ShardID) string {
	t.Helper()
	for i := range 1000 {
		doc := fmt.Sprintf("probe%d", i)
		if _, s := f.n.Table().Route(doc, ""); s == id {
			return doc
		}
	}
	t.Fatalf("no id routes to shard %d", id)
	return ""
}

// failNode fails the node the way a write does whose WAL sync fails.
func (f *fenceFailureNode) failNode(t *testing.T) {
	t.Helper()
	f.failSync.Store(true)
	if _, err := f.r.Index(f.idOn(t, 1), "", []byte("lost")); !errors.Is(err, node.ErrFailed) {
		t.Fatalf("the write whose sync fails = %v, want node.ErrFailed", err)
	}
}

// An operation whose node fails while it holds the fence (another shard's
// write could not be made durable, between the fence and the publish)
// stops with node.ErrFailed, as the service's task loop and Run do on any
// error from Next. It must not stop holding the apply lock: a writer
// already past the node's failure check waits on it, and nothing would
// ever release it (the caller stops stepping; Fenced's contract).
func TestNodeFailureWhileFencedReleasesTheFence(t *testing.T) {
	cases := []struct {
		name  string
		start func(f *fenceFailureNode, d *Driver) (*Operation, []routing.ShardID)
	}{
		{"split", func(f *fenceFailureNode, d *Driver) (*Operation, []routing.ShardID) {
			return d.Start(SplitPlan(0, 2)), []routing.ShardID{0}
		}},
		{"merge", func(f *fenceFailureNode, d *Driver) (*Operation, []routing.ShardID) {
			if _, err := NewDriver(f.n, Config{}).Run(SplitPlan(0, 2)); err != nil {
				t.Fatal(err)
			}
			leaves := f.n.Table().Leaves(0)
			srcs := []routing.ShardID{leaves[0].Shard, leaves[1].Shard}
			return d.Start(MergePlan(srcs...)), srcs
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := openFenceFailureNode(t)
			var fired atomic.Bool
			writer := make(chan error, 1)
			var held []routing.ShardID
			hook := func(_ Phase, in Intent) {
				if in.Kind != IntentPublish || !fired.CompareAndSwap(false, true) {
					return
				}
				// A writer to a fenced shard, past the node's failure
				// check: it waits on the apply lock.
				doc := f.idOn(t, held[0])
				go func() {
					_, err := f.r.Index(doc, "", []byte("w"))
					writer <- err
				}()
				time.Sleep(20 * time.Millisecond)
				f.failNode(t)
			}
			var o *Operation
			o, held = c.start(f, NewDriver(f.n, Config{Hook: hook}))
			var err error
			for !o.Done() {
				if _, _, err = o.Next(); err != nil {
					break
				}
			}
			if !fired.Load() {
				t.Fatal("the operation never reached its publish")
			}
			if !errors.Is(err, node.ErrFailed) {
				t.Fatalf("Next = %v, want node.ErrFailed", err)
			}
			if o.Fenced() {
				t.Errorf("the %s still reports its fence held after Next returned %v", c.name, err)
			}
			for _, id := range held {
				if shardFenced(t, f.n, id) {
					t.Errorf("shard %d's apply lock is still held after the %s stopped with %v", id, c.name, err)
				}
			}
			select {
			case err := <-writer:
				// A failed node acknowledges nothing more: the write may
				// not land in the parent once the fence is gone (the
				// failure may have left the new table on disk).
				if !errors.Is(err, node.ErrFailed) {
					t.Errorf("the write that waited on the fence of a failed node = %v, want node.ErrFailed", err)
				}
			case <-time.After(2 * time.Second):
				t.Errorf("a write to shard %d waited 2 s on the fence of a %s that stopped", held[0], c.name)
			}
		})
	}
}
