package tests

// The cluster benchmark's split scenario at its smallest: three serve
// processes on loopback, a replicated shard of a few MiB split in two
// under a light load, every strategy either measured or refused with the
// cluster's reason, and the processes stopped.

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/shardsplit/shardsplit/lab/clusterbench"
)

func TestClusterbenchSplitMeasuresEachStrategyOrSaysItWasRefused(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("starts three serve processes") // see TestClusterOfProcessesFailsOverAndRecovers
	}
	bin := buildSplitdemo(t)
	dir := filepath.Join(t.TempDir(), "cluster")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := clusterbench.Start(bin, dir, 3, clusterbench.Options{LogLevel: "error"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	runs, err := clusterbench.Split(ctx, c, clusterbench.SplitConfig{Strategies: clusterbench.Strategies, ParentSize: 2 << 20, Runs: 1,
		Load:  clusterbench.LoadConfig{Rate: 200, Writers: 8, Warmup: 500 * time.Millisecond, Duration: time.Second},
		After: 500 * time.Millisecond, Within: 2 * time.Minute}, func(s string) { t.Log(s) })
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != len(clusterbench.Strategies) {
		t.Fatalf("%d runs for %d strategies: %+v", len(runs), len(clusterbench.Strategies), runs)
	}
	for _, r := range runs {
		if r.Refused != "" {
			if r.Strategy == clusterbench.StrategyRecover {
				t.Errorf("the default strategy was refused: %s", r.Refused)
			}
			continue
		}
		if r.RolledBack != "" {
			t.Errorf("%s: the split was rolled back: %s", r.Strategy, r.RolledBack)
			continue
		}
		if len(r.Children) != 2 || len(r.Windows) != 2 || len(r.Gaps) != 2 {
			t.Errorf("%s: children %v, windows %v, gaps %v: want two of each", r.Strategy, r.Children, r.Windows, r.Gaps)
		}
		if r.Acked == 0 || r.SteadyOps <= 0 || r.ToGreen <= 0 || r.ToHandoff <= 0 || r.ToHandoff > r.ToGreen {
			t.Errorf("%s: acked %d, steady %.0f/s, hand-off %v, green %v", r.Strategy, r.Acked, r.SteadyOps, r.ToHandoff, r.ToGreen)
		}
		if r.HandoffBlocked <= 0 || r.TransportBytes == 0 || r.DiskBefore == 0 {
			t.Errorf("%s: the nodes' counters read blocked %v, %d bytes sent, disk %d", r.Strategy, r.HandoffBlocked, r.TransportBytes, r.DiskBefore)
		}
		if r.Strategy == clusterbench.StrategyRecover && r.RecoveryBytes < uint64(r.ParentBytes) {
			t.Errorf("recover: peer recoveries sent %d bytes for two child replicas of a %d-byte parent", r.RecoveryBytes, r.ParentBytes)
		}
	}
}
