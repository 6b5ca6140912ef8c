package storage

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardsplit/shardsplit/routing"
)

// TestLoadSample checks the counters and the key sample: about one write
// in SampleEvery is offered, the reservoir is bounded, drained by each
// LoadSample, and holds the routing value (or the _id when unrouted).
func TestLoadSample(t *testing.T) {
	cases := []struct {
		name    string
		batches []int // writes per Write call
	}{
		{name: "one write", batches: []int{1}},
		{name: "single writes", batches: repeat(1, 100*SampleEvery)},
		{name: "batches", batches: []int{3, 7, 11, 2, 9, 500, 1, 1}},
		{name: "more than the reservoir holds", batches: repeat(SampleEvery, 3*ReservoirSize)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
			defer e.Close()
			s := openShard(t, e, 0, 0, routing.Span{Start: 0, End: 1024})
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
			// Binomial(total, 1/SampleEvery): mean ± 5 standard deviations.
			mean := float64(total) / SampleEvery
			sd := math.Sqrt(mean * (1 - 1.0/SampleEvery))
			if got.Writes != uint64(total) || math.Abs(float64(got.Sampled)-mean) > 5*sd+1 || len(got.Keys) != min(int(got.Sampled), ReservoirSize) {
				t.Fatalf("writes %d sampled %d keys %d; want %d writes, about %.0f sampled, min(sampled, %d) keys",
					got.Writes, got.Sampled, len(got.Keys), total, mean, ReservoirSize)
			}
			for _, k := range got.Keys {
				var n int
				if k.Value == "tenant-a" {
					continue
				}
				if _, err := fmt.Sscanf(k.Value, "d%d", &n); err != nil || n%3 == 0 || routing.Key(n%1024) != k.Key {
					t.Errorf("sample %+v is not a write", k)
				}
			}
			again := s.LoadSample(nil)
			if again.Sampled != 0 || len(again.Keys) != 0 || again.Writes != uint64(total) {
				t.Fatalf("second LoadSample: %+v, want the counters and an empty sample", again)
			}
		})
	}
}

// TestLoadSampleDoesNotAlias: two keys written alternately are both
// sampled, about equally (sampling every SampleEvery-th write would see
// only one of them).
func TestLoadSampleDoesNotAlias(t *testing.T) {
	e := openTestEngine(t, vfs.NewMem(), LayoutPerShard)
	defer e.Close()
	s, _ := e.OpenShard(0, 0, []routing.Span{{Start: 0, End: 1024}})
	for i := range 2000 {
		if _, err := s.Write([]Op{{Kind: OpIndex, Key: routing.Key(9 + 5*(i%2)), ID: fmt.Sprintf("d%d", i%100), Source: []byte("x")}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	by := map[routing.Key]int{}
	got := s.LoadSample(nil)
	for _, k := range got.Keys {
		by[k.Key]++
	}
	if share := float64(by[9]) / float64(len(got.Keys)); share < 0.35 || share > 0.65 {
		t.Fatalf("alternating keys 9 and 14 sampled %v", by)
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
	ops := make([]Op, 64) // some are sampled, some not
	for i := range ops {
		ops[i] = Op{Key: routing.Key(i), ID: "a", Routing: "r"}
	}
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
