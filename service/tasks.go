package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
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

// Task is one in-place split or merge running (or finished) as a task. Its
// operation runs in its own goroutine, one intent at a time; a cancel is a
// request the goroutine carries out between two intents, so the operation
// is only ever stepped by one goroutine. Splits and merges differ only in
// the request that made the task (StartSplit, StartMerge): the task runs
// the plan it was given.
type Task struct {
	ID    string // "<node>:<n>"
	Num   int64
	Node  string
	Start time.Time
	req   taskRequest
	ix    *Index
	op    *splitter.Operation
	watch *clusterWatch // in cluster mode, the split the task watches (op and ix nil)

	cancel atomic.Bool
	stop   chan struct{}
	done   chan struct{}
	status atomic.Pointer[TaskStatus]
}

// taskRequest is what a split or merge request asked for, in the words its
// task uses; the plan goes to the driver.
type taskRequest struct {
	action      string            // SplitAction or MergeAction
	kind        string            // "split" or "merge"
	index       string            // the index
	shards      []routing.ShardID // the shards it takes apart or together (a split's one, a merge's, ascending)
	description string            // the task's description
	busy        string            // what the index is doing, for refusals of other operations: "splitting shard [3]"
	subject     string            // the operation, for a refused cancel: "the split of shard [3]"
	owners      string            // who owns the documents past the handoff: "the children own"
}

// TaskStatus is a task's state after its last step, in the service's
// terms.
type TaskStatus struct {
	Phase     string // the operation's phase: "prepare", "clone", "catch-up", "handoff", "cleanup", "done", "aborting", "aborted", "failed"
	Done      bool   // ended done: the targets own the documents
	Published bool   // past its commit point: it can only complete
	// Targets are the shards the operation makes (a split's children, a
	// merge's target), ascending; none before its reservation.
	Targets   []routing.ShardID
	Completed bool
	Cancelled bool
	Err       error // the operation could not reach a clean end, or aborted
	// CancelRefused says why a cancel accepted by CancelTask came too late
	// (the operation reached its handoff before the task carried the
	// cancel out).
	CancelRefused string
	End           time.Time

	// What the operation measured so far (complete once Completed).
	Took           time.Duration
	PhaseDurations map[string]time.Duration // by phase name
	Stall          time.Duration            // the longest a shard's writes waited on the handoff's fence
	Commit         time.Duration            // unfence to durable table at the handoff
	Handoffs       int
	StallWaits     int
	StallWaited    time.Duration
	CaughtUp       int // writes replayed into the targets
	Linked         int64
	Copied         int64
	SeqAtClone     uint64
	DiskBefore     int64
	TableVersion   routing.Version
}

// statusOf is the status of an operation that reports rep.
func statusOf(rep splitter.Report) TaskStatus {
	st := TaskStatus{Phase: rep.Phase.String(), Done: rep.Phase == splitter.PhaseDone, Published: rep.Phase.Published(),
		Targets: rep.SortedTargets(), Took: rep.Total, PhaseDurations: map[string]time.Duration{}, Stall: rep.Stall,
		Commit: rep.Commit, Handoffs: rep.Handoffs, StallWaits: rep.StallWaits, StallWaited: rep.StallWaited,
		CaughtUp: rep.CaughtUp, Linked: rep.Linked, Copied: rep.Copied, SeqAtClone: rep.SeqAtClone,
		DiskBefore: rep.DiskBefore, TableVersion: rep.ToVersion}
	for p, d := range rep.Durations {
		st.PhaseDurations[p.String()] = d
	}
	return st
}

// Status returns the task's latest state.
func (t *Task) Status() TaskStatus { return *t.status.Load() }

// Index is the name of the index the task splits or merges shards of.
func (t *Task) Index() string { return t.req.index }

// Action is the task's action name: SplitAction or MergeAction.
func (t *Task) Action() string { return t.req.action }

// Shards are the shards the task takes apart or together: a split's one,
// a merge's, ascending.
func (t *Task) Shards() []routing.ShardID { return slices.Clone(t.req.shards) }

// Description is the task's description.
func (t *Task) Description() string { return t.req.description }

// kind is "split" or "merge", for messages.
func (t *Task) kind() string { return t.req.kind }

// busy says what the task is doing, for refusals of other operations:
// "splitting shard [3]" or "merging shards [8, 9]".
func (t *Task) busy() string { return t.req.busy }

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
// unfinished operation to recovery.
func (t *Task) halt() {
	select {
	case <-t.stop:
	default:
		close(t.stop)
	}
	if t.op != nil {
		t.op.Interrupt()
	}
	<-t.done
}

