package experiment

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/internal/loadgen"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// TestFenceFloorProbe is a manual probe (skipped unless
// SHARDSPLIT_FENCE_PROBE names a dataset cache directory, as
// SHARDSPLIT_SCALE_PROBE does): what does a fence cost the writers when it
// does no work at all? Every handoff fences its parent, so this is the
// floor under the longest stall of any split that fences, measured under
// the probe's load (issue 15's: 64 writers, 5,000 fsync'd writes/s) on the
// probe's dataset (SHARDSPLIT_SCALE_DOCS).
//
// After the parent's first own flush and 2 s of load, rounds of windows
// SHARDSPLIT_FENCE_WINDOW long (default 23 ms, an aligned 100 MiB split's
// length on the machine it was written on) follow each other, 150 ms
// apart, in turn:
//   - steady: nothing happens (the denominator, in the same run);
//   - fence: in the window's middle the parent's apply lock is taken (the
//     writes in flight drain) and released at once;
//   - fence+sync: the same, held over a synced write to the parent's WAL,
//     as a handoff holds it over work that ends with an fsync.
//
// The probe reports each kind's median and range of the window's longest
// stall, and the ratio to steady. The goal asks a split's longest
// stall to be at most 1.25 times the steady windows'.
func TestFenceFloorProbe(t *testing.T) {
	cache := os.Getenv("SHARDSPLIT_FENCE_PROBE")
	if cache == "" {
		t.Skip("SHARDSPLIT_FENCE_PROBE not set")
	}
	window := 23 * time.Millisecond
	if w := os.Getenv("SHARDSPLIT_FENCE_WINDOW"); w != "" {
		var err error
		if window, err = time.ParseDuration(w); err != nil {
			t.Fatalf("SHARDSPLIT_FENCE_WINDOW=%q: %v", w, err)
		}
	}
	rounds := 30
	if r := os.Getenv("SHARDSPLIT_FENCE_ROUNDS"); r != "" {
		var err error
		if rounds, err = strconv.Atoi(r); err != nil || rounds < 1 {
			t.Fatalf("SHARDSPLIT_FENCE_ROUNDS=%q: want a positive count", r)
		}
	}
	cfg, d := probeDataset(t, cache)
	runDir := filepath.Join(cache, "fence-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := d.Clone(runDir); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(runDir)
	eng, err := storage.Open(storage.Options{Dir: runDir, Layout: cfg.Layout, Durability: storage.DurabilityRequest})
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(node.Config{Engine: eng})
	if err != nil {
		_ = eng.Close()
		t.Fatal(err)
	}
	defer n.Close()
	const parent = routing.ShardID(0)
	shard, ok := n.ShardStore(parent)
	if !ok {
		t.Fatalf("no shard %d", parent)
	}
	load := cfg.Load
	load.Rate = 5000
	load.Moving = func(string, string) bool { return true } // one shard: every write
	load.Defaults()
	sink := &routerSink{n: n, first: n.Table(), counts: make([]int, load.Writers)}
	for range load.Writers {
		sink.routers = append(sink.routers, node.NewRouter(n, n.Table(), node.RouterConfig{MaxRetries: 16}))
	}
	out := &Outcome{}
	ctx := context.Background()
	run := startLoad(ctx, load, sink, readLoad{}, func() int64 { return 0 }, out)
	warm, warmed := awaitFirstFlush(ctx, n, parent, WarmFlush)
	t.Logf("warmed: waited %.1f ms for the parent's first own flush (it came: %v)", ms(warm), warmed)
	time.Sleep(2 * time.Second)

	kinds := []struct {
		name string
		act  func() error
	}{
		{"steady", func() error { return nil }},
		{"fence", func() error {
			f, err := n.Fence(parent, time.Second)
			if err != nil {
				return err
			}
			f.Release()
			return nil
		}},
		{"fence+sync", func() error {
			f, err := n.Fence(parent, time.Second)
			if err != nil {
				return err
			}
			defer f.Release()
			return shard.Sync()
		}},
	}
	type span struct{ from, to time.Duration }
	spans := make([][]span, len(kinds))
	for range rounds {
		for k, kind := range kinds {
			time.Sleep(150 * time.Millisecond)
			from := run.since()
			time.Sleep(window / 2)
			if kind.name != "steady" {
				if err := kind.act(); err != nil {
					run.stopLoad(out)
					run.stopDisk()
					t.Fatalf("%s: %v", kind.name, err)
				}
			}
			time.Sleep(time.Until(run.start.Add(from + window)))
			spans[k] = append(spans[k], span{from, run.since()})
		}
	}
	run.stopLoad(out)
	run.stopDisk()
	t.Logf("%d writes acknowledged over %.1f s, %d windows of %s per kind", len(out.Load.Records), out.End.Seconds(), rounds, window)
	var steadyMedian time.Duration
	for k, kind := range kinds {
		var stalls []time.Duration
		for _, s := range spans[k] {
			stalls = append(stalls, loadgen.MaxStall(out.Load.Records, s.from, s.to))
		}
		slices.Sort(stalls)
		med := stalls[len(stalls)/2]
		if k == 0 {
			steadyMedian = med
		}
		t.Logf("%-10s longest stall per window: median %.2f ms (%.2f× steady), range %.2f–%.2f ms",
			kind.name, ms(med), float64(med)/float64(max(steadyMedian, 1)), ms(stalls[0]), ms(stalls[len(stalls)-1]))
	}
}
