package node

import (
	"sort"

	"github.com/shardsplit/shardsplit/routing"
)

// leafSpan is the span of the leaf of root holding key in t: the span of
// the shard a read of key resolved to under t.
func leafSpan(t *routing.Table, root routing.ShardID, key routing.Key) routing.Span {
	leaves := t.Leaves(root)
	i := sort.Search(len(leaves), func(i int) bool { return leaves[i].Span.End > uint64(key) })
	return leaves[i].Span
}
