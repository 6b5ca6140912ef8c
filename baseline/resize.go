package baseline

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/storage"
)

// Cleanup says how a split target drops the documents it does not own.
type Cleanup uint8

const (
	// CleanupPerDoc deletes each foreign document with a point delete and
	// then compacts: a write per document (log, memtable, flush,
	// compaction), more than Lucene pays for the same deletes (a bit
	// each, CleanupMark).
	CleanupPerDoc Cleanup = iota + 1
	// CleanupRange drops the foreign routing-key spans in O(metadata):
	// what key-ordered storage allows.
	CleanupRange
	// CleanupMark is Lucene's: before the target opens, a scan that routes
	// every document against the target's metadata and marks the foreign
	// ones deleted without rewriting any (storage.Shard.MarkForeign: as
	// OpenSearch's StoreRecovery.addIndices runs IndexWriter.deleteDocuments
	// of a ShardSplittingQuery, which sets live-docs bits, and commits);
	// once the target serves, the merges that reclaim their space, as a
	// step of their own (Procedure's "merge", storage.Shard.ReclaimForeign).
	CleanupMark
)

func (c Cleanup) String() string {
	switch c {
	case CleanupPerDoc:
		return "per-doc"
	case CleanupRange:
		return "range"
	case CleanupMark:
		return "mark"
	}
	return fmt.Sprintf("Cleanup(%d)", uint8(c))
}

// ParseCleanup parses "mark", "per-doc" or "range".
func ParseCleanup(s string) (Cleanup, error) {
	for _, c := range []Cleanup{CleanupMark, CleanupPerDoc, CleanupRange} {
		if c.String() == s {
			return c, nil
		}
	}
	return 0, fmt.Errorf("baseline: unknown cleanup %q (want mark, per-doc or range)", s)
}

// ResizeRequest is a _split, _shrink or _clone request.
type ResizeRequest struct {
	Op           routing.ResizeOp
	Source       string
	Target       string
	TargetShards int // index.number_of_shards of the target; 0 = not given
	// TargetRoutingShards is index.number_of_routing_shards of the target
	// (0 = not given); only a split of a 1-shard index may give it.
	TargetRoutingShards int
	MaxShardSize        *int64 // shrink only
	Cleanup             Cleanup
	// AllShardsOnOneNode models the shrink prerequisite (true on this
	// one-node cluster unless a test says otherwise).
	AllShardsOnOneNode *bool
	// SourceShardDocs overrides the primary document count of each source
	// shard for the shrink's document limit (nil = count them).
	SourceShardDocs []int64
	// SourceStoreBytes overrides the primaries' store size that
	// max_shard_size is compared with (nil = measure it).
	SourceStoreBytes *int64
	// Settings a resize request may carry and OpenSearch refuses or checks.
	TargetPartitionSize                  int
	SourceSoftDeletes, TargetSoftDeletes *bool
}

// ResizeReport measures a resize.
type ResizeReport struct {
	Target  routing.Settings
	Link    time.Duration // hard-linked checkpoints of the sources
	Copy    time.Duration // shrink: copying the second and later sources
	Cleanup time.Duration // removing (or marking) foreign documents
	Open    time.Duration // opening the target index
	Deleted int           // foreign documents deleted (per-doc)
	Marked  int           // foreign documents marked deleted (mark)
	// KeptBytes is the key and value bytes of the documents the mark
	// scan found the targets keep: what Lucene's merges would rewrite.
	KeptBytes     int64
	Linked        int64
	Copied        int64
	CleanupWrites uint64
}

// Source is a resize's source index as its owner knows it.
type Source struct {
	Node         *node.Node
	WriteBlocked bool // any WRITE-level block (index.blocks.write, read_only)
}

// request builds the validation input from the cluster's state.
func (c *Cluster) request(req ResizeRequest) (routing.ResizeRequest, *Index, error) {
	src, srcOK := c.Index(req.Source)
	c.mu.RLock()
	tgtExists := c.taken(req.Target)
	c.mu.RUnlock()
	var s *Source
	if srcOK {
		s = &Source{Node: src.Node, WriteBlocked: src.WriteBlocked()}
	}
	r, err := validationRequest(req, s, tgtExists)
	return r, src, err
}

