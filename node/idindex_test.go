package node_test

import (
	"fmt"
	"testing"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// sameShardRoutings returns n routing values that route id to the shard
// its _id alone routes to in t, each under a key of its own (none the
// _id's own), and one that routes it to another shard.
func sameShardRoutings(t *testing.T, tab *routing.Table, id string, n int) (same []string, other string) {
	t.Helper()
	p0, home := tab.Route(id, "")
	keys := map[routing.Key]bool{tab.KeyOf(p0): true}
	for i := 0; (len(same) < n || other == "") && i < 100000; i++ {
		r := fmt.Sprintf("tenant-%d", i)
		p, s := tab.Route(id, r)
		switch {
		case s != home:
			if other == "" {
				other = r
			}
		case !keys[tab.KeyOf(p)] && len(same) < n:
			keys[tab.KeyOf(p)] = true
			same = append(same, r)
		}
	}
	if len(same) < n || other == "" {
		t.Fatalf("no %d routing values to the shard of %s and one to another", n, id)
	}
	return same, other
}

// Two routing values that reach one shard reach one document of an _id
// there, as OpenSearch keeps one per _id in a shard: an index replaces it
// (with or without routing), a get with any of them finds it with the
// routing value it was indexed with, a delete with any of them deletes it;
// a routing value that reaches another shard makes a document of its own
// there. In both routing modes and both layouts, through the library's
// router.
func TestRoutingValuesThatReachOneShardShareItsDocumentOfAnID(t *testing.T) {
	for _, mode := range []routing.Mode{routing.ModePartition, routing.ModeOpenSearch} {
		for _, layout := range []storage.Layout{storage.LayoutPerShard, storage.LayoutShared} {
			t.Run(fmt.Sprintf("%s/%s", mode, layout), func(t *testing.T) {
				tab, err := routing.NewTable(mode, routing.Settings{Shards: 2, RoutingShards: 64, PartitionSize: 1})
				if err != nil {
					t.Fatal(err)
				}
				n, _ := openNodeOn(t, storage.Options{Layout: layout}, tab)
				defer n.Close()
				r := node.NewRouter(n, tab, node.RouterConfig{})
				const id = "order-7"
				rs, other := sameShardRoutings(t, tab, id, 2)
				docs := func() map[string]string {
					out := map[string]string{}
					if _, err := n.Search(func(_ routing.ShardID, d storage.Doc) error {
						if d.ID == id {
							out[d.Routing] = string(d.Source)
						}
						return nil
					}); err != nil {
						t.Fatal(err)
					}
					return out
				}
				step := func(name string, want map[string]string, get string) {
					t.Helper()
					got := docs()
					if fmt.Sprint(got) != fmt.Sprint(want) {
						t.Errorf("%s: documents of %s by routing value %v, want %v", name, id, got, want)
					}
					for _, rv := range append([]string{""}, rs...) {
						d, found, err := r.Get(id, rv)
						switch {
						case err != nil:
							t.Fatal(err)
						case get == "" && found:
							t.Errorf("%s: get with routing %q found %q (routing %q), want nothing", name, rv, d.Source, d.Routing)
						case get != "" && (!found || d.Routing+"="+string(d.Source) != get):
							t.Errorf("%s: get with routing %q = %v %q, want %s", name, rv, found, d.Routing+"="+string(d.Source), get)
						}
					}
				}
				must := func(_ node.Result, err error) {
					t.Helper()
					if err != nil {
						t.Fatal(err)
					}
				}
				must(r.Index(id, "", []byte("v1")))
				step("unrouted", map[string]string{"": "v1"}, "=v1")
				must(r.Index(id, rs[0], []byte("v2")))
				step("routed", map[string]string{rs[0]: "v2"}, rs[0]+"=v2")
				must(r.Index(id, rs[1], []byte("v3")))
				step("routed again", map[string]string{rs[1]: "v3"}, rs[1]+"=v3")
				must(r.Index(id, other, []byte("elsewhere")))
				step("another shard", map[string]string{rs[1]: "v3", other: "elsewhere"}, rs[1]+"=v3")
				must(r.Index(id, "", []byte("v4")))
				step("unrouted again", map[string]string{"": "v4", other: "elsewhere"}, "=v4")
				must(r.Delete(id, rs[0]))
				step("deleted", map[string]string{other: "elsewhere"}, "")
				if d, found, err := r.Get(id, other); err != nil || !found || string(d.Source) != "elsewhere" {
					t.Errorf("the other shard's document: %v %q %v", found, d.Source, err)
				}
			})
		}
	}
}
