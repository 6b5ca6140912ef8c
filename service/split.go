package service

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

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

// Task is one in-place split running (or finished) as a task. Its driver
// runs in its own goroutine, one intent at a time; a cancel is a request the
// goroutine carries out between two intents, so the splitter is only ever
// touched by one goroutine.
type Task struct {
	ID     string // "<node>:<n>"
	Num    int64
	Node   string
	Req    SplitRequest
	Start  time.Time
	ix     *Index
	sp     *splitter.Split
	cancel atomic.Bool
	stop   chan struct{}
	done   chan struct{}
	snap   atomic.Pointer[TaskSnapshot]
}

// TaskSnapshot is a task's state after its last step.
type TaskSnapshot struct {
	Phase     splitter.Phase
	Report    splitter.Report
	Completed bool
	Cancelled bool
	Err       error // the split could not reach a clean end, or aborted
	// CancelRefused says why a cancel accepted by CancelTask came too late
	// (the split published before the task carried the cancel out).
	CancelRefused string
	End           time.Time
}

// Snapshot returns the task's latest state.
func (t *Task) Snapshot() TaskSnapshot { return *t.snap.Load() }

// Description is the task's description.
func (t *Task) Description() string {
	if len(t.Req.Points) > 0 {
		pts := make([]string, len(t.Req.Points))
		for i, p := range t.Req.Points {
			pts[i] = strconv.FormatInt(p, 10)
		}
		return fmt.Sprintf("split [%s][%d] at [%s]", t.Req.Index, t.Req.Shard, strings.Join(pts, ","))
	}
	return fmt.Sprintf("split [%s][%d] into [%d]", t.Req.Index, t.Req.Shard, t.Req.Ways)
}

