package storage

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/routing"
)

// TestLoadSample checks the counters and the key sample: one write in
// SampleEvery is offered, the reservoir is bounded, drained by each
// LoadSample, and holds the routing value (or the _id when unrouted).
func TestLoadSample(t *testing.T) {
	cases := []struct {
		name        string
		batches     []int // writes per Write call
		wantSampled uint64
		wantKeys    int
	}{
		{name: "fewer than SampleEvery", batches: []int{SampleEvery - 1}, wantSampled: 0, wantKeys: 0},
		{name: "exactly SampleEvery", batches: []int{SampleEvery}, wantSampled: 1, wantKeys: 1},
		{name: "single writes", batches: repeat(1, 10*SampleEvery), wantSampled: 10, wantKeys: 10},
		{name: "batches straddle the sampling points", batches: []int{3, 7, 11, 2, 9}, wantSampled: 32 / SampleEvery, wantKeys: 32 / SampleEvery},
		{name: "reservoir bounded", batches: repeat(SampleEvery, 3*ReservoirSize), wantSampled: 3 * ReservoirSize, wantKeys: ReservoirSize},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
			defer e.Close()
			s, err := e.OpenShard(0, 0, []routing.Span{{Start: 0, End: 1024}})
			if err != nil {
				t.Fatal(err)
			}
			total := 0
			for _, n := range c.batches {
				ops := make([]Op, n)
				for i := range ops {
					ops[i] = Op{Kind: OpIndex, Key: routing.Key(total % 1024), ID: fmt.Sprintf("d%d", total), Source: []byte("x")}
					if total%3 == 0 {
						ops[i].Routing = "tenant-a"
					}
					total++
				}
				if _, err := s.Write(ops, nil); err != nil {
					t.Fatal(err)
				}
			}
			got := s.LoadSample(nil)
			if got.Writes != uint64(total) || got.Sampled != c.wantSampled || len(got.Keys) != c.wantKeys {
				t.Fatalf("writes %d sampled %d keys %d, want %d %d %d", got.Writes, got.Sampled, len(got.Keys), total, c.wantSampled, c.wantKeys)
			}
			for _, k := range got.Keys {
				// Sampled writes are numbers SampleEvery, 2·SampleEvery, …
				// (write n has id d(n-1)); every third is routed.
				var n int
				if k.Value == "tenant-a" {
					continue
				}
				if _, err := fmt.Sscanf(k.Value, "d%d", &n); err != nil || (n+1)%SampleEvery != 0 || n%3 == 0 || routing.Key(n%1024) != k.Key {
					t.Errorf("sample %+v is not a sampled write", k)
				}
			}
			again := s.LoadSample(nil)
			if again.Sampled != 0 || len(again.Keys) != 0 || again.Writes != uint64(total) {
				t.Fatalf("second LoadSample: %+v, want the counters and an empty sample", again)
			}
		})
	}
}

func repeat(v, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// TestLoadSampleIsUniform: a key that takes 30% of the writes takes about
// 30% of the reservoir.
func TestLoadSampleIsUniform(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	s, _ := e.OpenShard(0, 0, []routing.Span{{Start: 0, End: 1024}})
	for i := range 40000 {
		k := routing.Key(i % 1000)
		if i%10 < 3 {
			k = 7
		}
		if _, err := s.Write([]Op{{Kind: OpIndex, Key: k, ID: fmt.Sprintf("d%d", i%500), Source: []byte("x")}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	got := s.LoadSample(nil)
	hot := 0
	for _, k := range got.Keys {
		if k.Key == 7 {
			hot++
		}
	}
	if share := float64(hot) / float64(len(got.Keys)); share < 0.2 || share > 0.4 {
		t.Fatalf("hot key has %.2f of the sample, want about 0.3", share)
	}
}

// TestLoadCountersDoNotAllocate: the write path's bookkeeping allocates
// nothing, sampled or not.
func TestLoadCountersDoNotAllocate(t *testing.T) {
	var l loadStats
	l.rng = 1
	ops := []Op{{Key: 1, ID: "a", Routing: "r"}, {Key: 2, ID: "b"}, {Key: 3, ID: "c"}}
	if n := testing.AllocsPerRun(1000, func() { l.countWrites(ops) }); n != 0 {
		t.Fatalf("countWrites allocates %.1f times per call", n)
	}
}

// TestReadsCountedAndSizeEstimated: gets and scans count as reads, and the
// size estimate grows once documents are flushed.
func TestReadsCountedAndSizeEstimated(t *testing.T) {
	forLayouts(t, func(t *testing.T, layout Layout) {
		e := openTestEngine(t, vfs.NewMem(), layout)
		defer e.Close()
		s, _ := e.OpenShard(0, 0, []routing.Span{{Start: 0, End: 1024}})
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range 2000 {
			src := randomSource(rng) // incompressible, so the estimate is about the raw size
			if _, err := s.Write([]Op{{Kind: OpIndex, Key: routing.Key(i % 1024), ID: fmt.Sprintf("d%d", i), Source: src}}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := s.Get(0, 5, "d5"); err != nil {
			t.Fatal(err)
		}
		if err := s.Scan(func(Doc) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if got := s.LoadSample(nil); got.Reads != 2 || got.Writes != 2000 {
			t.Fatalf("reads %d writes %d, want 2 and 2000", got.Reads, got.Writes)
		}
		if err := s.st.db.Flush(); err != nil {
			t.Fatal(err)
		}
		size, err := s.EstimateSize()
		if err != nil {
			t.Fatal(err)
		}
		if size < 1000*1024 || size > 4000*1024 {
			t.Fatalf("estimated size %d bytes for 2000 documents of 1 KiB", size)
		}
	})
}

// BenchmarkCountWrites is the statistics' own cost per single-document
// write (the counter add, and one time in SampleEvery the reservoir).
func BenchmarkCountWrites(b *testing.B) {
	var l loadStats
	l.rng = 1
	ops := []Op{{Key: 1, ID: "a", Routing: "r"}}
	b.ReportAllocs()
	for range b.N {
		l.countWrites(ops)
	}
}
