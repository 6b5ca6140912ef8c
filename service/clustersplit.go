package service

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/shardsplit/shardsplit/cluster"
	"github.com/shardsplit/shardsplit/routing"
)

// In cluster mode an in-place split is a cluster task (SplitShard): the
// cluster manager reserves the children, the parent primary's node builds
// and hands off. The REST task that answers the request only watches the
// committed cluster state: running while the index has the split in
// progress (IndexMeta.Splits), done once it has the split's hand-off record
// (IndexMeta.Handoffs), failed if the split left the state without one (it
// was rolled back: cancelled, or a copy failed before the hand-off).

// clusterWatch is what a cluster-mode task watches.
type clusterWatch struct {
	uuid  string // the index's uuid when the split was accepted
	shard routing.ShardID
}

// clusterWatchEvery is how often a cluster-mode task reads the cluster
// state this node applied.
const clusterWatchEvery = 20 * time.Millisecond

// clusterStartSplit proposes the split of req.Shard into req.Ways children
// and returns the task that watches it.
func (s *Service) clusterStartSplit(req SplitRequest) (*Task, error) {
	if len(req.Points) > 0 {
		return nil, errClusterUnsupported("a split at [split_points]")
	}
	if req.Ways == 0 {
		return nil, newErr(TypeValidation, http.StatusBadRequest, req.Index, "Validation Failed: 1: number_of_splits or split_points is missing;")
	}
	ctx, cancel := clusterContext()
	defer cancel()
	if err := s.awaitManager(ctx); err != nil {
		return nil, err
	}
	st, err := s.clusterState()
	if err != nil {
		return nil, err
	}
	im := st.Indices[req.Index]
	if im == nil {
		return nil, indexNotFound(req.Index)
	}
	if err := clusterSplitRefusal(im, req); err != nil {
		return nil, err
	}
	if err := s.cl.p.SplitShard(ctx, req.Index, req.Shard, req.Ways); err != nil {
		return nil, clusterErr(req.Index, err)
	}
	tr := taskRequest{action: SplitAction, kind: "split", index: req.Index, shards: []routing.ShardID{req.Shard},
		description: splitDescription(req), busy: fmt.Sprintf("splitting shard [%d]", req.Shard),
		subject: fmt.Sprintf("the split of shard [%d]", req.Shard), owners: "the children own"}
	task, err := s.newTask(nil, tr)
	if err != nil {
		return nil, err
	}
	task.watch = &clusterWatch{uuid: im.UUID, shard: req.Shard}
	task.status.Store(&TaskStatus{Phase: string(cluster.SplitCatchingUp)})
	s.tasks.mu.Lock()
	s.tasks.all[task.ID] = task
	s.tasks.mu.Unlock()
	go task.watchCluster(s)
	s.log.Info("task started", zap.String("task", task.ID), zap.String("action", tr.action), zap.String("index", req.Index),
		zap.Uint32("shard", uint32(req.Shard)), zap.Int("children", req.Ways))
	return task, nil
}

// watchCluster follows the split in the applied cluster state until it is
// handed off or gone, or the service stops. The split may show in this
// node's applied state a little after its commit: until it has been seen,
// its absence means nothing yet (for at most clusterWait).
func (t *Task) watchCluster(s *Service) {
	defer close(t.done)
	seen := false
	deadline := time.Now().Add(clusterWait)
	tick := time.NewTicker(clusterWatchEvery)
	defer tick.Stop()
	for {
		st, err := s.cl.p.State()
		if err != nil {
			t.finish(TaskStatus{Phase: "failed", Err: fmt.Errorf("the node shut down during the split; the cluster decides it")})
			return
		}
		im := st.Indices[t.req.index]
		switch {
		case im == nil || im.UUID != t.watch.uuid:
			t.finish(TaskStatus{Phase: "failed", Err: indexNotFound(t.req.index)})
			return
		case hasHandoff(im, t.watch.shard):
			h := im.Handoffs[t.watch.shard]
			t.finish(TaskStatus{Phase: "done", Done: true, Published: true, Targets: slices.Clone(h.Children)})
			return
		}
		if sp, ok := im.Splits[t.watch.shard]; ok {
			seen = true
			t.status.Store(&TaskStatus{Phase: string(sp.Phase), Targets: slices.Clone(sp.Children)})
		} else if seen || time.Now().After(deadline) {
			if t.cancel.Load() {
				// As OpenSearch reports a task cancelled through the task
				// API (TaskCancelledException: no status of its own, 500).
				t.finish(TaskStatus{Phase: "aborted", Cancelled: true, Err: &Error{Type: TypeTaskCancelled,
					Status: http.StatusInternalServerError, Index: t.req.index, Reason: "task cancelled [by user request]"}})
				return
			}
			t.finish(TaskStatus{Phase: "aborted", Err: newErr(TypeIllegalState, http.StatusInternalServerError, t.req.index,
				"the split of shard [%d] of index [%s] was rolled back before its hand-off (a copy failed, or it was cancelled)", t.watch.shard, t.req.index)})
			return
		}
		select {
		case <-t.stop:
			cur := t.Status()
			cur.Completed, cur.End = true, time.Now()
			cur.Err = fmt.Errorf("the node shut down during the split; the cluster decides it")
			t.status.Store(&cur)
			return
		case <-tick.C:
		}
	}
}