// validationRequest builds routing's validation input from the source (nil
// when it does not exist).
func validationRequest(req ResizeRequest, src *Source, targetExists bool) (routing.ResizeRequest, error) {
	onOneNode := true
	if req.AllShardsOnOneNode != nil {
		onOneNode = *req.AllShardsOnOneNode
	}
	r := routing.ResizeRequest{
		Op: req.Op, Source: req.Source, Target: req.Target, SourceExists: src != nil, TargetExists: targetExists,
		AllShardsOnOneNode: onOneNode, TargetShards: req.TargetShards, TargetRoutingShards: req.TargetRoutingShards,
		MaxShardSize: req.MaxShardSize, SourceShardDocs: req.SourceShardDocs, TargetPartitionSize: req.TargetPartitionSize,
		SourceSoftDeletes: req.SourceSoftDeletes, TargetSoftDeletes: req.TargetSoftDeletes,
	}
	if src == nil {
		return r, nil
	}
	r.SourceSettings = src.Node.Table().Settings()
	r.SourceWriteBlocked = src.WriteBlocked
	if r.SourceStoreBytes = req.SourceStoreBytes; req.MaxShardSize != nil && r.SourceStoreBytes == nil {
		// The target's shard count is computed from this size: one measured
		// in part would size the target wrongly.
		u, err := src.Node.Engine().DiskUsage()
		if err != nil {
			return r, fmt.Errorf("baseline: %s %s: measure the source's store size for max_shard_size: %w", req.Op, req.Source, err)
		}
		r.SourceStoreBytes = &u.Unique
	}
	if req.Op == routing.Shrink && r.SourceShardDocs == nil {
		for _, id := range src.Node.Table().ActiveShards() {
			s, err := src.Node.Store(id)
			if err != nil {
				return r, err
			}
			n := 0
			if err := s.Scan(func(storage.Doc) error { n++; return nil }); err != nil {
				return r, err
			}
			r.SourceShardDocs = append(r.SourceShardDocs, int64(n))
		}
	}
	return r, nil
}

// Prepare validates a resize in OpenSearch's order and with its messages
// (routing.PrepareResize) and returns the target's routing settings. src is
// nil when the source index does not exist. A source that is not in
// partition mode, or whose shards were split in place, cannot be resized by
// linking (its keys would need rewriting): that is an IllegalArgument error
// of ours, checked after OpenSearch's rules.
func Prepare(req ResizeRequest, src *Source, targetExists bool) (routing.Settings, error) {
	vreq, err := validationRequest(req, src, targetExists)
	if err != nil {
		return routing.Settings{}, err
	}
	target, err := routing.PrepareResize(vreq)
	if err != nil {
		return routing.Settings{}, err
	}
	if err := checkLinkable(req, src.Node.Table()); err != nil {
		return routing.Settings{}, err
	}
	return target, nil
}

// checkLinkable refuses a source whose shards cannot be linked into a new
// index: keys not in partition mode, or shards split in place (a merge
// needs a split before it), whose original shards no longer hold every
// document.
func checkLinkable(req ResizeRequest, t *routing.Table) error {
	if t.Mode() != routing.ModePartition {
		return &routing.Error{Exception: routing.IllegalArgument,
			Message: fmt.Sprintf("index [%s] is in %s mode; a new-index %s needs partition-mode keys", req.Source, t.Mode(), req.Op)}
	}
	if len(t.Splits()) > 0 {
		return &routing.Error{Exception: routing.IllegalArgument,
			Message: fmt.Sprintf("index [%s] has shards split in place; a new-index %s needs its original shards", req.Source, req.Op)}
	}
	return nil
}

// Build makes every shard of a resize target in eng from the source's
// shards (hard-linked checkpoints, plus copies for a shrink, minus foreign
// documents for a split; rewritten under the target's keys when a split of
// a one-shard index changes number_of_routing_shards) and returns the
// target's table, every shard durable whatever eng's durability. The source
// must be write-blocked and have passed Prepare.
func Build(req ResizeRequest, src *node.Node, eng *storage.Engine, target routing.Settings, rep *ResizeReport) (*routing.Table, error) {
	rep.Target = target
	tab, err := routing.NewTable(routing.ModePartition, target)
	if err != nil {
		return nil, err
	}
	for t := range target.Shards {
		if err := buildTargetShard(req, src, eng, tab, t, rep); err != nil {
			return nil, fmt.Errorf("baseline: %s %s -> %s: target shard %d: %w", req.Op, req.Source, req.Target, t, err)
		}
	}
	return tab, nil
}

