package baseline

import (
	"errors"
	"fmt"
	"testing"

	"github.com/shardsplit/shardsplit/routing"
)

// Cluster.Resize must refuse what Prepare refuses: a source whose shards
// were split in place has no original shard to link for the split-off
// keys (the parent's store, if not yet retired, lacks every write made to
// the children after the handoff). The refusal is Prepare's
// illegal_argument_exception.
func TestReviewBaselineResizeRefusesInPlaceSplitSource(t *testing.T) {
	c := newCluster(t)
	s, _ := routing.NewSettings("source", 2, 0, 1)
	model := loadIndex(t, c, "source", s, 300)
	ix, _ := c.Index("source")
	n := ix.Node
	reserved, err := n.Apply(routing.Edit{Kind: routing.BeginSplit, Shard: 0, Ways: 2})
	if err != nil {
		t.Fatal(err)
	}
	parent, err := n.Store(0)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := reserved.Split(0)
	var ids []routing.ShardID
	for _, ch := range rec.Children {
		child, _, err := n.Engine().CreateChild(parent, ch.Shard, ch.Span)
		if err != nil {
			t.Fatal(err)
		}
		n.AddShard(child)
		ids = append(ids, ch.Shard)
	}
	if _, err := n.Apply(routing.Edit{Kind: routing.CommitSplit, Shard: 0, Children: ids}); err != nil {
		t.Fatal(err)
	}
	// Writes after the in-place split land on the children.
	w := c.NewAliasWriter("alias")
	for i := range 100 {
		id := fmt.Sprintf("after-%d", i)
		if _, err := w.Write(id, "", []byte("v-"+id), false); err != nil {
			t.Fatal(err)
		}
		model[id] = ""
	}
	if err := c.SetWriteBlock("source", true); err != nil {
		t.Fatal(err)
	}
	req := ResizeRequest{Op: routing.Split, Source: "source", Target: "target", TargetShards: 4, Cleanup: CleanupPerDoc}
	_, prepErr := Prepare(req, &Source{Node: n, WriteBlocked: true}, false)
	_, _, err = c.Resize(req)
	var re *routing.Error
	if !errors.As(err, &re) || re.Exception != routing.IllegalArgument || prepErr == nil || err.Error() != prepErr.Error() {
		t.Errorf("Cluster.Resize of a source split in place = %v; want Prepare's refusal %v", err, prepErr)
	}
	if err == nil {
		if err := c.PutAlias("alias", "target"); err != nil {
			t.Fatal(err)
		}
		checkIndex(t, c, "target", model)
	}
}
