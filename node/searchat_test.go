package node_test

import (
	"errors"
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

// A search while a published table is not yet durable must not return a
// write only that table admits, for the reason a Get must not: it is not
// acknowledged, and a failed commit rolls it back. Each leaf of the
// published table is read from its owners in the durable table (the
// parent), and its hits are still reported as the published leaf's, the
// table SearchAt returns.
func TestSearchDuringAPendingTableIsNotADirtyRead(t *testing.T) {
	n, _ := openNode(t, vfs.NewMem(), storage.LayoutPerShard)
	defer n.Close()
	// Acknowledged documents written before the split: the search must
	// find each once, on the shard the published table names.
	pre := node.NewRouter(n, n.Table(), node.RouterConfig{})
	for i := range 40 {
		if _, err := pre.Index(fmt.Sprintf("pre-%d", i), "", []byte("acked")); err != nil {
			t.Fatal(err)
		}
	}
	_, p := publishSplit(t, n)
	tab := p.Table()
	id, acked := writeToAChild(t, n, node.NewRouter(n, tab, node.RouterConfig{}), tab, "dirty")
	got := map[string][]routing.ShardID{}
	searched, err := n.SearchAt(0, func(s routing.ShardID, d storage.Doc) error {
		got[d.ID] = append(got[d.ID], s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if searched != tab {
		t.Errorf("SearchAt searched v%d, want the published v%d", searched.Version(), tab.Version())
	}
	if s, ok := got[id]; ok {
		t.Errorf("a search during the pending table returned the unacknowledged write %s (on shards %v)", id, s)
	}
	for i := range 40 {
		doc := fmt.Sprintf("pre-%d", i)
		_, want := tab.Route(doc, "")
		if diff := cmp.Diff([]routing.ShardID{want}, got[doc]); diff != "" {
			t.Errorf("acknowledged %s found on shards (-want +got):\n%s", doc, diff)
		}
	}
	if err := p.Commit(func() error { return errors.New("injected: fsync failed") }); !errors.Is(err, node.ErrFailed) {
		t.Fatalf("Commit = %v, want ErrFailed", err)
	}
	if err := <-acked; !errors.Is(err, node.ErrFailed) {
		t.Fatalf("the write = %v, want ErrFailed", err)
	}
}
