package service

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
)

// SplitAction is the task action name of an in-place split.
const SplitAction = "indices:admin/shard/split"

// SplitRequest asks for an in-place split of one shard: into Ways equal
// children, or at Points (partitions in partition mode, signed hashes in
// opensearch mode).
type SplitRequest struct {
	Index  string
	Shard  routing.ShardID
	Ways   int
	Points []int64
}

// StartSplit validates an in-place split request and starts it as a task.
// Refusals use OpenSearch's messages (MetadataInPlaceSplitShardService and
// the split metadata rules): the request's, then the reservation's.
func (s *Service) StartSplit(req SplitRequest) (*Task, error) {
	if s.cl != nil {
		return s.clusterStartSplit(req)
	}
	ix, ok := s.index(req.Index)
	if !ok {
		return nil, indexNotFound(req.Index)
	}
	if err := s.checkMetadataBlock(req.Index); err != nil {
		return nil, err
	}
	plan := splitter.Plan{Kind: splitter.KindSplit, Sources: []routing.ShardID{req.Shard}, Ways: req.Ways}
	if len(req.Points) > 0 {
		if req.Ways != 0 {
			return nil, newErr(TypeIllegalArgument, http.StatusBadRequest, req.Index, "give either [number_of_splits] or [split_points], not both")
		}
		mode := ix.node.Table().Mode()
		for _, p := range req.Points {
			k, err := mode.KeyOf(p)
			if err != nil {
				return nil, newErr(TypeIllegalArgument, http.StatusBadRequest, req.Index, "split point [%d] is outside the %s key space", p, mode)
			}
			plan.Points = append(plan.Points, k)
		}
	} else if req.Ways == 0 {
		return nil, newErr(TypeValidation, http.StatusBadRequest, req.Index, "Validation Failed: 1: number_of_splits or split_points is missing;")
	}
	tr := taskRequest{action: SplitAction, kind: "split", index: req.Index, shards: []routing.ShardID{req.Shard},
		description: splitDescription(req), busy: fmt.Sprintf("splitting shard [%d]", req.Shard),
		subject: fmt.Sprintf("the split of shard [%d]", req.Shard), owners: "the children own"}
	return s.startTask(ix, tr, plan, func(running *Task) error { return ix.splitRefusal(req, len(plan.Points), running) })
}

func splitDescription(req SplitRequest) string {
	if len(req.Points) > 0 {
		pts := make([]string, len(req.Points))
		for i, p := range req.Points {
			pts[i] = strconv.FormatInt(p, 10)
		}
		return fmt.Sprintf("split [%s][%d] at [%s]", req.Index, req.Shard, strings.Join(pts, ","))
	}
	return fmt.Sprintf("split [%s][%d] into [%d]", req.Index, req.Shard, req.Ways)
}

// splitRefusal is what refuses a split request before its reservation, in
// OpenSearch's order: a split already running on the index (of this shard:
// OpenSearch's words; of another: one operation per index), the index's
// shard limit, then MetadataInPlaceSplitShardService's checks of the shard
// (a request by ways also names a shard that is no leaf). A running merge
// is left to the reservation, whose refusal (in the table's words) comes
// before the index's being busy. points is the number of split points.
func (ix *Index) splitRefusal(req SplitRequest, points int, running *Task) error {
	if running != nil && running.Action() == SplitAction {
		if running.req.shards[0] == req.Shard {
			return newErr(TypeIllegalArgument, http.StatusBadRequest, req.Index, "Splitting of shard [%d] is already in progress", req.Shard)
		}
		return ix.busyErr(running)
	}
	// No index may have more than routing.MaxShards shards (OpenSearch's
	// index.number_of_shards maximum); checked before the reservation,
	// which would build the reservation of every child.
	t := ix.node.Table()
	children := req.Ways
	if points > 0 {
		children = points + 1
	}
	if after := len(t.ActiveShards()) - 1 + children; children > 0 && after > routing.MaxShards {
		return newErr(TypeIllegalArgument, http.StatusBadRequest, req.Index,
			"Cannot split shard [%d] of index [%s] into [%d] shards: the index would have [%d] shards, more than the [%d] an index may have",
			req.Shard, req.Index, children, after, routing.MaxShards)
	}
	var err error
	switch sp, reserved := t.Split(req.Shard); {
	case reserved && sp.InProgress:
		err = &routing.Error{Exception: routing.IllegalArgument, Message: fmt.Sprintf("Splitting of shard [%d] is already in progress", req.Shard)}
	case t.IsSplitParent(req.Shard):
		err = &routing.Error{Exception: routing.IllegalArgument, Message: fmt.Sprintf("Shard [%d] has already been split.", req.Shard)}
	case points == 0 && !slices.Contains(t.ActiveShards(), req.Shard):
		err = &routing.Error{Exception: routing.ShardNotFound, Message: fmt.Sprintf("no such shard [%s][%d]", req.Index, req.Shard)}
	}
	if err != nil {
		e := AsError(err)
		e.Index = req.Index
		return e
	}
	return nil
}