// Resize creates the target index from the write-blocked source:
// validation in OpenSearch's order and with its messages (routing
// .PrepareResize), then each target shard from hard-linked checkpoints of
// its source shards, then (split only) removal of the documents each target
// shard does not own, recomputed against the target's metadata.
func (c *Cluster) Resize(req ResizeRequest) (*Index, ResizeReport, error) {
	var rep ResizeReport
	if err := checkName(req.Target); err != nil {
		return nil, rep, err
	}
	vreq, src, err := c.request(req)
	if err != nil {
		return nil, rep, err
	}
	target, err := routing.PrepareResize(vreq)
	if err != nil {
		return nil, rep, err
	}
	if err := checkLinkable(req, src.Node.Table()); err != nil {
		return nil, rep, err
	}
	// Take the target's name until the target is registered or removed.
	c.mu.Lock()
	if c.taken(req.Target) {
		c.mu.Unlock()
		return nil, rep, alreadyExists(req.Target)
	}
	c.building[req.Target] = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.building, req.Target)
		c.mu.Unlock()
	}()
	dir := c.IndexDir(req.Target)
	_, statErr := os.Stat(dir)
	made := errors.Is(statErr, fs.ErrNotExist)
	eng, err := storage.Open(storage.Options{Dir: dir, Durability: c.cfg.Durability, Logger: c.cfg.Logger})
	if err != nil {
		return nil, rep, err
	}
	ok := false
	defer func() {
		if ok {
			return
		}
		_ = eng.Close()
		// The target is no index yet: what its build left would be
		// opened by the next index of that name (a retry failed on its
		// first shard's directory, a new index held the linked
		// documents). A directory that was there before is not ours.
		if made {
			if rmErr := os.RemoveAll(dir); rmErr != nil {
				c.cfg.Logger.Warn("a failed resize left its target's directory", zap.String("dir", dir), zap.Error(rmErr))
			}
		}
	}()
	tab, err := Build(req, src.Node, eng, target, &rep)
	if err != nil {
		return nil, rep, err
	}
	start := time.Now()
	n, err := node.Open(node.Config{Engine: eng, Table: tab, Logger: c.cfg.Logger})
	if err != nil {
		return nil, rep, err
	}
	rep.Open = time.Since(start)
	ix := &Index{Name: req.Target, Node: n, dir: c.IndexDir(req.Target)}
	c.mu.Lock()
	c.indices[req.Target] = ix
	c.mu.Unlock()
	ok = true
	return ix, rep, nil
}

// buildTargetShard makes target shard t: linked from its (first) source,
// plus copies of the other sources of a shrink, minus foreign documents.
func buildTargetShard(req ResizeRequest, src *node.Node, eng *storage.Engine, tab *routing.Table, t int, rep *ResizeReport) error {
	sources, err := selectSources(req.Op, t, src.Table().Settings(), tab.Settings().Shards)
	if err != nil {
		return err
	}
	own := tab.RootSpan(routing.ShardID(t))
	if sr, tr := src.Table().Settings().RoutingShards, tab.Settings().RoutingShards; sr != tr {
		// A split of a one-shard index may change number_of_routing_shards
		// (routing.TargetRoutingShards): a document's partition, and so its
		// key, differs in the target. Linked files would keep the source's
		// keys, so the target's documents are rewritten under their new
		// keys instead (OpenSearch recomputes each document's shard the
		// same way in ShardSplittingQuery).
		return rekeyTargetShard(src, eng, tab, t, sources, rep)
	}
	first, err := src.Store(sources[0])
	if err != nil {
		return err
	}
	start := time.Now()
	shard, stats, err := storage.LinkShard(eng, first, routing.ShardID(t), 0, []routing.Span{own})
	rep.Link += time.Since(start)
	if err != nil {
		return err
	}
	rep.Linked += stats.Linked
	rep.Copied += stats.Copied
	start = time.Now()
	for _, id := range sources[1:] {
		s, err := src.Store(id)
		if err != nil {
			return err
		}
		if _, err := shard.CopyFrom(s); err != nil {
			return err
		}
	}
	if len(sources) > 1 {
		// The copies were written with the engine's durability, maybe
		// async: the target is the index once Build returns.
		if err := shard.Sync(); err != nil {
			return fmt.Errorf("sync the copied sources: %w", err)
		}
	}
	rep.Copy += time.Since(start)
	if req.Op != routing.Split {
		return nil
	}
	// OpenSearch's ShardSplittingQuery: recompute each document's shard
	// against the target metadata; it is foreign where that is not t.
	keep := func(d storage.Doc) bool {
		_, s := tab.Route(d.ID, d.Routing)
		return s == routing.ShardID(t)
	}
	var cs storage.CleanupStats
	switch req.Cleanup {
	case CleanupRange:
		cs, err = shard.TrimToOwned()
	case CleanupMark:
		cs, err = shard.MarkForeign(keep)
		rep.Marked += cs.Deleted
		rep.KeptBytes += cs.KeptBytes
		cs.Deleted = 0
	default:
		cs, err = shard.DeleteForeign(keep)
	}
	rep.Cleanup += cs.Took
	rep.Deleted += cs.Deleted
	rep.CleanupWrites += cs.Written
	return err
}