// Wait waits for the task to end or ctx to be done.
func (t *Task) Wait(ctx context.Context) error {
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed when the task has ended.
func (t *Task) Done() <-chan struct{} { return t.done }

type tasks struct {
	mu   sync.Mutex
	next int64
	all  map[string]*Task
}

func (ts *tasks) init() { ts.all = map[string]*Task{} }

func (ts *tasks) stopAll() {
	ts.mu.Lock()
	var running []*Task
	for _, t := range ts.all {
		running = append(running, t)
	}
	ts.mu.Unlock()
	for _, t := range running {
		t.halt()
	}
}

// halt stops the task's goroutine after its current intent, leaving an
// unfinished split to recovery.
func (t *Task) halt() {
	select {
	case <-t.stop:
	default:
		close(t.stop)
	}
	<-t.done
}

// StartSplit validates an in-place split request and starts it as a task.
// Refusals use OpenSearch's messages (MetadataInPlaceSplitShardService and
// the split metadata rules).
func (s *Service) StartSplit(req SplitRequest) (*Task, error) {
	ix, ok := s.index(req.Index)
	if !ok {
		return nil, indexNotFound(req.Index)
	}
	if err := s.checkMetadataBlock(req.Index); err != nil {
		return nil, err
	}
	t := ix.node.Table()
	plan := splitter.Plan{Parent: req.Shard, Ways: req.Ways}
	if len(req.Points) > 0 {
		if req.Ways != 0 {
			return nil, newErr(TypeIllegalArgument, http.StatusBadRequest, req.Index, "give either [number_of_splits] or [split_points], not both")
		}
		for _, p := range req.Points {
			k, err := t.Mode().KeyOf(p)
			if err != nil {
				return nil, newErr(TypeIllegalArgument, http.StatusBadRequest, req.Index, "split point [%d] is outside the %s key space", p, t.Mode())
			}
			plan.Points = append(plan.Points, k)
		}
	} else if req.Ways == 0 {
		return nil, newErr(TypeValidation, http.StatusBadRequest, req.Index, "Validation Failed: 1: number_of_splits or split_points is missing;")
	}
	ix.splitMu.Lock()
	defer ix.splitMu.Unlock()
	if ix.split != nil {
		if ix.split.Req.Shard == req.Shard {
			return nil, newErr(TypeIllegalArgument, http.StatusBadRequest, req.Index, "Splitting of shard [%d] is already in progress", req.Shard)
		}
		return nil, newErr(TypeIllegalState, http.StatusConflict, req.Index,
			"index [%s] is already splitting shard [%d] (task [%s]); one split per index at a time", req.Index, ix.split.Req.Shard, ix.split.ID)
	}
	// Dry run of the reservation, for OpenSearch's refusals before a task
	// exists.
	var err error
	if len(plan.Points) == 0 {
		_, err = routing.BeginInPlaceSplit(routing.ClusterState{Index: req.Index, VirtualShards: -1}, t,
			routing.SplitRequest{Index: req.Index, Shard: req.Shard, SplitInto: req.Ways})
	} else {
		if sp, ok := t.Split(req.Shard); ok && sp.InProgress {
			err = &routing.Error{Exception: routing.IllegalArgument, Message: fmt.Sprintf("Splitting of shard [%d] is already in progress", req.Shard)}
		} else if t.IsSplitParent(req.Shard) {
			err = &routing.Error{Exception: routing.IllegalArgument, Message: fmt.Sprintf("Shard [%d] has already been split.", req.Shard)}
		} else {
			_, err = routing.Apply(t, plan.Edit())
		}
	}
	if err != nil {
		e := AsError(err)
		e.Index = req.Index
		return nil, e
	}
	s.tasks.mu.Lock()
	s.tasks.next++
	num := s.tasks.next
	task := &Task{Num: num, Node: s.NodeID(), Req: req, Start: time.Now(), ix: ix,
		stop: make(chan struct{}), done: make(chan struct{})}
	task.ID = task.Node + ":" + strconv.FormatInt(num, 10)
	s.tasks.all[task.ID] = task
	s.tasks.mu.Unlock()
	cfg := splitter.Config{Journal: ix.journal, Logger: s.log.With(zap.String("index", req.Index))}
	if s.cfg.SplitHook != nil {
		cfg.Hook = func(phase splitter.Phase, next splitter.Intent) { s.cfg.SplitHook(req.Index, phase, next) }
	}
	task.sp = splitter.NewDriver(ix.node, cfg).Start(plan)
	task.snap.Store(&TaskSnapshot{Phase: task.sp.Phase()})
	ix.split = task
	go task.run()
	s.log.Info("split started", zap.String("task", task.ID), zap.String("index", req.Index), zap.Uint32("shard", uint32(req.Shard)))
	return task, nil
}

func (t *Task) run() {
	defer close(t.done)
	defer func() {
		t.ix.splitMu.Lock()
		if t.ix.split == t {
			t.ix.split = nil
		}
		t.ix.splitMu.Unlock()
	}()
	var runErr error
	cancelled := false
	refused := ""
	for !t.sp.Done() {
		select {
		case <-t.stop:
			t.snap.Store(&TaskSnapshot{Phase: t.sp.Phase(), Report: t.sp.Report(), Completed: true,
				Err: fmt.Errorf("the node shut down during the split; recovery decides it on restart"), End: time.Now()})
			return
		default:
		}
		if t.cancel.Load() && !cancelled {
			cancelled = true
			if err := t.sp.Cancel(); err != nil {
				refused = err.Error()
				t.ix.svc.log.Info("split cancel refused", zap.String("task", t.ID), zap.Error(err))
			}
		}
		if _, _, err := t.sp.Next(); err != nil {
			runErr = err
			break
		}
		t.snap.Store(&TaskSnapshot{Phase: t.sp.Phase(), Report: t.sp.Report(), Cancelled: cancelled, CancelRefused: refused})
	}
	rep := t.sp.Report()
	if runErr == nil && rep.Phase == splitter.PhaseAborted {
		runErr = rep.Err
		if runErr == nil {
			runErr = fmt.Errorf("split aborted")
		}
	}
	t.snap.Store(&TaskSnapshot{Phase: rep.Phase, Report: rep, Completed: true, Cancelled: cancelled && rep.Phase == splitter.PhaseAborted,
		CancelRefused: refused, Err: runErr, End: time.Now()})
	t.ix.svc.log.Info("split ended", zap.String("task", t.ID), zap.Stringer("phase", rep.Phase), zap.Error(runErr))
}

// Task returns a task by id.
func (s *Service) Task(id string) (*Task, error) {
	s.tasks.mu.Lock()
	defer s.tasks.mu.Unlock()
	t, ok := s.tasks.all[id]
	if !ok {
		if _, num, ok := strings.Cut(id, ":"); !ok || num == "" {
			return nil, newErr(TypeIllegalArgument, http.StatusBadRequest, "", "malformed task id %s", id)
		}
		return nil, newErr(TypeResourceNotFound, http.StatusNotFound, "", "task [%s] isn't running and hasn't stored its results", id)
	}
	return t, nil
}

// Tasks returns every task, oldest first.
func (s *Service) Tasks() []*Task {
	s.tasks.mu.Lock()
	defer s.tasks.mu.Unlock()
	out := make([]*Task, 0, len(s.tasks.all))
	for _, t := range s.tasks.all {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Num < out[j].Num })
	return out
}

// CancelTask asks a split to abort. It is refused once the split has
// published its children (the commit point): from then on it can only roll
// forward.
func (s *Service) CancelTask(id string) (*Task, error) {
	t, err := s.Task(id)
	if err != nil {
		return nil, err
	}
	snap := t.Snapshot()
	if snap.Completed {
		return nil, newErr(TypeIllegalState, http.StatusBadRequest, t.Req.Index, "task [%s] has already completed (phase %s)", id, snap.Phase)
	}
	if snap.Phase.Published() {
		return nil, newErr(TypeIllegalState, http.StatusBadRequest, t.Req.Index,
			"cannot cancel task [%s]: the split of shard [%d] has passed its handoff (phase %s); the children own the documents and it can only complete",
			id, t.Req.Shard, snap.Phase)
	}
	t.cancel.Store(true)
	return t, nil
}

// stopSplit halts a running split of the index (before a delete).
func (ix *Index) stopSplit() {
	ix.splitMu.Lock()
	t := ix.split
	ix.splitMu.Unlock()
	if t != nil {
		t.cancel.Store(true)
		<-t.done
	}
}
