package baseline

import (
	"errors"
	"testing"

	"github.com/shardsplit/shardsplit/routing"
)

// A split of a one-shard index may set the target's
// number_of_routing_shards; the target's settings are then validated as
// OpenSearch's IndexMetadata.Builder.build validates any index's, naming
// the target: a routing_partition_size (copied from the source) that is not
// below the target's routing shards, or routing shards that are no multiple
// of the target's shards, is refused by Prepare with OpenSearch's message,
// before anything is built; Cluster.Resize refuses it the same way.
func TestReviewBaselinePrepareValidatesTheTargetSettings(t *testing.T) {
	for _, tc := range []struct {
		name                        string
		partition, shards, explicit int
		want                        string
	}{
		{"partition size not below the target's routing shards", 100, 2, 64,
			"routing partition size [100] should be a positive number less than the number of shards [64] for [target]"},
		{"routing shards no multiple of the target's shards", 1, 2, 3,
			"the number of source shards [2] must be a factor of [3]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			s, err := routing.NewSettings("source", 1, 0, tc.partition)
			if err != nil {
				t.Fatal(err)
			}
			loadIndex(t, c, "source", s, 50)
			if err := c.SetWriteBlock("source", true); err != nil {
				t.Fatal(err)
			}
			src, _ := c.Index("source")
			req := ResizeRequest{Op: routing.Split, Source: "source", Target: "target", TargetShards: tc.shards,
				TargetRoutingShards: tc.explicit, Cleanup: CleanupRange}
			got, err := Prepare(req, &Source{Node: src.Node, WriteBlocked: true}, false)
			var re *routing.Error
			if !errors.As(err, &re) || re.Exception != routing.IllegalArgument || re.Message != tc.want {
				t.Errorf("Prepare = %+v, %v; want illegal_argument_exception %q", got, err, tc.want)
			}
			_, _, err = c.Resize(req)
			if !errors.As(err, &re) || re.Message != tc.want {
				t.Errorf("Cluster.Resize = %v; want %q", err, tc.want)
			}
		})
	}
}
