package storage

import (
	"errors"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/routing"
)

// Review of f9314cf: Backlog polled while the engine closes (every shard
// of a per-shard and a shared engine) either answers or reports
// ErrShardClosed; it never reaches a closed Pebble (Metrics would read a
// closed DB) and never deadlocks with Close.
func TestBacklogWhileTheEngineCloses(t *testing.T) {
	for _, layout := range []Layout{LayoutPerShard, LayoutShared} {
		for round := range 20 {
			e, err := Open(Options{Dir: "/data", FS: vfs.NewMem(), CacheBytes: 1 << 20, Layout: layout})
			if err != nil {
				t.Fatal(err)
			}
			var shards []*Shard
			for id := range routing.ShardID(3) {
				s, err := e.OpenShard(id, id, []routing.Span{rootSpan(id)})
				if err != nil {
					t.Fatal(err)
				}
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
