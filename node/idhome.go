package node

import (
	"sort"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// home is where a document of id indexed without routing lives, for a
// request routed by routingValue to root: the key the _id alone routes to,
// when that is in root's keyspace (in opensearch mode another root is
// another keyspace, so another shard). A shard keeps one document per _id
// (storage's `_id` index); a routed write or get must find such a document
// too, and it has no `_id` entry.
func home(t *routing.Table, root routing.ShardID, id, routingValue string) storage.Home {
	if routingValue == "" {
		return storage.Home{}
	}
	p, _ := t.Route(id, "")
	if t.Keyspace(p.Root) != t.Keyspace(root) {
		return storage.Home{}
	}
	return storage.Home{Key: t.KeyOf(p), Set: true}
}

// leafSpan is the span of the leaf of root holding key in t: the span of
// the shard a read of key resolved to under t.
func leafSpan(t *routing.Table, root routing.ShardID, key routing.Key) routing.Span {
	leaves := t.Leaves(root)
	i := sort.Search(len(leaves), func(i int) bool { return leaves[i].Span.End > uint64(key) })
	return leaves[i].Span
}
