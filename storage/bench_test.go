package storage

// Benchmarks of the two facts that make an in-place split cheap, plus the
// write path's overhead over raw Pebble. Run with
//
//	go test -run '^$' -bench . -count 10 -timeout 2h ./storage
//
// The 1 GiB cases load their parent once per benchmark (about a minute).

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/routing"
)

const docBytes = 1024

// randomSource returns incompressible document bytes.
func randomSource(rng *rand.Rand) []byte {
	b := make([]byte, 0, docBytes)
	for len(b) < docBytes {
		b = binary.LittleEndian.AppendUint64(b, rng.Uint64())
	}
	return b
}

// loadParent fills shard 0 (root 0 of a 1-shard index with R = 1024) with
// docs documents of 1 KiB and flushes them into tables.
func loadParent(b *testing.B, dir string, docs int) (*Engine, *Shard) {
	b.Helper()
	e, err := Open(Options{Dir: dir, FS: vfs.Default, Durability: DurabilityAsync, CacheBytes: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	s, err := e.OpenShard(0, 0, []routing.Span{{Start: 0, End: 1024}})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ops := make([]Op, 0, 1000)
	for i := range docs {
		id := fmt.Sprintf("doc-%09d", i)
		ops = append(ops, Op{Kind: OpIndex, Root: 0, Key: routing.Key(uint32(routing.Hash(id)) % 1024), ID: id, Source: randomSource(rng)})
		if len(ops) == cap(ops) || i == docs-1 {
			if _, err := s.Write(ops, nil); err != nil {
				b.Fatal(err)
			}
			ops = ops[:0]
		}
	}
	if err := s.st.db.Flush(); err != nil {
		b.Fatal(err)
	}
	return e, s
}

// BenchmarkCreateChild: checkpoint + open + excise of both sides of a
// 2-way split, for a 100 MiB and a ~1 GiB parent. Goal: 1 GiB / 100 MiB
// time ratio <= 1.5, and bytes copied <= 1 % of the parent.
func BenchmarkCreateChild(b *testing.B) {
	for _, size := range []struct {
		name string
		docs int
	}{{"100MiB", 100 << 10}, {"1GiB", 1 << 20}} {
		b.Run("parent="+size.name, func(b *testing.B) {
			e, parent := loadParent(b, b.TempDir(), size.docs)
			defer e.Close()
			settle(b, parent)
			usage, _ := e.DiskUsage()
			parent.HoldLog()
			var copied, linked int64
			n := 0
			for b.Loop() {
				child, stats, err := e.CreateChild(parent, 1, routing.Span{Start: 512, End: 1024})
				if err != nil {
					b.Fatal(err)
				}
				// The parent's side of the split: drop the moved span from a
				// second child standing in for the parent (the real parent
				// must stay whole for the next iteration).
				other, _, err := e.CreateChild(parent, 2, routing.Span{Start: 0, End: 1024})
				if err != nil {
					b.Fatal(err)
				}
				if err := e.DropSpans(other, []routing.Span{{Start: 512, End: 1024}}, DropExcise); err != nil {
					b.Fatal(err)
				}
				copied, linked, n = copied+stats.Copied, linked+stats.Linked, n+1
				b.StopTimer()
				if err := e.DestroyShard(child.ID()); err != nil {
					b.Fatal(err)
				}
				if err := e.DestroyShard(other.ID()); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(usage.Live)/(1<<20), "parent-MiB")
			b.ReportMetric(float64(copied)/float64(n)/(1<<20), "copied-MiB/op")
			b.ReportMetric(float64(linked)/float64(n)/(1<<20), "linked-MiB/op")
			b.ReportMetric(100*float64(copied)/float64(n)/float64(usage.Live), "copied-%")
		})
	}
}

// BenchmarkDropHalf: remove half of a ~1 GiB store with Excise vs a range
// tombstone plus compaction. Each iteration works on a fresh hard-linked
// checkpoint of the loaded store.
func BenchmarkDropHalf(b *testing.B) {
	dir := b.TempDir()
	e, parent := loadParent(b, filepath.Join(dir, "parent"), 1<<20)
	defer e.Close()
	settle(b, parent)
	parent.HoldLog()
	for _, how := range []DropMethod{DropExcise, DropRangeDeleteCompact} {
		b.Run("method="+how.String(), func(b *testing.B) {
			var written uint64
			n := 0
			for b.Loop() {
				b.StopTimer()
				c, _, err := e.CreateChild(parent, 1, routing.Span{Start: 0, End: 1024})
				if err != nil {
					b.Fatal(err)
				}
				before := c.st.bytesWritten()
				b.StartTimer()
				if err := e.DropSpans(c, []routing.Span{{Start: 0, End: 512}}, how); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				written += c.st.bytesWritten() - before
				n++
				if err := e.DestroyShard(1); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(written)/float64(n)/(1<<20), "written-MiB/op")
		})
	}
}

// BenchmarkIngest compares our write path with raw Pebble: 1 KiB documents
// in batches of 16, fsync per batch (request durability), 8 concurrent
// writers. Goal: ours / raw >= 0.8 in docs/s.
func BenchmarkIngest(b *testing.B) {
	const batch = 16
	b.Run("store=ours", func(b *testing.B) {
		e, err := Open(Options{Dir: b.TempDir(), FS: vfs.Default, Durability: DurabilityRequest})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		s, _ := e.OpenShard(0, 0, []routing.Span{{Start: 0, End: 1024}})
		var next atomic.Int64
		b.SetBytes(batch * docBytes)
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			rng := rand.New(rand.NewPCG(uint64(next.Add(1)), 7))
			src := randomSource(rng)
			ops := make([]Op, batch)
			for pb.Next() {
				for i := range ops {
					id := fmt.Sprintf("doc-%012d", next.Add(1))
					ops[i] = Op{Kind: OpIndex, Key: routing.Key(rng.IntN(1024)), ID: id, Source: src}
				}
				if _, err := s.Write(ops, nil); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("store=raw-pebble", func(b *testing.B) {
		opts := storeOptions{fs: vfs.Default, cache: pebble.NewCache(64 << 20), fileCache: pebble.NewFileCache(16, 1000),
			durability: DurabilityRequest}.withNopLogger()
		db, err := pebble.Open(b.TempDir(), opts.pebbleOptions(nil, nil))
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		var next atomic.Int64
		b.SetBytes(batch * docBytes)
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			rng := rand.New(rand.NewPCG(uint64(next.Add(1)), 7))
			src := randomSource(rng)
			var key []byte
			for pb.Next() {
				wb := db.NewBatch()
				for range batch {
					id := fmt.Sprintf("doc-%012d", next.Add(1))
					key = DocKey(key, 0, routing.Key(rng.IntN(1024)), id)
					_ = wb.Set(key, src, nil)
				}
				if err := db.Apply(wb, pebble.Sync); err != nil {
					b.Error(err)
					return
				}
				_ = wb.Close()
			}
		})
	})
}

// settle waits (at most a minute) until the parent has no compaction
// running and at most two L0 tables, so that measurements do not include
// compaction debt left by the load.
func settle(b *testing.B, s *Shard) {
	b.Helper()
	for range 600 {
		m := s.st.db.Metrics()
		if m.Compact.NumInProgress == 0 && m.Levels[0].TablesCount <= 2 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.Logf("store did not settle within a minute")
}

// BenchmarkWritePath is the cost of one single-document write on the
// shard's write path without the fsync (async durability, in-memory
// filesystem), so that per-write bookkeeping such as the load statistics
// shows up instead of the disk. Run before and after a change to the path:
//
//	go test -run '^$' -bench WritePath -benchmem -count 10 ./storage
func BenchmarkWritePath(b *testing.B) {
	e, err := Open(Options{Dir: "bench", FS: vfs.NewMem(), Durability: DurabilityAsync})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	s, err := e.OpenShard(0, 0, []routing.Span{{Start: 0, End: 1024}})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	src := randomSource(rng)[:256]
	ids := make([]string, 4096)
	for i := range ids {
		ids[i] = fmt.Sprintf("doc-%09d", i)
	}
	ops := make([]Op, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		id := ids[i%len(ids)]
		ops[0] = Op{Kind: OpIndex, Key: routing.Key(i % 1024), ID: id, Routing: "tenant-1", Source: src}
		if _, err := s.Write(ops, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMergeTarget: a merge target of two siblings of a ~200 MiB
// parent; the smaller sibling's documents are built into tables and
// ingested. Reports what was written per merge.
func BenchmarkMergeTarget(b *testing.B) {
	e, parent := loadParent(b, b.TempDir(), 200<<10)
	defer e.Close()
	settle(b, parent)
	parent.HoldLog()
	lo, _, err := e.CreateChild(parent, 1, routing.Span{Start: 0, End: 512})
	if err != nil {
		b.Fatal(err)
	}
	hi, _, err := e.CreateChild(parent, 2, routing.Span{Start: 512, End: 1024})
	if err != nil {
		b.Fatal(err)
	}
	lo.HoldLog()
	hi.HoldLog()
	var copied int64
	n := 0
	for b.Loop() {
		t, stats, err := e.CreateMergeTarget([]*Shard{lo, hi}, 3, routing.Span{Start: 0, End: 1024})
		if err != nil {
			b.Fatal(err)
		}
		copied, n = copied+stats.Copied, n+1
		b.StopTimer()
		if err := e.DestroyShard(t.ID()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(copied)/float64(n)/(1<<20), "copied-MiB/op")
}
