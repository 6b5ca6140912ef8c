package baseline

import (
	"testing"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// pausedBackend holds a write between the client's alias resolution and
// its arrival at the node: a request in flight (a network delay).
type pausedBackend struct {
	n               *node.Node
	arrived, resume chan struct{}
}

func (b *pausedBackend) Write(r node.WriteRequest) (uint64, error) {
	close(b.arrived)
	<-b.resume
	return b.n.Write(r)
}

func (b *pausedBackend) Get(r node.GetRequest) (storage.Doc, bool, error) { return b.n.Get(r) }

// A write that resolved the alias to the source before the procedure's
// alias swap and reaches the source after it must not be acknowledged by
// the source: the alias now names the target, which would never hold it
// (an acknowledged write lost through the alias). It must be refused by
// the source's block and retried through the alias, landing in the target.
func TestReviewBaselineWriteInFlightAcrossTheAliasSwap(t *testing.T) {
	c := newCluster(t)
	s, _ := routing.NewSettings("source", 2, 0, 1)
	model := loadIndex(t, c, "source", s, 200)
	src, _ := c.Index("source")
	w := c.NewAliasWriter("alias")
	b := &pausedBackend{n: src.Node, arrived: make(chan struct{}), resume: make(chan struct{})}
	w.routers.Store(src, node.NewRouter(b, src.Node.Table(), node.RouterConfig{}))
	written := make(chan error, 1)
	go func() {
		_, err := w.Write("late", "", []byte("v-late"), false)
		written <- err
	}()
	<-b.arrived // resolved to the source, not yet at its node
	if _, err := c.Procedure("alias", ResizeRequest{Op: routing.Split, Source: "source", Target: "target",
		TargetShards: 4, Cleanup: CleanupRange}, false); err != nil {
		t.Fatal(err)
	}
	close(b.resume)
	if err := <-written; err != nil {
		t.Fatalf("write in flight across the swap: %v", err)
	}
	model["late"] = ""
	d, found, err := node_get(c, "alias", "late", "")
	if err != nil || !found || string(d.Source) != "v-late" {
		t.Errorf("the acknowledged write is not readable through the alias after the swap: found %v, %v, %q", found, err, d.Source)
	}
	checkIndex(t, c, "target", model)
}
