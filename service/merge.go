package service

import (
	"slices"

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

// StartMerge starts an in-place merge as a task. Its refusals are the
// reservation's, in the table's words (routing's BeginMerge: fewer than
// two, named twice, unknown, different roots, in a split or merge already,
// not adjacent); then one operation per index at a time. Nothing changes
// on a refusal. The reservation is made before StartMerge returns.
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
	sorted := slices.Sorted(slices.Values(req.Shards))
	tr := taskRequest{action: MergeAction, kind: "merge", index: req.Index, shards: sorted,
		description: "merge [" + req.Index + "] shards " + formatShards(sorted), busy: "merging shards " + formatShards(sorted),
		subject: "the merge of shards " + formatShards(sorted), owners: "the target owns"}
	return s.startTask(ix, tr, splitter.MergePlan(sorted...), nil)
}