// rekeyTargetShard makes target shard t by writing, under the target's
// keys, each document of the sources that the target's table routes to t
// (its id, routing and source bytes counted as copied). Documents routed
// elsewhere are counted as deleted.
func rekeyTargetShard(src *node.Node, eng *storage.Engine, tab *routing.Table, t int, sources []routing.ShardID, rep *ResizeReport) error {
	id := routing.ShardID(t)
	shard, err := eng.OpenShard(id, tab.Keyspace(id), []routing.Span{tab.RootSpan(id)})
	if err != nil {
		return err
	}
	start := time.Now()
	defer func() { rep.Copy += time.Since(start) }()
	var ops []storage.Op
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		_, err := shard.Write(ops, nil)
		ops = ops[:0]
		return err
	}
	for _, sid := range sources {
		s, err := src.Store(sid)
		if err != nil {
			return err
		}
		err = s.Scan(func(d storage.Doc) error {
			p, owner := tab.Route(d.ID, d.Routing)
			if owner != id {
				rep.Deleted++
				return nil
			}
			ops = append(ops, storage.Op{Kind: storage.OpIndex, Root: tab.Keyspace(p.Root), Key: tab.KeyOf(p),
				ID: d.ID, Routing: d.Routing, Source: bytes.Clone(d.Source)})
			rep.Copied += int64(len(d.ID) + len(d.Routing) + len(d.Source))
			if len(ops) == 500 {
				return flush()
			}
			return nil
		})
		if err == nil {
			err = flush()
		}
		if err != nil {
			return fmt.Errorf("rewrite source shard %d under the target's routing shards: %w", sid, err)
		}
	}
	// Written with the engine's durability, maybe async: the target is the
	// index once Build returns.
	if err := shard.Sync(); err != nil {
		return fmt.Errorf("sync the rewritten documents: %w", err)
	}
	return nil
}

// selectSources returns the source shards of target shard t.
func selectSources(op routing.ResizeOp, t int, src routing.Settings, targetShards int) ([]routing.ShardID, error) {
	switch op {
	case routing.Split:
		s, err := routing.SelectSplitShard(t, src, targetShards)
		return []routing.ShardID{s}, err
	case routing.Shrink:
		return routing.SelectShrinkShards(t, src, targetShards)
	case routing.Clone:
		s, err := routing.SelectCloneShard(t, src, targetShards)
		return []routing.ShardID{s}, err
	}
	return nil, fmt.Errorf("baseline: unknown resize operation %d", op)
}

// ProcedureReport times the whole user procedure.
type ProcedureReport struct {
	Resize   ResizeReport
	Steps    []Step
	Blocked  time.Duration // from the write block to the alias swap
	Verified int           // documents counted in the target before the swap
	// Merge is the "merge" step of a CleanupMark split, after the swap:
	// how long the targets' reclaim of the marked documents took and what
	// their stores wrote meanwhile (the writers' flushes and compactions
	// on them included).
	Merge       time.Duration
	MergeWrites uint64
}

// Step is one timed step of the procedure.
type Step struct {
	Name       string
	Start, End time.Time
}

