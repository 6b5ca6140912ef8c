package routing

import (
	"fmt"
	"testing"
)

// benchID is a 20-byte document id.
const benchID = "doc-0123456789abcdef"

// tableAtDepth returns a table in which the leaf owning benchID has been
// split depth times (each time in two), and nothing else. Partition mode
// uses 8 shards with R = 8192 (factor 1024), so ten binary levels fit.
func tableAtDepth(tb testing.TB, mode Mode, depth int) *Table {
	tab, err := NewTable(mode, Settings{Shards: 8, RoutingShards: 8192, PartitionSize: 1})
	if err != nil {
		tb.Fatal(err)
	}
	for range depth {
		_, owner := tab.Route(benchID, "")
		next, err := Apply(tab, Edit{Kind: BeginSplit, Shard: owner, Ways: 2})
		if err != nil {
			tb.Fatalf("split %d: %v", owner, err)
		}
		sp, _ := next.Split(owner)
		if tab, err = Apply(next, Edit{Kind: CommitSplit, Shard: owner, Children: childIDs(sp)}); err != nil {
			tb.Fatal(err)
		}
	}
	if p, _ := tab.Route(benchID, ""); len(tab.Leaves(p.Root)) != depth+1 {
		tb.Fatalf("depth %d: root has %d leaves", depth, len(tab.Leaves(p.Root)))
	}
	return tab
}

// BenchmarkRoute routes one 20-byte id (hash, placement, leaf search) at
// split depth 0, 1, 2, 5 and 10 in both modes. Goal: <= 60 ns/op, 0
// allocs/op, flat in depth.
func BenchmarkRoute(b *testing.B) {
	for _, mode := range []Mode{ModePartition, ModeOpenSearch} {
		for _, depth := range []int{0, 1, 2, 5, 10} {
			b.Run(fmt.Sprintf("mode=%s/depth=%d", mode, depth), func(b *testing.B) {
				tab := tableAtDepth(b, mode, depth)
				b.ReportAllocs()
				var sink ShardID
				for b.Loop() {
					_, sink = tab.Route(benchID, "")
				}
				_ = sink
			})
		}
	}
}

func BenchmarkHash(b *testing.B) {
	for _, n := range []int{10, 20, 64, 512} {
		id := string(make([]byte, n))
		b.Run(fmt.Sprintf("bytes=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Hash(id)
			}
		})
	}
}

func TestRouteNoAllocs(t *testing.T) {
	for _, mode := range []Mode{ModePartition, ModeOpenSearch} {
		tab := tableAtDepth(t, mode, 10)
		if n := testing.AllocsPerRun(100, func() { tab.Route(benchID, "") }); n != 0 {
			t.Errorf("%s: Route at depth 10 allocates %.0f times, want 0", mode, n)
		}
	}
}
