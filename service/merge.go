package service

import (
	"slices"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
)

// MergeAction is the task action name of an in-place merge (our
// extension: OpenSearch has no merge of shards).
const MergeAction = "indices:admin/shard/merge"

// MergeRequest asks for an in-place merge of two or more adjacent leaves of
// one root into one new shard.
type MergeRequest struct {
	Index  string
	Shards []routing.ShardID // as given; the task keeps them ascending
}

// StartMerge validates an in-place merge request and starts it as a task.
// Refusals are the table's own (routing's BeginMerge: fewer than two,
// named twice, unknown, different roots, in a split or merge already, not
// adjacent); then one operation per index at a time. Nothing changes on a
// refusal. The reservation is made before StartMerge returns (launch).
func (s *Service) StartMerge(req MergeRequest) (*Task, error) {
	if s.cl != nil {
		return nil, errClusterUnsupported("an in-place merge")
	}

	ix, ok := s.index(req.Index)
	if !ok {
		return nil, indexNotFound(req.Index)
	}
	if err := s.checkMetadataBlock(req.Index); err != nil {
		return nil, err
	}
	ix.splitMu.Lock()
	defer ix.splitMu.Unlock()
	if err := ix.closingErr(); err != nil {
		return nil, err
	}
	// Dry run of the reservation, so that a refusal names the shards before
	// a busy index refuses the request as a whole.
	edit := routing.Edit{Kind: routing.BeginMerge, Sources: slices.Clone(req.Shards)}
	if _, err := routing.Apply(ix.node.Table(), edit); err != nil {
		e := AsError(err)
		e.Index = req.Index
		return nil, e
	}
	if run := ix.split; run != nil {
		return nil, ix.busyErr(run)
	}
	task := s.newTask(ix)
	sorted := slices.Sorted(slices.Values(req.Shards))
	task.Merge = &MergeRequest{Index: req.Index, Shards: sorted}
	task.op = splitter.NewDriver(ix.node, s.driverConfig(ix)).StartMerge(splitter.MergePlan{Sources: sorted})
	if err := s.launch(task); err != nil {
		return nil, err
	}
	s.log.Info("merge started", zap.String("task", task.ID), zap.String("index", req.Index), zap.Any("shards", sorted))
	return task, nil
}
