package recovery

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// Check promises that every store holds only keys of its span, but it
// looked for stray keys only between the shard's span and its root's: a
// shard that owns its whole root (every unsplit shard, every merged-back
// one) was never checked, and a key of another root in its store (in
// partition mode every root shares keyspace 0) went unreported — the
// placement scan reads only the table's span of each shard.
func TestReviewS21CheckReportsAKeyOfAnotherRoot(t *testing.T) {
	tab, _ := routing.NewTable(routing.ModePartition, routing.Settings{Shards: 2, RoutingShards: 64, PartitionSize: 1})
	n, j, _, err := Open(storage.Options{Dir: "/data", FS: vfs.NewMem(), CacheBytes: 1 << 20}, tab, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	r := node.NewRouter(n, tab, node.RouterConfig{})
	for i := range 10 {
		if _, err := r.Index(fmt.Sprintf("d%d", i), "", []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if rep := Check(n, j, nil); !rep.OK() {
		t.Fatalf("clean node: %+v", rep)
	}
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

// In opensearch mode every root has its own keyspace, and Check looked for
// stray keys only in the shard's own keyspace: a document of root 1 in
// shard 0's store went unreported (the placement scan reads only the
// table's span of each shard, in its root's keyspace).
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
