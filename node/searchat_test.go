package node_test

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// SearchAt returns a page of at most perShard documents from every shard
// (0: all of them) and the table it searched.
func TestSearchAtPagesEveryShard(t *testing.T) {
	n, _ := openNode(t, vfs.NewMem(), storage.LayoutPerShard)
	defer n.Close()
	r := node.NewRouter(n, n.Table(), node.RouterConfig{})
	for i := range 100 {
		if _, err := r.Index(fmt.Sprintf("d%d", i), "", []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		perShard int
		want     map[routing.ShardID]int
	}{
		{perShard: 10, want: map[routing.ShardID]int{0: 10, 1: 10}},
		{perShard: 1000, want: nil}, // every document: compared with the full scan below
		{perShard: 0, want: nil},
	} {
		t.Run(fmt.Sprint(tc.perShard), func(t *testing.T) {
			got := map[routing.ShardID]int{}
			tab, err := n.SearchAt(tc.perShard, func(s routing.ShardID, _ storage.Doc) error { got[s]++; return nil })
			if err != nil {
				t.Fatal(err)
			}
			if tab != n.Table() {
				t.Errorf("searched v%d, node serves v%d", tab.Version(), n.Table().Version())
			}
			want := tc.want
			if want == nil {
				want = map[routing.ShardID]int{}
				if _, err := n.Search(func(s routing.ShardID, _ storage.Doc) error { want[s]++; return nil }); err != nil {
					t.Fatal(err)
				}
				if want[0]+want[1] != 100 {
					t.Fatalf("full search found %v", want)
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("hits per shard (-want +got):\n%s", diff)
			}
		})
	}
}
