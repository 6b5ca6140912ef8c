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

// Task is one in-place split or merge running (or finished) as a task. Its
// driver runs in its own goroutine, one intent at a time; a cancel is a
// request the goroutine carries out between two intents, so the splitter is
// only ever touched by one goroutine.
type Task struct {
	ID    string // "<node>:<n>"
	Num   int64
	Node  string
	Req   SplitRequest  // of a split (Merge == nil)
	Merge *MergeRequest // of a merge; nil for a split
	Start time.Time
	ix    *Index
	// op is the *splitter.Split or *splitter.Merge the task drives.
	op     operation
	cancel atomic.Bool
	stop   chan struct{}
	done   chan struct{}
	snap   atomic.Pointer[TaskSnapshot]
}

// operation is what a task drives: a *splitter.Split or a *splitter.Merge.
type operation interface {
	Next() (splitter.Intent, splitter.Event, error)
	Cancel() error
	Interrupt() // ends a wait for a write stall, so the loop sees a cancel or a stop at once
	Report() splitter.Report
	Phase() splitter.Phase
	Done() bool
	Fenced() bool // holds a shard's apply lock: writers wait on it
}

// TaskSnapshot is a task's state after its last step.
type TaskSnapshot struct {
	Phase     splitter.Phase
	Report    splitter.Report
	Completed bool
	Cancelled bool
	Err       error // the operation could not reach a clean end, or aborted
	// CancelRefused says why a cancel accepted by CancelTask came too late
	// (the operation reached its handoff before the task carried the
	// cancel out).
	CancelRefused string
	End           time.Time
}

// Snapshot returns the task's latest state.
func (t *Task) Snapshot() TaskSnapshot { return *t.snap.Load() }

// Index is the name of the index the task splits or merges shards of.
func (t *Task) Index() string {
	if t.Merge != nil {
		return t.Merge.Index
	}
	return t.Req.Index
}

// Action is the task's action name: SplitAction or MergeAction.
func (t *Task) Action() string {
	if t.Merge != nil {
		return MergeAction
	}
	return SplitAction
}

// kind is "split" or "merge", for messages.
func (t *Task) kind() string {
	if t.Merge != nil {
		return "merge"
	}
	return "split"
}

// Description is the task's description.
func (t *Task) Description() string {
	if t.Merge != nil {
		return fmt.Sprintf("merge [%s] shards %s", t.Merge.Index, formatShards(t.Merge.Shards))
	}
	if len(t.Req.Points) > 0 {
		pts := make([]string, len(t.Req.Points))
		for i, p := range t.Req.Points {
			pts[i] = strconv.FormatInt(p, 10)
		}
		return fmt.Sprintf("split [%s][%d] at [%s]", t.Req.Index, t.Req.Shard, strings.Join(pts, ","))
	}
	return fmt.Sprintf("split [%s][%d] into [%d]", t.Req.Index, t.Req.Shard, t.Req.Ways)
}

// busy says what the task is doing, for refusals of other operations:
// "splitting shard [3]" or "merging shards [8, 9]".
func (t *Task) busy() string {
	if t.Merge != nil {
		return "merging shards " + formatShards(t.Merge.Shards)
	}
	return fmt.Sprintf("splitting shard [%d]", t.Req.Shard)
}

// formatShards prints ids as OpenSearch prints a list: [1, 2, 3].
func formatShards(ids []routing.ShardID) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatUint(uint64(id), 10)
	}
	return "[" + strings.Join(parts, ", ") + "]"
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
	t.op.Interrupt()
	<-t.done
}

// StartSplit validates an in-place split request and starts it as a task.
// Refusals use OpenSearch's messages (MetadataInPlaceSplitShardService and
// the split metadata rules).
func (s *Service) StartSplit(req SplitRequest) (*Task, error) {
	if s.cl != nil {
		return nil, errClusterUnsupported("an in-place split")
	}

	ix, ok := s.index(req.Index)
	if !ok {
		return nil, indexNotFound(req.Index)
	}
	if err := s.checkMetadataBlock(req.Index); err != nil {
		return nil, err
	}
	plan := splitter.Plan{Parent: req.Shard, Ways: req.Ways}
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
	ix.splitMu.Lock()
	defer ix.splitMu.Unlock()
	if err := ix.closingErr(); err != nil {
		return nil, err
	}
	if run := ix.split; run != nil && run.Merge == nil {
		if run.Req.Shard == req.Shard {
			return nil, newErr(TypeIllegalArgument, http.StatusBadRequest, req.Index, "Splitting of shard [%d] is already in progress", req.Shard)
		}
		return nil, ix.busyErr(run)
	}
	// No index may have more than routing.MaxShards shards (OpenSearch's
	// index.number_of_shards maximum); checked before the dry run, which
	// would build the reservation of every child.
	children := req.Ways
	if len(plan.Points) > 0 {
		children = len(plan.Points) + 1
	}
	if after := len(ix.node.Table().ActiveShards()) - 1 + children; children > 0 && after > routing.MaxShards {
		return nil, newErr(TypeIllegalArgument, http.StatusBadRequest, req.Index,
			"Cannot split shard [%d] of index [%s] into [%d] shards: the index would have [%d] shards, more than the [%d] an index may have",
			req.Shard, req.Index, children, after, routing.MaxShards)
	}
	// Dry run of the reservation, for OpenSearch's refusals (and order)
	// before a task exists. A running operation has made its reservation
	// (launch), so the table refuses a shard it holds with its own message.
	t := ix.node.Table()
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
	if run := ix.split; run != nil {
		return nil, ix.busyErr(run)
	}
	task := s.newTask(ix)
	task.Req = req
	task.op = splitter.NewDriver(ix.node, s.driverConfig(ix)).Start(plan)
	if err := s.launch(task); err != nil {
		return nil, err
	}
	s.log.Info("split started", zap.String("task", task.ID), zap.String("index", req.Index), zap.Uint32("shard", uint32(req.Shard)))
	return task, nil
}

