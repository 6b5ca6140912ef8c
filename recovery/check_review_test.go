package recovery

import (
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

// Check's own violations. Only its placement check had a test: with the
// in-progress split check, the unfinished-journal check or the active-shard
// store check switched off, every test of this package passed (review s21).
func TestReviewS21CheckReportsWhatRecoveryLeftUndone(t *testing.T) {
	open := func(t *testing.T) (*testNode, func()) {
		tab := testTable(t)
		n, j, _, err := Open(storage.Options{Dir: "/data", FS: vfs.NewMem(), CacheBytes: 1 << 20}, tab, nil)
		if err != nil {
			t.Fatal(err)
		}
		if rep := Check(n, j, nil); !rep.OK() {
			t.Fatalf("clean node: %+v", rep)
		}
		return &testNode{n: n, j: j}, func() { _ = n.Close() }
	}
	want := func(t *testing.T, tn *testNode, what string) {
		t.Helper()
		rep := Check(tn.n, tn.j, nil)
		if rep.OK() || !strings.Contains(strings.Join(rep.Violations, "; "), what) {
			t.Errorf("Check = %+v; want a violation naming %q", rep, what)
		}
	}
	t.Run("split in progress", func(t *testing.T) {
		tn, done := open(t)
		defer done()
		if _, err := tn.n.Apply(splitter.SplitPlan(0, 2).Edit()); err != nil {
			t.Fatal(err)
		}
		want(t, tn, "splits in progress")
	})
	t.Run("active shard without a store", func(t *testing.T) {
		tn, done := open(t)
		defer done()
		tab, err := tn.n.Apply(splitter.SplitPlan(0, 2).Edit())
		if err != nil {
			t.Fatal(err)
		}
		rec, _ := tab.Split(0)
		var children []routing.ShardID
		for _, c := range rec.Children {
			children = append(children, c.Shard)
		}
		if _, err := tn.n.Apply(routing.Edit{Kind: routing.CommitSplit, Shard: 0, Children: children}); err != nil {
			t.Fatal(err)
		}
		want(t, tn, "is active but has no store")
	})
	t.Run("journal left unfinished", func(t *testing.T) {
		tn, done := open(t)
		defer done()
		if err := tn.j.Append(splitter.Record{ID: tn.j.NewID(), Kind: splitter.KindSplit, Stage: splitter.StageBegin, Sources: []routing.ShardID{0}, Version: 1}); err != nil {
			t.Fatal(err)
		}
		want(t, tn, "left at begin")
	})
}

type testNode struct {
	n *node.Node
	j *splitter.Journal
}
