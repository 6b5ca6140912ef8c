package splitter

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// A keep-all split (the RFC's data path) runs the same protocol; while
// its children still hold their foreign documents, searches and gets show
// each document once, on the shard the table names, and once the cleanup
// ends every child holds exactly its own documents.
func TestKeepAllSplitServesNoForeignDocument(t *testing.T) {
	for _, mode := range []routing.Mode{routing.ModePartition, routing.ModeOpenSearch} {
		t.Run(mode.String(), func(t *testing.T) {
			tab := newTable(t, mode, 2, 16)
			// A cleanup that stalls after its first batch of 10 until released.
			n := openNode(t, storage.Options{Durability: storage.DurabilityAsync,
				ForeignCleanup: storage.ForeignCleanupOptions{Batch: 10, Pause: time.Hour}}, tab, 0)
			r := node.NewRouter(n, tab, node.RouterConfig{})
			var ids []string
			for i := range 300 {
				id := fmt.Sprintf("d%d", i)
				ids = append(ids, id)
				if _, err := r.Index(id, "", []byte(id)); err != nil {
					t.Fatal(err)
				}
			}
			// In the parent's tables, which a keep-all child keeps whole:
			// of the writes its memtable holds, a child takes its own.
			parent, _ := n.Store(0)
			if err := parent.Flush(); err != nil {
				t.Fatal(err)
			}
			rep, err := NewDriver(n, Config{ChildBuild: storage.ChildKeepAll}).Run(SplitPlan(0, 2))
			if err != nil || rep.Phase != PhaseDone {
				t.Fatalf("split: %v %v", err, rep.Err)
			}
			foreign := 0
			for _, c := range rep.Targets {
				s, _ := n.Store(c)
				k, err := s.ForeignDocs()
				if err != nil {
					t.Fatal(err)
				}
				foreign += k
			}
			if foreign == 0 {
				t.Fatalf("the children hold no foreign document: the cleanup did not stall, nothing is tested")
			}
			var got []string
			if _, err := n.Search(func(s routing.ShardID, d storage.Doc) error {
				if _, owner := n.Table().Route(d.ID, d.Routing); owner != s {
					t.Errorf("search: %s on shard %d, the table names %d", d.ID, s, owner)
				}
				got = append(got, d.ID)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(ids))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("search with %d foreign documents in the children (-want +got):\n%s", foreign, diff)
			}
			for _, id := range ids {
				if d, ok, err := r.Get(id, ""); err != nil || !ok || d.ID != id {
					t.Fatalf("get %s: %v %v %q", id, ok, err, d.ID)
				}
			}
			// Close stops the stalled cleanup (it does not wait out the pause).
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// With the cleanup let run, each child ends with exactly its own
// documents.
func TestKeepAllSplitCleanupEnds(t *testing.T) {
	n := openNode(t, storage.Options{Durability: storage.DurabilityAsync}, newTable(t, routing.ModeOpenSearch, 1, 1), 500)
	rep, err := NewDriver(n, Config{ChildBuild: storage.ChildKeepAll}).Run(SplitPlan(0, 3))
	if err != nil || rep.Phase != PhaseDone {
		t.Fatalf("split: %v %v", err, rep.Err)
	}
	if err := n.Engine().WaitForeignCleanups(context.Background()); err != nil {
		t.Fatal(err)
	}
	served := 0
	for _, c := range rep.Targets {
		s, _ := n.Store(c)
		if k, err := s.ForeignDocs(); err != nil || k != 0 {
			t.Errorf("child %d: %d foreign documents after its cleanup (%v)", c, k, err)
		}
		o, _ := n.Table().Shard(c)
		k, _ := s.CountKeys(routing.Span{Start: 0, End: 1 << 32})
		own, _ := s.CountKeys(o.Span)
		if k != own {
			t.Errorf("child %d's store holds %d documents, %d of them its own", c, k, own)
		}
		served += own
	}
	if served != 500 {
		t.Errorf("the children hold %d documents, want 500", served)
	}
}
