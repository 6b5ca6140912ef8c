package storage

import (
	"errors"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/google/go-cmp/cmp"

	"github.com/shardsplit/shardsplit/routing"
)

// A shard's backlog is its store's: the overlapping tables a held store
// keeps in L0 are sublevels, and nothing runs while compactions are held.
// A destroyed shard has none to report.
func TestBacklogReportsTheStoresL0(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	s := openShard(t, e, 2, 2, rootSpan(2))
	e.HoldCompactions(s)
	for range 3 { // the same keys each time: each table overlaps the last
		writeDocs(t, s, "doc", 50, 100)
		if err := s.st.flush(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Backlog()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Backlog{L0Sublevels: 3}, Backlog{L0Sublevels: got.L0Sublevels, Running: got.Running}); diff != "" {
		t.Errorf("backlog of a held store with three overlapping flushes (-want +got):\n%s", diff)
	}
	if err := e.DestroyShard(2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Backlog(); !errors.Is(err, ErrShardClosed) {
		t.Errorf("backlog of a destroyed shard: err %v, want ErrShardClosed", err)
	}
}

// FlushesEnded counts every flush of the shard's store that ended, the
// ones a split forces included.
func TestFlushesEndedCountsTheStoresFlushes(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	s := openShard(t, e, 2, 2, rootSpan(2))
	before := s.FlushesEnded()
	for range 2 {
		writeDocs(t, s, "doc", 10, 100)
		if err := s.st.flush(); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.FlushesEnded() - before; got != 2 {
		t.Errorf("%d flushes ended, want 2", got)
	}
}

// Backlog polled while the engine closes (every shard
// of a per-shard and a shared engine) either answers or reports
// ErrShardClosed; it never reaches a closed Pebble (Metrics would read a
// closed DB) and never deadlocks with Close.
func TestBacklogWhileTheEngineCloses(t *testing.T) {
	for _, layout := range []Layout{LayoutPerShard, LayoutShared} {
		for round := range 20 {
			e := openEngine(t, Options{Layout: layout})
			var shards []*Shard
			for id := range routing.ShardID(3) {
				s := openShard(t, e, id, id, rootSpan(id))
				shards = append(shards, s)
			}
			var wg sync.WaitGroup
			for _, s := range shards {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						_, err := s.Backlog()
						if errors.Is(err, ErrShardClosed) {
							return
						}
						if err != nil {
							t.Errorf("%s round %d: backlog: %v", layout, round, err)
							return
						}
					}
				}()
			}
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
		}
	}
}