// startTask starts the operation of plan on ix as a task. Under the
// index's operation lock, once the index is open to operations, check (if
// set) refuses what the request's own rules refuse given the running task
// (nil when none); then the operation takes its first step, its
// reservation, whose refusal is the request's error.
func (s *Service) startTask(ix *Index, req taskRequest, plan splitter.Plan, check func(running *Task) error) (*Task, error) {
	ix.splitMu.Lock()
	defer ix.splitMu.Unlock()
	if err := ix.closingErr(); err != nil {
		return nil, err
	}
	if check != nil {
		if err := check(ix.split); err != nil {
			return nil, err
		}
	}
	task, err := s.newTask(ix, req)
	if err != nil {
		return nil, err
	}
	task.op = ix.driver.Start(plan)
	if err := s.launch(task); err != nil {
		return nil, err
	}
	s.log.Info("task started", zap.String("task", task.ID), zap.String("action", req.action), zap.String("index", req.index),
		zap.Any("shards", req.shards))
	return task, nil
}

// busyErr refuses a second operation on an index while one runs.
func (ix *Index) busyErr(run *Task) *Error {
	return newErr(TypeIllegalState, http.StatusConflict, ix.name,
		"index [%s] is already %s (task [%s]); one in-place split or merge per index at a time", ix.name, run.busy(), run.ID)
}

// newTask returns a task of ix with the next id; launch registers it.
// A single node's task numbers continue across restarts: the number is
// written to the metadata before the task exists (a cluster's tasks live
// with their node's process).
func (s *Service) newTask(ix *Index, req taskRequest) (*Task, error) {
	node := s.NodeID()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tasks.mu.Lock()
	defer s.tasks.mu.Unlock()
	num := max(s.tasks.next, s.st.LastTask) + 1
	if s.cl == nil {
		if err := s.update(func(st *state) error { st.LastTask = num; return nil }); err != nil {
			return nil, err
		}
	}
	s.tasks.next = num
	task := &Task{Num: num, Node: node, Start: time.Now(), req: req, ix: ix,
		stop: make(chan struct{}), done: make(chan struct{})}
	task.ID = task.Node + ":" + strconv.FormatInt(task.Num, 10)
	return task, nil
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
	st := statusOf(task.op.Report())
	task.status.Store(&st)
	s.tasks.mu.Lock()
	s.tasks.all[task.ID] = task
	s.tasks.mu.Unlock()
	task.ix.split = task
	go task.run()
	return nil
}

// launchErr is the request's error for an operation that did not get past
// its reservation. The driver refuses to begin one while another is
// unfinished (after the table, whose refusal names the shards): while a
// task runs on the index that is the index being busy.
func (s *Service) launchErr(task *Task, err error) error {
	s.log.Info("reservation refused", zap.String("action", task.Action()), zap.String("index", task.Index()), zap.Error(err))
	var unfinished *splitter.UnfinishedError
	if run := task.ix.split; run != nil && errors.As(err, &unfinished) {
		return task.ix.busyErr(run)
	}
	e := AsError(err)
	if e.Index == "" {
		e.Index = task.Index()
	}
	return e
}

// end frees the index for its next operation, then stores the task's
// final status: a client that sees the task completed (GET _tasks) can
// start the next split or merge at once.
func (t *Task) end(st *TaskStatus) {
	t.ix.splitMu.Lock()
	if t.ix.split == t {
		t.ix.split = nil
	}
	t.ix.splitMu.Unlock()
	t.status.Store(st)
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
				// A handoff holds the shards' apply locks across its next
				// intents (replay, publish, unfence: in memory, bounded):
				// stopping now would leave the writers waiting on them for
				// good. Step to the unfence first.
				break
			}
			st := statusOf(t.op.Report())
			st.Completed, st.End = true, time.Now()
			st.Err = fmt.Errorf("the node shut down during the %s; recovery decides it on restart", t.kind())
			t.end(&st)
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
		st := statusOf(t.op.Report())
		st.Cancelled, st.CancelRefused = cancelled, refused
		t.status.Store(&st)
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
	st := statusOf(rep)
	st.Completed, st.Cancelled, st.CancelRefused = true, cancelled && rep.Phase == splitter.PhaseAborted, refused
	st.Err, st.End = runErr, time.Now()
	t.end(&st)
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
	st := t.Status()
	if st.Completed {
		return nil, newErr(TypeIllegalState, http.StatusBadRequest, t.Index(), "task [%s] has already completed (phase %s)", id, st.Phase)
	}
	if t.watch != nil {
		return s.clusterCancelSplit(t)
	}
	if st.Published {
		return nil, newErr(TypeIllegalState, http.StatusBadRequest, t.Index(),
			"cannot cancel task [%s]: %s has passed its handoff (phase %s); %s the documents and it can only complete",
			id, t.req.subject, st.Phase, t.req.owners)
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
