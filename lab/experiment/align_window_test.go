package experiment

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

// With several splits and AlignFlush, the window runs from the first
// split's start to the last handoff. A later split's wait for its own
// parent's flush must not sit unaccounted inside that window (the first
// split's wait is excluded from it; a later one's should not count as
// split time either).
func TestRunSplitsAlignedWindowHoldsNoLaterWait(t *testing.T) {
	d := smallDataset(t, routing.ModePartition)
	dir := filepath.Join(t.TempDir(), "run")
	if err := d.Clone(dir); err != nil {
		t.Fatal(err)
	}
	eng, err := storage.Open(storage.Options{Dir: dir, Layout: d.Config.Layout, Durability: storage.DurabilityRequest, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(node.Config{Engine: eng, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	// Shard 1 gets ~3 MiB unflushed and no writer: its wait runs to the bound.
	router := node.NewRouter(n, n.Table(), node.RouterConfig{})
	doc := []byte(fmt.Sprintf(`{"f":%q}`, strings.Repeat("x", 1024)))
	for i, put := 0, 0; put < 3000; i++ {
		id := fmt.Sprintf("big%d", i)
		if _, s := n.Table().Route(id, ""); s != 1 {
			continue
		}
		if _, err := router.Index(id, "", doc); err != nil {
			t.Fatal(err)
		}
		put++
	}
	const bound = 400 * time.Millisecond
	cfg := InPlaceConfig{Splits: []splitter.Plan{splitter.SplitPlan(0, 2), splitter.SplitPlan(1, 2)}, AlignFlush: bound, Logger: zaptest.NewLogger(t)}
	out := &Outcome{}
	if err := runSplits(context.Background(), n, cfg, time.Now(), out); err != nil {
		t.Fatal(err)
	}
	var inPhases time.Duration
	for _, p := range out.Phases {
		if p.End <= out.WindowEnd {
			inPhases += p.End - p.Start
		}
	}
	window := out.WindowEnd - out.WindowStart
	t.Logf("window %v, phases %v (sum %v), first wait %v", window, out.Phases, inPhases, out.AlignWait)
	if gap := window - inPhases; gap >= bound {
		t.Errorf("the window [%v, %v] holds %v outside any split phase: the second split's wait for its parent's own flush (bound %v) counts as split time",
			out.WindowStart, out.WindowEnd, gap, bound)
	}
}
