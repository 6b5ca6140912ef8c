package splitter

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// idModel is what an index must hold when a shard keeps one document per
// _id: per _id, its documents by routing value. A write removes the
// documents of its _id on the shard it reaches, in the table of the
// moment, and leaves those on other shards.
type idModel map[string]map[string]string

func (m idModel) write(tab *routing.Table, id, r, v string) {
	_, to := tab.Route(id, r)
	docs := m[id]
	if docs == nil {
		docs = map[string]string{}
		m[id] = docs
	}
	for other := range docs {
		if _, s := tab.Route(id, other); s == to {
			delete(docs, other)
		}
	}
	if v != "" {
		docs[r] = v
	}
}

// check compares the node with the model: the documents a search finds,
// a get of each with its routing value, and every shard's `_id` index.
func (m idModel) check(t *testing.T, step string, n *node.Node, r *node.Router) {
	t.Helper()
	got := idModel{}
	if _, err := n.Search(func(_ routing.ShardID, d storage.Doc) error {
		if got[d.ID] == nil {
			got[d.ID] = map[string]string{}
		}
		got[d.ID][d.Routing] = string(d.Source)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, id := range slices.Sorted(maps.Keys(m)) {
		if want := m[id]; fmt.Sprint(want) != fmt.Sprint(got[id]) && (len(want) > 0 || len(got[id]) > 0) {
			t.Errorf("%s: %s holds %v, want %v", step, id, got[id], want)
		}
		for rv, v := range m[id] {
			d, found, err := r.Get(id, rv)
			if err != nil {
				t.Fatal(err)
			}
			if !found || string(d.Source) != v {
				t.Errorf("%s: get %s with routing %q: %v %q, want %q", step, id, rv, found, d.Source, v)
			}
		}
	}
	tab := n.Table()
	for _, id := range tab.ActiveShards() {
		s, _ := n.ShardStore(id)
		o, _ := tab.Shard(id)
		pending, _ := s.ForeignPending() // before the snapshot (recovery.Check says why)
		rep, err := s.CheckIDIndex(o.Span)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() || !pending && n.Engine().Layout() == storage.LayoutPerShard && rep.Outside != 0 {
			t.Errorf("%s: shard %d's _id index: %+v", step, id, rep)
		}
	}
}

// Documents of one _id under routing values that reach one shard stay one
// document through an in-place split (including writes the catch-up
// replays that move a document from one child's span to the other's) and
// a merge of the children (which keeps a document of the _id from each,
// as OpenSearch's shrink does, until the next write of the _id): in both
// routing modes and both layouts, with each way a per-shard child builds
// its `_id` entries and with the RFC's keep-all children.
func TestOneDocumentPerIDThroughASplitAndAMerge(t *testing.T) {
	type build struct {
		name   string
		layout storage.Layout
		ids    storage.IDIndexBuild
		child  storage.ChildBuild
	}
	builds := []build{
		{"per-shard/rebuild", storage.LayoutPerShard, storage.IDIndexRebuild, storage.ChildExcise},
		{"per-shard/scan-delete", storage.LayoutPerShard, storage.IDIndexScanDelete, storage.ChildExcise},
		{"per-shard/keep-all", storage.LayoutPerShard, storage.IDIndexRebuild, storage.ChildKeepAll},
		{"shared", storage.LayoutShared, storage.IDIndexRebuild, storage.ChildExcise},
	}
	for _, mode := range []routing.Mode{routing.ModePartition, routing.ModeOpenSearch} {
		for _, b := range builds {
			t.Run(mode.String()+"/"+b.name, func(t *testing.T) {
				tab, err := routing.NewTable(mode, routing.Settings{Shards: 2, RoutingShards: 64, PartitionSize: 1})
				if err != nil {
					t.Fatal(err)
				}
				eng, err := storage.Open(storage.Options{Dir: "/data", FS: vfs.NewMem(), Layout: b.layout, CacheBytes: 1 << 20, IDIndex: b.ids})
				if err != nil {
					t.Fatal(err)
				}
				n, err := node.Open(node.Config{Engine: eng, Table: tab})
				if err != nil {
					t.Fatal(err)
				}
				defer n.Close()
				r := node.NewRouter(n, tab, node.RouterConfig{})
				m := idModel{}
				routings := []string{"", "tenant-a", "tenant-b", "tenant-c", "tenant-d", "tenant-e"}
				round := 0
				// Every id written with the next routing value of a round:
				// some reach the shard its document is on, some another.
				writeRound := func() {
					t.Helper()
					round++
					for i := range 60 {
						id := fmt.Sprintf("d%d", i)
						rv := routings[(i+round)%len(routings)]
						v := fmt.Sprintf("%s-v%d", id, round)
						if (i+round)%7 == 0 {
							v = ""
							if _, err := r.Delete(id, rv); err != nil {
								t.Fatal(err)
							}
						} else if _, err := r.Index(id, rv, []byte(v)); err != nil {
							t.Fatal(err)
						}
						m.write(n.Table(), id, rv, v)
					}
				}
				writeRound()
				writeRound()
				m.check(t, "before the split", n, r)
				d := NewDriver(n, Config{ChildBuild: b.child})
				sp := d.Start(SplitPlan(0, 2))
				for !sp.Done() {
					if sp.Phase() == PhaseCatchUp {
						writeRound() // on the parent, replayed into the children
					}
					if _, _, err := sp.Next(); err != nil {
						t.Fatal(err)
					}
				}
				if rep := sp.Report(); rep.Phase != PhaseDone {
					t.Fatalf("split: %v", rep.Err)
				}
				if b.child == storage.ChildKeepAll {
					if err := eng.WaitForeignCleanups(t.Context()); err != nil {
						t.Fatal(err)
					}
				}
				m.check(t, "after the split", n, r)
				writeRound()
				m.check(t, "writes to the children", n, r)
				children := slices.Clone(sp.Report().Targets)
				slices.Sort(children)
				mg := d.Start(MergePlan(children...))
				for !mg.Done() {
					if mg.Phase() == PhaseCatchUp {
						writeRound()
					}
					if _, _, err := mg.Next(); err != nil {
						t.Fatal(err)
					}
				}
				if rep := mg.Report(); rep.Phase != PhaseDone {
					t.Fatalf("merge: %v", rep.Err)
				}
				m.check(t, "after the merge", n, r)
				target, _ := n.ShardStore(mg.Report().Targets[0])
				o, _ := n.Table().Shard(mg.Report().Targets[0])
				ids, err := target.CheckIDIndex(o.Span)
				if err != nil {
					t.Fatal(err)
				}
				writeRound()
				m.check(t, "writes to the merged shard", n, r)
				t.Logf("%d _ids had a document on each child, which the merge kept", ids.SharedIDs)
			})
		}
	}
}
