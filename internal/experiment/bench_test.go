package experiment

// BenchmarkSplitUnderLoad: split a ~100 MiB and a ~1 GiB parent in two
// under 5,000 writes/s of 1 KiB documents with request durability (an
// fsync per write batch), 16 writers. Run with
//
//	go test -run '^$' -bench SplitUnderLoad -benchtime 1x -count 5 -timeout 1h ./internal/experiment
//
// Reported per run: the longest write stall of writes aimed at the parent
// (stall-ms, writer-observed; node-stall-ms, the parent's apply lock held at
// handoff), write throughput in the steady window and in the split window,
// and the split's duration (split-ms: request to the end of handoff).

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/internal/loadgen"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

func BenchmarkSplitUnderLoad(b *testing.B) {
	for _, size := range []struct {
		name string
		docs int
	}{{"100MiB", 100 << 10}, {"1GiB", 1 << 20}} {
		b.Run("parent="+size.name, func(b *testing.B) {
			cfg := DatasetConfig{
				Mode:     routing.ModePartition,
				Settings: routing.Settings{Shards: 1, RoutingShards: 1024, PartitionSize: 1},
				Layout:   storage.LayoutPerShard,
				Docs:     size.docs,
				Load:     loadgen.Config{Writers: 16, IDsPerWriter: size.docs / 16, DocSize: 1024, Seed: 1},
			}
			dir := b.TempDir()
			d, err := BuildDataset(filepath.Join(dir, "dataset"), cfg, zap.NewNop(), nil)
			if err != nil {
				b.Fatal(err)
			}
			time.Sleep(2 * time.Second) // let the host settle after the load
			run := 0
			for b.Loop() {
				run++
				runDir := filepath.Join(dir, "run", string(rune('a'+run)))
				if err := d.Clone(runDir); err != nil {
					b.Fatal(err)
				}
				load := cfg.Load
				load.Rate = 5000
				out, err := RunInPlace(context.Background(), InPlaceConfig{
					Dir: runDir, Dataset: d, Durability: storage.DurabilityRequest, Load: load,
					Splits: []splitter.Plan{{Parent: 0, Ways: 2}}, Steady: 3 * time.Second, After: time.Second,
				})
				if err != nil {
					b.Fatal(err)
				}
				if !out.Verify.OK() {
					b.Fatalf("verification failed: %+v", out.Verify)
				}
				steady := loadgen.Summarize(out.Load.Records, out.WindowStart-2*time.Second, out.WindowStart)
				during := loadgen.Summarize(out.Load.Records, out.WindowStart, out.WindowEnd)
				b.ReportMetric(float64(loadgen.MaxStall(out.Load.Records, out.WindowStart, out.WindowEnd).Microseconds())/1000, "stall-ms")
				b.ReportMetric(float64(out.NodeStall.Microseconds())/1000, "node-stall-ms")
				b.ReportMetric(steady.OpsPerS, "steady-ops/s")
				b.ReportMetric(during.OpsPerS, "split-ops/s")
				b.ReportMetric(during.OpsPerS/steady.OpsPerS, "split/steady")
				b.ReportMetric(float64((out.WindowEnd-out.WindowStart).Microseconds())/1000, "split-ms")
				b.ReportMetric(float64(d.Bytes)/(1<<20), "parent-MiB")
			}
		})
	}
}
