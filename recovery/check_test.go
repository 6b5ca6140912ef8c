package recovery

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

// TestCheckReportsMisplacedDocument: a document stored on shard 1 whose
// routing value names shard 0 (written with storage directly, as a routing
// bug would) is a violation of Check.
func TestCheckReportsMisplacedDocument(t *testing.T) {
	tab := testTable(t)
	n, j := openRecovered(t, tab, 10)
	if rep := Check(n, j, nil); rep.Documents != 10 {
		t.Fatalf("clean node: %+v", rep)
	}
	var to0, to1 string
	for i := 0; to0 == "" || to1 == ""; i++ {
		k := fmt.Sprintf("t%d", i)
		if _, s := tab.Route("moved", k); s == 0 {
			to0 = k
		} else {
			to1 = k
		}
	}
	p, _ := tab.Route("moved", to1)
	s, _ := n.ShardStore(1)
	op := storage.Op{Kind: storage.OpIndex, Root: tab.Keyspace(p.Root), Key: tab.KeyOf(p), ID: "moved", Routing: to0, Source: []byte("x")}
	if _, err := s.Write([]storage.Op{op}, nil); err != nil {
		t.Fatal(err)
	}
	rep := Check(n, j, nil)
	if rep.OK() || rep.Documents != 11 || len(rep.Violations) != 1 || !strings.Contains(rep.Violations[0], "document moved is on shard 1") {
		t.Fatalf("misplaced document: %+v", rep)
	}
	t.Logf("violation: %s", rep.Violations[0])
}

// Check promises that every store holds only keys of its span, also a
// shard that owns its whole root (every unsplit shard, every merged-back
// one): a key of another root in its store (in partition mode every root
// shares keyspace 0) is reported, though the placement scan reads only the
// table's span of each shard.
func TestCheckReportsAKeyOfAnotherRoot(t *testing.T) {
	tab := testTable(t)
	n, j := openRecovered(t, tab, 10)
	// A document of root 1 written into shard 0's store, as a bug in a
	// child's or a merge target's build would leave it.
	var id string
	var p routing.Placement
	for i := 0; ; i++ {
		id = fmt.Sprintf("stray%d", i)
		if p, _ = tab.Route(id, ""); p.Root == 1 {
			break
		}
	}
	s, _ := n.ShardStore(0)
	owned := s.Owned()
	s.SetOwned([]routing.Span{{Start: 0, End: 1 << 32}})
	op := storage.Op{Kind: storage.OpIndex, Root: tab.Keyspace(p.Root), Key: tab.KeyOf(p), ID: id, Source: []byte("x")}
	if _, err := s.Write([]storage.Op{op}, nil); err != nil {
		t.Fatal(err)
	}
	s.SetOwned(owned)
	rep := Check(n, j, nil)
	if rep.OK() || !strings.Contains(strings.Join(rep.Violations, "\n"), "shard 0 holds 1 keys outside its span") {
		t.Fatalf("shard 0 holds a key of root 1 (routing key %d, root 1 spans %s): Check reported %+v", tab.KeyOf(p), tab.RootSpan(1), rep)
	}
	t.Logf("violation: %s", rep.Violations[0])
}

// In opensearch mode every root has its own keyspace: Check looks for
// stray keys beyond the shard's own keyspace, so a document of root 1 in
// shard 0's store is reported (the placement scan reads only the table's
// span of each shard, in its root's keyspace).
func TestCheckReportsAKeyOfAnotherKeyspace(t *testing.T) {
	tab, _ := routing.NewTable(routing.ModeOpenSearch, routing.Settings{Shards: 2, RoutingShards: 2, PartitionSize: 1})
	opts := storage.Options{Dir: "/data", FS: vfs.NewMem(), CacheBytes: 1 << 20}
	n, _, _, err := Open(opts, tab, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	var id string
	var p routing.Placement
	for i := 0; ; i++ {
		id = fmt.Sprintf("stray%d", i)
		if p, _ = tab.Route(id, ""); p.Root == 1 {
			break
		}
	}
	if tab.Keyspace(p.Root) == tab.Keyspace(0) {
		t.Fatalf("opensearch mode: root 1 shares root 0's keyspace %d", tab.Keyspace(0))
	}
	// A document of root 1 in shard 0's store, as a bug in a build that
	// copies or links another keyspace's files would leave it: shard 0's
	// store opened as keyspace 1's, which Write's own check allows.
	eng, err := storage.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	s, err := eng.OpenShard(0, tab.Keyspace(p.Root), []routing.Span{{Start: 0, End: 1 << 32}})
	if err != nil {
		t.Fatal(err)
	}
	op := storage.Op{Kind: storage.OpIndex, Root: tab.Keyspace(p.Root), Key: tab.KeyOf(p), ID: id, Source: []byte("x")}
	if _, err := s.Write([]storage.Op{op}, nil); err != nil {
		t.Fatal(err)
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	n, j, _, err := Open(opts, tab, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	rep := Check(n, j, nil)
	if rep.OK() || !strings.Contains(strings.Join(rep.Violations, "\n"), "shard 0 holds 1 keys outside its span") {
		t.Fatalf("shard 0 holds a key of root 1's keyspace %d: Check reported %+v", tab.Keyspace(p.Root), rep)
	}
	t.Logf("violation: %s", rep.Violations[0])
}

// Check's own violations besides placement: a split in progress, an active
// shard without a store, a journal left unfinished; each must be reported.
func TestCheckReportsWhatRecoveryLeftUndone(t *testing.T) {
	want := func(t *testing.T, n *node.Node, j *splitter.Journal, what string) {
		t.Helper()
		rep := Check(n, j, nil)
		if rep.OK() || !strings.Contains(strings.Join(rep.Violations, "; "), what) {
			t.Errorf("Check = %+v; want a violation naming %q", rep, what)
		}
	}
	t.Run("split in progress", func(t *testing.T) {
		n, j := openRecovered(t, testTable(t), 0)
		if _, err := n.Apply(splitter.SplitPlan(0, 2).Edit()); err != nil {
			t.Fatal(err)
		}
		want(t, n, j, "splits in progress")
	})
	t.Run("active shard without a store", func(t *testing.T) {
		n, j := openRecovered(t, testTable(t), 0)
		tab, err := n.Apply(splitter.SplitPlan(0, 2).Edit())
		if err != nil {
			t.Fatal(err)
		}
		rec, _ := tab.Split(0)
		var children []routing.ShardID
		for _, c := range rec.Children {
			children = append(children, c.Shard)
		}
		if _, err := n.Apply(routing.Edit{Kind: routing.CommitSplit, Shard: 0, Children: children}); err != nil {
			t.Fatal(err)
		}
		want(t, n, j, "is active but has no store")
	})
	t.Run("journal left unfinished", func(t *testing.T) {
		n, j := openRecovered(t, testTable(t), 0)
		if err := j.Append(splitter.Record{ID: j.NewID(), Kind: splitter.KindSplit, Stage: splitter.StageBegin, Sources: []routing.ShardID{0}, Version: 1}); err != nil {
			t.Fatal(err)
		}
		want(t, n, j, "left at begin")
	})
}