// Procedure is what a user does to resize an index behind an alias that
// writers keep using: add the write block, resize, wait until the target is
// open and holds every document exactly once, swap the alias, and
// (optionally) delete the source, which otherwise stays write-blocked. A
// CleanupMark split then merges the targets ("merge", after the swap and
// outside Blocked) to reclaim the space of the documents it marked.
// Writers see the block as errors and retry.
func (c *Cluster) Procedure(alias string, req ResizeRequest, deleteSource bool) (ProcedureReport, error) {
	var rep ProcedureReport
	step := func(name string, fn func() error) error {
		s := Step{Name: name, Start: time.Now()}
		err := fn()
		s.End = time.Now()
		rep.Steps = append(rep.Steps, s)
		return err
	}
	blockStart := time.Now()
	if err := step("write-block", func() error { return c.SetWriteBlock(req.Source, true) }); err != nil {
		return rep, err
	}
	var target *Index
	err := step("resize", func() error {
		var err error
		target, rep.Resize, err = c.Resize(req)
		return err
	})
	if err != nil {
		_ = c.SetWriteBlock(req.Source, false) // give the writers their index back
		return rep, err
	}
	if err := step("wait-consistent", func() error {
		var err error
		source, ok := c.Index(req.Source)
		if !ok {
			return fmt.Errorf("baseline: source index [%s] is gone before the target was verified", req.Source)
		}
		rep.Verified, err = verifyTarget(source, target)
		return err
	}); err != nil {
		return rep, err
	}
	if err := step("swap-alias", func() error { return c.PutAlias(alias, req.Target) }); err != nil {
		return rep, err
	}
	rep.Blocked = time.Since(blockStart)
	if req.Cleanup == CleanupMark {
		// OpenSearch starts the target's engine and then merges ("we call
		// maybe merge on the engine later once we started it up",
		// StoreRecovery.addIndices): the writers write meanwhile.
		if err := step("merge", func() error { return reclaim(target, &rep) }); err != nil {
			return rep, err
		}
	}
	// The source stays write-blocked (until it is deleted): a write that
	// resolved the alias to the source before the swap may still reach it,
	// and an unblocked source would acknowledge it where the alias no
	// longer looks. Blocked, it refuses the write, and the writer retries
	// through the alias into the target.
	if deleteSource {
		if err := step("delete-source", func() error { return c.DeleteIndex(req.Source) }); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// reclaim runs the merges of a CleanupMark target: each shard reclaims the
// space of the documents its mark scan marked deleted.
func reclaim(target *Index, rep *ProcedureReport) error {
	for _, id := range target.Node.Table().ActiveShards() {
		s, err := target.Node.Store(id)
		if err != nil {
			return err
		}
		cs, err := s.ReclaimForeign()
		rep.Merge += cs.Took
		rep.MergeWrites += cs.Written
		if err != nil {
			return fmt.Errorf("baseline: merge target shard %d: %w", id, err)
		}
	}
	return nil
}

// ErrInconsistent marks a target that holds a document twice or on the
// wrong shard, or not as many documents as its source.
var ErrInconsistent = errors.New("baseline: target index is not consistent")

// verifyTarget is the procedure's wait for a consistent target: every
// document of the target once, on its shard (countOnce), and as many
// documents as the write-blocked source holds, as a user comparing the two
// indices' _count would check (placement alone passes a target that lost
// documents).
func verifyTarget(source, target *Index) (int, error) {
	n, err := countOnce(target)
	if err != nil {
		return n, err
	}
	want, err := source.Node.CheckPlacement(nil)
	if err != nil {
		return n, fmt.Errorf("baseline: count the source's documents: %w", err)
	}
	if n != want.Documents {
		return n, fmt.Errorf("%w: it holds %d documents, the write-blocked source %d", ErrInconsistent, n, want.Documents)
	}
	return n, nil
}

// countOnce scans the target and checks every document is on its shard,
// once (node.CheckPlacement).
func countOnce(ix *Index) (int, error) {
	r, err := ix.Node.CheckPlacement(nil)
	if err != nil {
		return r.Documents, err
	}
	if err := r.Err(); err != nil {
		return r.Documents, fmt.Errorf("%w: %w", ErrInconsistent, err)
	}
	return r.Documents, nil
}
