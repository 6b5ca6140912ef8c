package node_test

import (
	"testing"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// CheckPlacement's keyspace check: a document on the shard the table names,
// under the right routing key but in another root's keyspace (opensearch
// mode: every root spans the whole key space), is mis-keyed. No test fed it
// one: dropping the keyspace comparison passed every test of node,
// recovery and baseline (review s21). A node's own scan cannot produce it
// (a shard scans its own keyspace), but CheckPlacement takes any scan.
func TestReviewS21CheckPlacementReportsADocumentInAnotherKeyspace(t *testing.T) {
	tab, err := routing.NewTable(routing.ModeOpenSearch, routing.Settings{Shards: 2, RoutingShards: 2, PartitionSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	id := "doc-1"
	p, shard := tab.Route(id, "")
	other := tab.Keyspace(1 - p.Root)
	rep, err := node.CheckPlacement(tab, func(fn func(routing.ShardID, storage.Doc) error) error {
		return fn(shard, storage.Doc{Root: other, Key: tab.KeyOf(p), ID: id, Source: []byte("v")})
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.Misplaced != 1 || rep.Violations[0].Kind != node.MisKeyed || rep.Violations[0].Keyspace != other {
		t.Fatalf("a document in keyspace %d on shard %d (root %d): %+v; want it mis-keyed", other, shard, p.Root, rep)
	}
	t.Log(rep.Err())
}