func hasHandoff(im *cluster.IndexMeta, shard routing.ShardID) bool {
	_, ok := im.Handoffs[shard]
	return ok
}

// finish stores a cluster-mode task's final status.
func (t *Task) finish(st TaskStatus) {
	st.Completed, st.End, st.Took = true, time.Now(), time.Since(t.Start)
	t.status.Store(&st)
}

// clusterCancelSplit cancels the split a cluster-mode task watches: a
// cluster task, refused once the split handed off (from then on it can
// only roll forward). The task ends when its node applies the cancel.
func (s *Service) clusterCancelSplit(t *Task) (*Task, error) {
	ctx, cancel := clusterContext()
	defer cancel()
	if err := s.awaitManager(ctx); err != nil {
		return nil, err
	}
	t.cancel.Store(true)
	err := s.cl.p.CancelSplit(ctx, t.req.index, t.watch.shard, "cancelled by user request")
	if err == nil {
		return t, nil
	}
	t.cancel.Store(false)
	if !errors.Is(err, cluster.ErrStale) {
		return nil, clusterErr(t.req.index, err)
	}
	// No split in progress: handed off, or ended otherwise.
	if st, serr := s.clusterState(); serr == nil {
		if im := st.Indices[t.req.index]; im != nil && im.UUID == t.watch.uuid && hasHandoff(im, t.watch.shard) {
			return nil, newErr(TypeIllegalState, http.StatusBadRequest, t.req.index,
				"cannot cancel task [%s]: %s has passed its handoff (phase done); %s the documents and it can only complete",
				t.ID, t.req.subject, t.req.owners)
		}
	}
	return nil, newErr(TypeIllegalState, http.StatusBadRequest, t.req.index, "task [%s] has already completed (phase %s)", t.ID, t.Status().Phase)
}

// clusterSplitRefusal is MetadataInPlaceSplitShardService's checks of the
// shard, in its order and words, against the state this node applied: the
// split in progress, the shard already split, no such shard, a primary not
// started. The cluster task checks again against the state it applies to
// (in the split metadata's words) and decides a race.
func clusterSplitRefusal(im *cluster.IndexMeta, req SplitRequest) error {
	if _, ok := im.Splits[req.Shard]; ok {
		return newErr(TypeIllegalArgument, http.StatusBadRequest, req.Index, "Splitting of shard [%d] is already in progress", req.Shard)
	}
	if hasHandoff(im, req.Shard) {
		return newErr(TypeIllegalArgument, http.StatusBadRequest, req.Index, "Shard [%d] has already been split.", req.Shard)
	}
	copies, ok := im.Copies[req.Shard]
	if !ok {
		e := AsError(&routing.Error{Exception: routing.ShardNotFound, Message: fmt.Sprintf("no such shard [%s][%d]", req.Index, req.Shard)})
		e.Index = req.Index
		return e
	}
	for _, c := range copies {
		if c.Primary && c.State != cluster.Started {
			return newErr(TypeIllegalArgument, http.StatusBadRequest, req.Index,
				"Cannot split shard [%d] on index [%s] because the primary shard is not started, current state: %s", req.Shard, req.Index, c.State)
		}
	}
	return nil
}
