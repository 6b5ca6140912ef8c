package experiment

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/baseline"
	"github.com/shardsplit/shardsplit/internal/loadgen"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// NewIndexConfig configures a run of today's procedure: write block, _split
// to a new index, alias swap, unblock (and delete the source).
type NewIndexConfig struct {
	Dir        string // the cluster directory; the dataset is cloned into Dir/source
	Dataset    *Dataset
	Durability storage.Durability
	Load       loadgen.Config
	Factor     int // target shards = Factor x source shards
	Cleanup    baseline.Cleanup
	Steady     time.Duration
	After      time.Duration
	Logger     *zap.Logger
}

// aliasSink writes through the alias, one writer per load writer.
type aliasSink struct{ writers []*baseline.AliasWriter }

func (s *aliasSink) Write(w int, op loadgen.Op) (int, error) {
	return s.writers[w].Write(op.ID, op.Routing, op.Source, op.Delete)
}

// RunNewIndex clones the dataset as index "source" behind alias "alias",
// runs the load, and after the steady window runs the user procedure.
func RunNewIndex(ctx context.Context, cfg NewIndexConfig) (*Outcome, error) {
	out := &Outcome{Strategy: "newindex"}
	if cfg.Dataset.Config.Mode != routing.ModePartition {
		return nil, fmt.Errorf("experiment: the new-index baseline needs a partition-mode dataset")
	}
	if err := storage.CloneDir(nil, cfg.Dataset.Dir, filepath.Join(cfg.Dir, "source")); err != nil {
		return nil, err
	}
	c := baseline.NewCluster(baseline.Config{Dir: cfg.Dir, Durability: cfg.Durability, Logger: cfg.Logger})
	defer c.Close()
	src, err := c.OpenIndex("source")
	if err != nil {
		return nil, err
	}
	if err := c.PutAlias("alias", "source"); err != nil {
		return nil, err
	}
	cfg.Load.Defaults()
	sink := &aliasSink{}
	for range cfg.Load.Writers {
		sink.writers = append(sink.writers, c.NewAliasWriter("alias"))
	}
	out.DiskBefore = c.DiskUsage()
	out.DiskPeak = out.DiskBefore
	written := c.BytesWritten()
	stopPeak := watchDir(c, &out.DiskPeak)

	loadCtx, stopLoad := context.WithCancel(ctx)
	start := time.Now()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		out.Load = loadgen.Run(loadCtx, cfg.Load, sink, start)
	}()
	sleepCtx(ctx, cfg.Steady)
	var procErr error
	var rep baseline.ProcedureReport
	if ctx.Err() == nil {
		out.WindowStart = time.Since(start)
		req := baseline.ResizeRequest{Op: routing.Split, Source: "source", Target: "target",
			TargetShards: cfg.Factor * src.Settings().Shards, Cleanup: cfg.Cleanup}
		// The source's bytes written are lost when it is deleted: count them
		// first, at the moment the procedure ends.
		rep, procErr = c.Procedure("alias", req, false)
		for _, s := range rep.Steps {
			out.Phases = append(out.Phases, Phase{Name: s.Name, Start: s.Start.Sub(start), End: s.End.Sub(start)})
		}
		out.WindowEnd = time.Since(start)
		if procErr == nil {
			sleepCtx(ctx, cfg.After)
		}
	}
	out.End = time.Since(start)
	stopLoad()
	wg.Wait()
	out.BytesWritten = c.BytesWritten() - written
	if procErr == nil && ctx.Err() == nil {
		if err := c.DeleteIndex("source"); err != nil {
			return out, err
		}
		out.Phases = append(out.Phases, Phase{Name: "delete-source", Start: time.Since(start), End: time.Since(start)})
	}
	stopPeak()
	out.DiskAfter = c.DiskUsage()
	out.DiskPeak = max(out.DiskPeak, out.DiskAfter)
	if procErr != nil {
		return out, fmt.Errorf("experiment: new-index split: %w", procErr)
	}
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	r := rep.Resize
	out.Notes = append(out.Notes, fmt.Sprintf("_split %d -> %d shards (%s cleanup): link %v, cleanup %v (%d foreign documents deleted, %.1f MiB written), open %v; writes blocked %v",
		src.Settings().Shards, r.Target.Shards, cfg.Cleanup, r.Link.Round(time.Millisecond), r.Cleanup.Round(time.Millisecond),
		r.Deleted, float64(r.CleanupWrites)/(1<<20), r.Open.Round(time.Millisecond), rep.Blocked.Round(time.Millisecond)))
	target, _ := c.Index("target")
	out.Verify, err = Verify(target.Node.Table(), searcher{target.Node}, cfg.Dataset, out.Load)
	return out, err
}

// watchDir samples the cluster's disk usage every 100 ms.
func watchDir(c *baseline.Cluster, peak *int64) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	p := *peak
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				u := c.DiskUsage()
				mu.Lock()
				p = max(p, u)
				mu.Unlock()
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		mu.Lock()
		*peak = max(*peak, p)
		mu.Unlock()
	}
}
