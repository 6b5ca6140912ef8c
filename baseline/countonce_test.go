package baseline

import (
	"errors"
	"fmt"
	"testing"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// TestCountOnceRefusesMisplacedDocument: the resize's consistency wait
// counts a clean target and refuses one holding a document on a shard its
// table does not name (written with storage directly, as a bad copy would).
func TestCountOnceRefusesMisplacedDocument(t *testing.T) {
	c := NewCluster(Config{Dir: t.TempDir()})
	defer c.Close()
	ix, err := c.CreateIndex("target", routing.Settings{Shards: 2, RoutingShards: 64, PartitionSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	tab := ix.Node.Table()
	r := node.NewRouter(ix.Node, tab, node.RouterConfig{})
	for i := range 10 {
		if _, err := r.Index(fmt.Sprintf("d%d", i), "", []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := countOnce(ix); err != nil || n != 10 {
		t.Fatalf("clean target: %d, %v", n, err)
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
	s, _ := ix.Node.ShardStore(1)
	op := storage.Op{Kind: storage.OpIndex, Root: tab.Keyspace(p.Root), Key: tab.KeyOf(p), ID: "moved", Routing: to0, Source: []byte("x")}
	if _, err := s.Write([]storage.Op{op}, nil); err != nil {
		t.Fatal(err)
	}
	_, err = countOnce(ix)
	if !errors.Is(err, ErrInconsistent) || !errors.Is(err, node.ErrPlacement) {
		t.Fatalf("misplaced document: got %v, want ErrInconsistent", err)
	}
	t.Logf("refused: %v", err)
}

// The procedure's consistency wait checked only placement, which a target
// that lost a document passes: it must also hold as many documents as the
// write-blocked source, as a user comparing the two indices' _count would
// check before swapping the alias.
func TestVerifyTargetRefusesATargetMissingADocument(t *testing.T) {
	c := NewCluster(Config{Dir: t.TempDir()})
	defer c.Close()
	src, err := c.CreateIndex("src", routing.Settings{Shards: 2, RoutingShards: 64, PartitionSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	r := node.NewRouter(src.Node, src.Node.Table(), node.RouterConfig{})
	for i := range 10 {
		if _, err := r.Index(fmt.Sprintf("d%d", i), "", []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.SetWriteBlock("src", true); err != nil {
		t.Fatal(err)
	}
	target, _, err := c.Resize(ResizeRequest{Op: routing.Split, Source: "src", Target: "dst", TargetShards: 4})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := verifyTarget(src, target); err != nil || n != 10 {
		t.Fatalf("a whole target: %d, %v", n, err)
	}
	// d3 lost from the target, as a bad copy would leave it.
	tab := target.Node.Table()
	p, shard := tab.Route("d3", "")
	s, _ := target.Node.ShardStore(shard)
	op := storage.Op{Kind: storage.OpDelete, Root: tab.Keyspace(p.Root), Key: tab.KeyOf(p), ID: "d3"}
	if _, err := s.Write([]storage.Op{op}, nil); err != nil {
		t.Fatal(err)
	}
	n, err := verifyTarget(src, target)
	if !errors.Is(err, ErrInconsistent) {
		t.Fatalf("a target missing d3: verified %d documents, %v; want ErrInconsistent", n, err)
	}
	t.Logf("refused: %v", err)
}