// busyErr refuses a second operation on an index while one runs.
func (ix *Index) busyErr(run *Task) *Error {
	return newErr(TypeIllegalState, http.StatusConflict, ix.name,
		"index [%s] is already %s (task [%s]); one in-place split or merge per index at a time", ix.name, run.busy(), run.ID)
}

// newTask returns a task of ix with the next id; launch registers it.
func (s *Service) newTask(ix *Index) *Task {
	node := s.NodeID()
	s.tasks.mu.Lock()
	defer s.tasks.mu.Unlock()
	s.tasks.next++
	task := &Task{Num: s.tasks.next, Node: node, Start: time.Now(), ix: ix,
		stop: make(chan struct{}), done: make(chan struct{})}
	task.ID = task.Node + ":" + strconv.FormatInt(task.Num, 10)
	return task
}

// driverConfig is the splitter configuration of an index's operations.
func (s *Service) driverConfig(ix *Index) splitter.Config {
	cfg := splitter.Config{Journal: ix.journal, Logger: s.log.With(zap.String("index", ix.name))}
	if s.cfg.SplitHook != nil {
		cfg.Hook = func(phase splitter.Phase, next splitter.Intent) { s.cfg.SplitHook(ix.name, phase, next) }
	}
	return cfg
}

// launch takes the operation's first step, its reservation in the table,
// in the caller's goroutine: once a task exists, the table and _cat/shards
// show what it holds, and a reservation the table refuses is the request's
// error (the operation ends aborted; no task is registered). Then it
// registers the task, makes it the index's running operation and starts its
// goroutine, which alone advances the operation from then on. The caller
// holds ix.splitMu.
func (s *Service) launch(task *Task) error {
	if _, _, err := task.op.Next(); err != nil {
		return s.launchErr(task, err)
	}
	if task.op.Done() {
		err := task.op.Report().Err
		if err == nil {
			err = fmt.Errorf("%s ended in phase %s at its reservation", task.kind(), task.op.Phase())
		}
		return s.launchErr(task, err)
	}
	task.snap.Store(&TaskSnapshot{Phase: task.op.Phase(), Report: task.op.Report()})
	s.tasks.mu.Lock()
	s.tasks.all[task.ID] = task
	s.tasks.mu.Unlock()
	task.ix.split = task
	go task.run()
	return nil
}

// launchErr is the request's error for an operation that did not get past
// its reservation.
func (s *Service) launchErr(task *Task, err error) error {
	s.log.Info("reservation refused", zap.String("action", task.Action()), zap.String("index", task.Index()), zap.Error(err))
	e := AsError(err)
	if e.Index == "" {
		e.Index = task.Index()
	}
	return e
}

// end frees the index for its next operation, then stores the task's
// final snapshot: a client that sees the task completed (GET _tasks) can
// start the next split or merge at once. (Cleared after the snapshot, the
// index refused it with 409 "already splitting" until the goroutine
// returned.)
func (t *Task) end(snap *TaskSnapshot) {
	t.ix.splitMu.Lock()
	if t.ix.split == t {
		t.ix.split = nil
	}
	t.ix.splitMu.Unlock()
	t.snap.Store(snap)
}

