package clusternode

import (
	"testing"

	"github.com/shardsplit/shardsplit/replication"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
	"github.com/shardsplit/shardsplit/storage/crashfs"
)

// TestACopysStoreKeepsItsGlobalCheckpoint: the global checkpoint a copy
// recorded is what its store says once opened again on the same files, in
// replication's numbering (a store's sequence numbers are one above).
func TestACopysStoreKeepsItsGlobalCheckpoint(t *testing.T) {
	fs := crashfs.New().FS(nil)
	o := Stores{FS: fs, CacheBytes: 1 << 20}
	span := []routing.Span{{Start: 0, End: 1 << 32}}
	s, err := o.Open("/copy", 0, 0, span)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.GlobalCheckpoint(); got != replication.NoOpsPerformed {
		t.Fatalf("a new store's global checkpoint = %d, want %d", got, replication.NoOpsPerformed)
	}
	var ops []replication.Op
	for i := range 4 {
		ops = append(ops, replication.Op{Seq: int64(i), Term: 1,
			Doc: storage.Op{Kind: storage.OpIndex, Key: 7, ID: string(rune('a' + i)), Source: []byte("v")}})
	}
	if err := s.Apply(ops, true); err != nil {
		t.Fatal(err)
	}
	if err := s.SetGlobalCheckpoint(2); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = o.Open("/copy", 0, 0, span)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, lcp := s.GlobalCheckpoint(), s.LocalCheckpoint(); got != 2 || lcp != 3 {
		t.Fatalf("opened again: global checkpoint %d, local %d; want 2 and 3", got, lcp)
	}
}
