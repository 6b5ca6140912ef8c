package storage

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/routing"
)

// BenchmarkGetUnderSyncedWrites: a get's latency on a DurabilityRequest
// store, alone and while writers commit synced writes to the same store
// without pause (a read that may see an unsynced write waits for a sync),
// and the writers' rate meanwhile (each such read adds a synced record).
func BenchmarkGetUnderSyncedWrites(b *testing.B) {
	for _, writers := range []int{0, 1, 4} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			e, err := Open(Options{Dir: b.TempDir(), FS: vfs.Default, Durability: DurabilityRequest, CacheBytes: 16 << 20})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			s, err := e.OpenShard(0, 0, []routing.Span{{Start: 0, End: 1024}})
			if err != nil {
				b.Fatal(err)
			}
			const docs = 1000
			ops := make([]Op, 0, docs)
			key := func(id string) routing.Key { return routing.Key(uint32(routing.Hash(id)) % 1024) }
			for i := range docs {
				id := fmt.Sprintf("doc-%06d", i)
				ops = append(ops, Op{Kind: OpIndex, Root: 0, Key: key(id), ID: id, Source: []byte(`{"v":1}`)})
			}
			if _, err := s.Write(ops, nil); err != nil {
				b.Fatal(err)
			}
			var stop atomic.Bool
			var writes atomic.Int64
			var wg sync.WaitGroup
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; !stop.Load(); i++ {
						id := fmt.Sprintf("w%d-%06d", w, i%1000)
						if _, err := s.Write([]Op{{Kind: OpIndex, Root: 0, Key: key(id), ID: id, Source: []byte(`{"v":2}`)}}, nil); err != nil {
							b.Error(err)
							return
						}
						writes.Add(1)
					}
				}()
			}
			b.ResetTimer()
			start, before := time.Now(), writes.Load()
			for i := 0; i < b.N; i++ {
				id := fmt.Sprintf("doc-%06d", i%docs)
				if _, found, err := s.Get(0, key(id), id); err != nil || !found {
					b.Fatal(found, err)
				}
			}
			b.StopTimer()
			if writers > 0 {
				b.ReportMetric(float64(writes.Load()-before)/time.Since(start).Seconds(), "writes/s")
			}
			stop.Store(true)
			wg.Wait()
		})
	}
}