func (t *Task) run() {
	defer close(t.done)
	var runErr error
	cancelled := false
	byCancel := false // the cancel was accepted and is why the operation aborts
	refused := ""
	for !t.op.Done() {
		select {
		case <-t.stop:
			if t.op.Fenced() {
				// A handoff holds the shard's apply lock across its next
				// intents (replay, publish, unfence: in memory, bounded):
				// stopping now would leave the writers waiting on it for
				// good. Step to the unfence first.
				break
			}
			t.end(&TaskSnapshot{Phase: t.op.Phase(), Report: t.op.Report(), Completed: true,
				Err: fmt.Errorf("the node shut down during the %s; recovery decides it on restart", t.kind()), End: time.Now()})
			return
		default:
		}
		if t.cancel.Load() && !cancelled {
			cancelled = true
			aborting := t.op.Phase() == splitter.PhaseAborting // a failure is aborting it already
			if err := t.op.Cancel(); err != nil {
				refused = err.Error()
				t.ix.svc.log.Info("cancel refused", zap.String("task", t.ID), zap.Error(err))
			} else {
				byCancel = !aborting
			}
		}
		if _, _, err := t.op.Next(); err != nil {
			runErr = err
			break
		}
		t.snap.Store(&TaskSnapshot{Phase: t.op.Phase(), Report: t.op.Report(), Cancelled: cancelled, CancelRefused: refused})
	}
	rep := t.op.Report()
	if runErr == nil && rep.Phase == splitter.PhaseAborted {
		runErr = rep.Err
		if runErr == nil {
			runErr = fmt.Errorf("%s aborted", t.kind())
		}
		if byCancel {
			// As OpenSearch reports a task cancelled through the task
			// API (TaskCancelledException: no status of its own, 500).
			runErr = &Error{Type: TypeTaskCancelled, Status: http.StatusInternalServerError, Index: t.Index(),
				Reason: "task cancelled [by user request]", cause: runErr}
		}
	}
	t.end(&TaskSnapshot{Phase: rep.Phase, Report: rep, Completed: true, Cancelled: cancelled && rep.Phase == splitter.PhaseAborted,
		CancelRefused: refused, Err: runErr, End: time.Now()})
	t.ix.svc.log.Info("task ended", zap.String("task", t.ID), zap.String("action", t.Action()), zap.Stringer("phase", rep.Phase), zap.Error(runErr))
}

// Task returns a task by id.
func (s *Service) Task(id string) (*Task, error) {
	s.tasks.mu.Lock()
	defer s.tasks.mu.Unlock()
	t, ok := s.tasks.all[id]
	if !ok {
		// OpenSearch's TaskId: "<node>:<a Java long>".
		if _, num, ok := strings.Cut(id, ":"); !ok || !isJavaLong(num) {
			return nil, newErr(TypeIllegalArgument, http.StatusBadRequest, "", "malformed task id %s", id)
		}
		return nil, newErr(TypeResourceNotFound, http.StatusNotFound, "", "task [%s] isn't running and hasn't stored its results", id)
	}
	return t, nil
}

// isJavaLong reports whether Long.parseLong accepts s.
func isJavaLong(s string) bool {
	_, err := strconv.ParseInt(s, 10, 64)
	return err == nil
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

// CancelTask asks a split or merge to abort. It is refused once the
// operation has published (the commit point): from then on it can only
// roll forward.
func (s *Service) CancelTask(id string) (*Task, error) {
	t, err := s.Task(id)
	if err != nil {
		return nil, err
	}
	snap := t.Snapshot()
	if snap.Completed {
		return nil, newErr(TypeIllegalState, http.StatusBadRequest, t.Index(), "task [%s] has already completed (phase %s)", id, snap.Phase)
	}
	if snap.Phase.Published() {
		if t.Merge != nil {
			return nil, newErr(TypeIllegalState, http.StatusBadRequest, t.Index(),
				"cannot cancel task [%s]: the merge of shards %s has passed its handoff (phase %s); the target owns the documents and it can only complete",
				id, formatShards(t.Merge.Shards), snap.Phase)
		}
		return nil, newErr(TypeIllegalState, http.StatusBadRequest, t.Index(),
			"cannot cancel task [%s]: the split of shard [%d] has passed its handoff (phase %s); the children own the documents and it can only complete",
			id, t.Req.Shard, snap.Phase)
	}
	t.cancel.Store(true)
	t.op.Interrupt() // the loop delivers the cancel after the step in progress
	return t, nil
}

// stopSplit cancels a running split or merge of the index and refuses new
// ones (before a delete; reopenOperations undoes the refusal if the delete
// fails).
func (ix *Index) stopSplit() { ix.endOperations(false) }

// endOperations makes the index refuse new splits and merges and ends the
// running one: halted (left to recovery) or cancelled. A request in its
// reservation holds splitMu, so it either finished launching (and its task
// is ended here) or will see closing.
func (ix *Index) endOperations(halt bool) {
	ix.splitMu.Lock()
	ix.closing = true
	t := ix.split
	ix.splitMu.Unlock()
	if t == nil {
		return
	}
	if halt {
		t.halt()
		return
	}
	t.cancel.Store(true)
	t.op.Interrupt()
	<-t.done
}

// reopenOperations lets splits and merges start again after a delete that
// failed.
func (ix *Index) reopenOperations() {
	ix.splitMu.Lock()
	ix.closing = false
	ix.splitMu.Unlock()
}

// closingErr refuses an operation on an index being closed or deleted. The
// caller holds ix.splitMu.
func (ix *Index) closingErr() error {
	if !ix.closing {
		return nil
	}
	ix.svc.mu.RLock()
	closed := ix.svc.closed
	ix.svc.mu.RUnlock()
	if closed {
		return errClosed
	}
	return indexNotFound(ix.name)
}
