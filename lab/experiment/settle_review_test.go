package experiment

import (
	"path/filepath"
	"testing"

	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// Review of f9314cf: BuildDataset accepted a nil logger before (storage.Open
// and node.Open default it to a no-op), and callers rely on that:
// findings' runStale passes Config.Logger, which a direct call leaves nil
// (TestStaleQuick). The settle's log line must not dereference it.
// Both layouts: the shared one polls one store through every shard.
func TestBuildDatasetAcceptsANilLogger(t *testing.T) {
	for _, layout := range []storage.Layout{storage.LayoutPerShard, storage.LayoutShared} {
		t.Run(layout.String(), func(t *testing.T) {
			cfg := DatasetConfig{
				Mode:     routing.ModePartition,
				Settings: routing.Settings{Shards: 2, RoutingShards: 256, PartitionSize: 1},
				Layout:   layout,
				Docs:     200,
				Load:     loadgen.Config{Writers: 2, IDsPerWriter: 100, DocSize: 64, Seed: 1},
			}
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("BuildDataset with a nil logger panicked: %v", r)
				}
			}()
			d, err := BuildDataset(filepath.Join(t.TempDir(), "dataset"), cfg, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if d.Settle < settleIdle {
				t.Errorf("settle %s, want at least the idle wait %s", d.Settle, settleIdle)
			}
		})
	}
}
