package experiment

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/baseline"
	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/node"
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
	// Reads is the read load, through the alias (zero: none).
	Reads loadgen.ReadConfig
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
	written := c.BytesWritten()
	reads := readLoad{cfg: cfg.Reads, reader: newNodeReader(func() (*node.Node, error) {
		ix, err := c.Resolve("alias")
		if err != nil {
			return nil, err
		}
		return ix.Node, nil
	})}
	load := startLoad(ctx, cfg.Load, sink, reads, c.DiskUsage, out)
	start := load.start
	sleepCtx(ctx, cfg.Steady)
	var procErr error
	var rep baseline.ProcedureReport
	if ctx.Err() == nil {
		out.WindowStart = time.Since(start)
		req := baseline.ResizeRequest{Op: routing.Split, Source: "source", Target: "target",
			TargetShards: cfg.Factor * src.Settings().Shards, Cleanup: cfg.Cleanup}
		rep, procErr = c.Procedure("alias", req, false)
		out.WindowEnd = time.Since(start)
		for _, s := range rep.Steps {
			out.Phases = append(out.Phases, Phase{Name: s.Name, Start: s.Start.Sub(start), End: s.End.Sub(start)})
			switch s.Name {
			case "resize":
				out.CleanupStart, out.CleanupEnd = s.Start.Sub(start), s.End.Sub(start)
			case "swap-alias": // the writers' wait ends; a merge step runs after it
				out.WindowEnd = s.End.Sub(start)
			case "merge":
				out.MergeStart, out.MergeEnd = s.Start.Sub(start), s.End.Sub(start)
			}
		}
		out.CleanupWritten, out.CleanupDeleted = rep.Resize.CleanupWrites, rep.Resize.Deleted
		out.CleanupMarked, out.LuceneMergeBytes, out.MergeWritten = rep.Resize.Marked, rep.Resize.KeptBytes, rep.MergeWrites
		if procErr == nil {
			sleepCtx(ctx, cfg.After)
		}
	}
	load.stopLoad(out)
	// Count the bytes written before the source is deleted: its engine's
	// counters go with it.
	out.BytesWritten = c.BytesWritten() - written
	if procErr == nil && ctx.Err() == nil {
		if err := c.DeleteIndex("source"); err != nil {
			return out, err
		}
		out.Phases = append(out.Phases, Phase{Name: "delete-source", Start: time.Since(start), End: time.Since(start)})
	}
	load.finishDisk(c.DiskUsage, out)
	if procErr != nil {
		return out, fmt.Errorf("experiment: new-index split: %w", procErr)
	}
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	r := rep.Resize
	cleaned := fmt.Sprintf("%d foreign documents deleted", r.Deleted)
	if cfg.Cleanup == baseline.CleanupMark {
		cleaned = fmt.Sprintf("every document routed, %d foreign ones marked deleted", r.Marked)
	}
	out.Notes = append(out.Notes, fmt.Sprintf("_split %d -> %d shards (%s cleanup): link %v, cleanup %v (%s, %.1f MiB written), open %v; writes blocked %v",
		src.Settings().Shards, r.Target.Shards, cfg.Cleanup, r.Link.Round(time.Millisecond), r.Cleanup.Round(time.Millisecond),
		cleaned, float64(r.CleanupWrites)/(1<<20), r.Open.Round(time.Millisecond), rep.Blocked.Round(time.Millisecond)))
	if cfg.Cleanup == baseline.CleanupMark {
		out.Notes = append(out.Notes, fmt.Sprintf("merge after the alias swap: %v, %.1f MiB written by the targets' stores (the writers' flushes and compactions on them included); Lucene's merges would rewrite the %.1f MiB of documents the targets keep",
			rep.Merge.Round(time.Millisecond), float64(rep.MergeWrites)/(1<<20), float64(r.KeptBytes)/(1<<20)))
	}
	target, _ := c.Index("target")
	out.Verify, err = Verify(target.Node.Table(), searcher{target.Node}, cfg.Dataset, out.Load)
	return out, err
}
