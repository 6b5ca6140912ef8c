package baseline

import (
	"testing"

	"github.com/shardsplit/shardsplit/routing"
)

// A split of a one-shard index may change number_of_routing_shards
// (OpenSearch derives the target's from the target's shard count, or takes
// an explicit one): every document must still be on the shard the target's
// formula names, once, and readable by its id and routing. Also with
// routing_partition_size > 1 and custom routing.
func TestReviewBaselineSplitOfOneShardIndex(t *testing.T) {
	tests := []struct {
		name                   string
		partition              int
		targetShards, explicit int
		cleanup                Cleanup
	}{
		{"1->3 default routing shards, range", 1, 3, 0, CleanupRange},
		{"1->3 default routing shards, per-doc", 1, 3, 0, CleanupPerDoc},
		{"1->2 explicit 64 routing shards", 1, 2, 64, CleanupRange},
		{"1->4 default, partition 1", 1, 4, 0, CleanupRange},
		{"1->3 default, partition 4, per-doc", 4, 3, 0, CleanupPerDoc},
		{"1->3 default, partition 4, range", 4, 3, 0, CleanupRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			s, err := routing.NewSettings("source", 1, 0, tt.partition)
			if err != nil {
				t.Fatal(err)
			}
			model := loadIndex(t, c, "source", s, 600)
			_, err = c.Procedure("alias", ResizeRequest{Op: routing.Split, Source: "source", Target: "target",
				TargetShards: tt.targetShards, TargetRoutingShards: tt.explicit, Cleanup: tt.cleanup}, false)
			if err != nil {
				t.Fatalf("procedure: %v", err)
			}
			ix, _ := c.Index("target")
			t.Logf("source routing shards %d, target %+v", s.RoutingShards, ix.Settings())
			checkIndex(t, c, "target", model)
		})
	}
}

// Splitting and shrinking an index with routing_partition_size > 1 keeps
// every document reachable by (id, routing).
func TestReviewBaselinePartitionedIndexResize(t *testing.T) {
	for _, tt := range []struct {
		name    string
		op      routing.ResizeOp
		shards  int
		target  int
		cleanup Cleanup
	}{
		{"split 2->4 per-doc", routing.Split, 2, 4, CleanupPerDoc},
		{"split 2->4 range", routing.Split, 2, 4, CleanupRange},
		{"shrink 4->2", routing.Shrink, 4, 2, CleanupRange},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			s, err := routing.NewSettings("source", tt.shards, 0, 2)
			if err != nil {
				t.Fatal(err)
			}
			model := loadIndex(t, c, "source", s, 600)
			_, err = c.Procedure("alias", ResizeRequest{Op: tt.op, Source: "source", Target: "target",
				TargetShards: tt.target, Cleanup: tt.cleanup, TargetPartitionSize: 0}, false)
			if err != nil {
				t.Fatalf("procedure: %v", err)
			}
			checkIndex(t, c, "target", model)
		})
	}
}

// A clone of a one-shard index created with explicit routing shards gets
// the default routing shards of one shard (TargetRoutingShards): its keys
// change too.
func TestReviewBaselineCloneOfOneShardIndexWithExplicitRoutingShards(t *testing.T) {
	c := newCluster(t)
	s, err := routing.NewSettings("source", 1, 64, 1)
	if err != nil {
		t.Fatal(err)
	}
	model := loadIndex(t, c, "source", s, 400)
	if _, err := c.Procedure("alias", ResizeRequest{Op: routing.Clone, Source: "source", Target: "target", Cleanup: CleanupRange}, false); err != nil {
		t.Fatalf("procedure: %v", err)
	}
	ix, _ := c.Index("target")
	t.Logf("source %+v, target %+v", s, ix.Settings())
	checkIndex(t, c, "target", model)
}
