package storage

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/routing"
)

// BenchmarkIDIndexWrite is what the `_id` index costs a write, one write
// per op into a shard of root 2 that holds 20,000 documents of 256 bytes
// (async durability, an in-memory filesystem: the CPU and Pebble work,
// without the fsync a request-durable write waits for). Each write is an
// update of a random one of them or an insert of a new _id (half and
// half). Cases, side by side in one run:
//
//	off/unrouted            no `_id` index (IDIndexOff): the layout before it
//	on/unrouted-none-routed the store holds no routed document: no lookup
//	on/unrouted-routed-held the store holds routed documents: one index seek
//	off/routed              routed writes, no index
//	on/routed               routed writes: an index seek, the home's point read, the entry
//
// It reports the writes' p99 latency beside ns/op. Medians of five runs,
// the cases alternating (-count would repeat each case before the next):
//
//	for i in 1 2 3 4 5; do go test -run '^$' -bench BenchmarkIDIndexWrite -benchtime 30000x ./storage; done
func BenchmarkIDIndexWrite(b *testing.B) {
	const docs = 20000
	ids := idsInRoot(2, 2*docs)
	var tenants []string // routing values into root 2
	for i := 0; len(tenants) < 100; i++ {
		if r := fmt.Sprintf("tenant-%d", i); testSettings.Place("x", r).Root == 2 {
			tenants = append(tenants, r)
		}
	}
	op := func(i int, routed bool, source []byte) Op {
		id := ids[i]
		if !routed {
			return routedOp(id, "", OpIndex, string(source))
		}
		// Each id keeps its tenant: a routed update replaces its own key.
		return routedOp(id, tenants[i%len(tenants)], OpIndex, string(source))
	}
	for _, c := range []struct {
		name           string
		index          IDIndexBuild
		routedLoad     bool // the documents loaded first are routed
		routedWrites   bool
		someRoutedHeld bool // one routed document among the loaded
	}{
		{"off/unrouted", IDIndexOff, false, false, false},
		{"on/unrouted-none-routed", IDIndexRebuild, false, false, false},
		{"on/unrouted-routed-held", IDIndexRebuild, false, false, true},
		{"off/routed", IDIndexOff, true, true, false},
		{"on/routed", IDIndexRebuild, true, true, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			e, err := Open(Options{Dir: "/data", FS: vfs.NewMem(), Durability: DurabilityAsync, CacheBytes: 64 << 20, IDIndex: c.index})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			s, err := e.OpenShard(2, 2, []routing.Span{rootSpan(2)})
			if err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			src := make([]byte, 256)
			for i := range src {
				src[i] = byte('a' + rng.IntN(26))
			}
			var batch []Op
			for i := range docs {
				batch = append(batch, op(i, c.routedLoad || c.someRoutedHeld && i == 0, src))
				if len(batch) == 500 || i == docs-1 {
					if _, err := s.Write(batch, nil); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
			if err := s.st.db.Flush(); err != nil {
				b.Fatal(err)
			}
			ops := make([]Op, b.N)
			next := docs
			for i := range ops {
				k := rng.IntN(docs)
				if rng.IntN(2) == 0 && next < len(ids) {
					k, next = next, next+1
				}
				ops[i] = op(k, c.routedWrites, src)
			}
			lat := make([]time.Duration, b.N)
			b.ResetTimer()
			for i := range ops {
				start := time.Now()
				if _, err := s.Write(ops[i:i+1], nil); err != nil {
					b.Fatal(err)
				}
				lat[i] = time.Since(start)
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}
