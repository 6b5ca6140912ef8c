package splitter

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// Between a merge's publish and its table commit, the target holds writes
// only the published table admits, not acknowledged (INV-9): a search then
// reads the target's span from the sources, the durable table's owners,
// and reports the hits as the target's. node's searchat_test covers a split.
func TestSearchDuringAPendingMergeReadsTheSources(t *testing.T) {
	n := openNode(t, storage.Options{}, nil, 40)
	d := NewDriver(n, Config{})
	split, err := d.Run(SplitPlan(0, 2))
	if err != nil || split.Phase != PhaseDone {
		t.Fatalf("split: %s, %v, %v", split.Phase, split.Err, err)
	}
	mg := d.Start(MergePlan(split.Targets...))
	for {
		in, _, err := mg.Next()
		if err != nil || mg.Done() {
			t.Fatalf("merge ended (%v) before it unfenced", err)
		}
		if in.Kind == IntentUnfence {
			break
		}
	}
	tab := n.Table()
	target := mg.Machine().Targets()[0]
	pl, _ := tab.Route("late", "")
	acked := make(chan error, 1)
	go func() {
		_, err := node.NewRouter(n, tab, node.RouterConfig{}).Index("late", "", []byte("unacknowledged"))
		acked <- err
	}()
	store, ok := n.ShardStore(target)
	if !ok {
		t.Fatalf("no store for the target %d", target)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, found, err := store.GetAny(tab.Keyspace(pl.Root), tab.KeyOf(pl), "late"); err != nil {
			t.Fatal(err)
		} else if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the write to the target was never applied")
		}
	}
	search := func() map[string][]routing.ShardID {
		got := map[string][]routing.ShardID{}
		if _, err := n.SearchAt(0, func(s routing.ShardID, d storage.Doc) error {
			got[d.ID] = append(got[d.ID], s)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	want := map[string][]routing.ShardID{}
	for i := range 40 {
		want[fmt.Sprintf("d%d", i)] = []routing.ShardID{target}
	}
	if diff := cmp.Diff(want, search()); diff != "" {
		t.Errorf("a search during the pending merge found (-want +got):\n%s", diff)
	}
	for !mg.Done() {
		if _, _, err := mg.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-acked; err != nil || mg.Report().Phase != PhaseDone {
		t.Fatalf("merge %s; the write: %v", mg.Report().Phase, err)
	}
	want["late"] = []routing.ShardID{target}
	if diff := cmp.Diff(want, search()); diff != "" {
		t.Errorf("a search after the merge found (-want +got):\n%s", diff)
	}
}
