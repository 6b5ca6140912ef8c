package experiment

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/shardsplit/shardsplit/baseline"
	"github.com/shardsplit/shardsplit/internal/loadgen"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

func smallDataset(t *testing.T, mode routing.Mode) *Dataset {
	t.Helper()
	cfg := DatasetConfig{
		Mode:     mode,
		Settings: routing.Settings{Shards: 4, RoutingShards: 256, PartitionSize: 1},
		Layout:   storage.LayoutPerShard,
		Docs:     4000,
		Load:     loadgen.Config{Writers: 8, IDsPerWriter: 400, DocSize: 256, Tenants: 4, HotShare: 0.3, Seed: 1},
	}
	d, err := BuildDataset(filepath.Join(t.TempDir(), "dataset"), cfg, zaptest.NewLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestInPlaceRunVerifies(t *testing.T) {
	for _, mode := range []routing.Mode{routing.ModePartition, routing.ModeOpenSearch} {
		t.Run(mode.String(), func(t *testing.T) {
			d := smallDataset(t, mode)
			dir := filepath.Join(t.TempDir(), "run")
			if err := d.Clone(dir); err != nil {
				t.Fatal(err)
			}
			load := d.Config.Load
			load.Rate = 2000
			out, err := RunInPlace(context.Background(), InPlaceConfig{
				Dir: dir, Dataset: d, Durability: storage.DurabilityRequest, Load: load,
				Splits: []splitter.Plan{{Parent: 0, Ways: 2}}, Steady: 200 * time.Millisecond, After: 200 * time.Millisecond,
				StaleEvery: 50,
			})
			if err != nil {
				t.Fatal(err)
			}
			if !out.Verify.OK() || out.Verify.Checked < 3000 {
				t.Fatalf("verification: %+v", out.Verify)
			}
			if out.WindowEnd <= out.WindowStart || len(out.Load.Records) < 200 {
				t.Fatalf("window [%v, %v], %d records", out.WindowStart, out.WindowEnd, len(out.Load.Records))
			}
			stall := loadgen.MaxStall(out.Load.Records, out.WindowStart, out.WindowEnd)
			t.Logf("%d writes, %d checked, stall %v (node %v), window %v, phases %v", len(out.Load.Records), out.Verify.Checked,
				stall, out.NodeStall, out.WindowEnd-out.WindowStart, out.Phases)
		})
	}
}

func TestNewIndexRunVerifies(t *testing.T) {
	d := smallDataset(t, routing.ModePartition)
	load := d.Config.Load
	load.Rate = 2000
	out, err := RunNewIndex(context.Background(), NewIndexConfig{
		Dir: filepath.Join(t.TempDir(), "cluster"), Dataset: d, Durability: storage.DurabilityRequest, Load: load,
		Factor: 2, Cleanup: baseline.CleanupPerDoc, Steady: 200 * time.Millisecond, After: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !out.Verify.OK() || out.Verify.Checked < 3000 {
		t.Fatalf("verification: %+v", out.Verify)
	}
	stall := loadgen.MaxStall(out.Load.Records, out.WindowStart, out.WindowEnd)
	if stall < 10*time.Millisecond {
		t.Errorf("new-index stall %v: writers should have waited for the whole block", stall)
	}
	t.Logf("%d writes, stall %v, window %v, %v", len(out.Load.Records), stall, out.WindowEnd-out.WindowStart, out.Notes)
}
