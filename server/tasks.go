package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/service"
)

// SplitBody is the body of POST /{index}/_shards/{shard_id}/_split.
type SplitBody struct {
	Ways   int
	Points []int64
}

// ParseSplitBody parses {"number_of_splits": N} or {"split_points": [...]}.
func ParseSplitBody(body []byte) (SplitBody, error) {
	var sb SplitBody
	m, err := decodeRequestObject(body, "split")
	if err != nil {
		return sb, err
	}
	if err := checkKeys(m, "split", "number_of_splits", "split_points"); err != nil {
		return sb, err
	}
	_, hasN := m["number_of_splits"]
	_, hasP := m["split_points"]
	switch {
	case hasN && hasP:
		return sb, &service.Error{Type: service.TypeValidation, Status: http.StatusBadRequest,
			Reason: "Validation Failed: 1: give either [number_of_splits] or [split_points], not both;"}
	case !hasN && !hasP:
		return sb, &service.Error{Type: service.TypeValidation, Status: http.StatusBadRequest,
			Reason: "Validation Failed: 1: number_of_splits or split_points is missing;"}
	case hasN:
		if err := json.Unmarshal(m["number_of_splits"], &sb.Ways); err != nil {
			return sb, parseErr("[number_of_splits] must be an integer")
		}
		if sb.Ways < 2 {
			return sb, &service.Error{Type: service.TypeValidation, Status: http.StatusBadRequest,
				Reason: fmt.Sprintf("Validation Failed: 1: number_of_splits must be at least 2, got [%d];", sb.Ways)}
		}
	default:
		if err := json.Unmarshal(m["split_points"], &sb.Points); err != nil || len(sb.Points) == 0 {
			return sb, parseErr("[split_points] must be a non-empty array of integers")
		}
	}
	return sb, nil
}

func (s *Server) splitShard(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "wait_for_completion", "timeout", "master_timeout", "cluster_manager_timeout")
	if err != nil {
		return err
	}
	wait, err := boolParam(q, "wait_for_completion", false)
	if err != nil {
		return err
	}
	shard, err := shardIDParam(r)
	if err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	sb, err := ParseSplitBody(body)
	if err != nil {
		return err
	}
	task, err := s.svc.StartSplit(service.SplitRequest{Index: r.PathValue("index"), Shard: shard, Ways: sb.Ways, Points: sb.Points})
	if err != nil {
		return err
	}
	return s.answerTask(w, r, task, wait)
}

// ParseMergeBody parses {"shards": [a, b, ...]}: shard ids, at least two
// of them adjacent leaves of one root (the table checks that, with its
// own messages).
func ParseMergeBody(body []byte) ([]routing.ShardID, error) {
	m, err := decodeRequestObject(body, "merge")
	if err != nil {
		return nil, err
	}
	if err := checkKeys(m, "merge", "shards"); err != nil {
		return nil, err
	}
	raw, ok := m["shards"]
	if !ok {
		return nil, &service.Error{Type: service.TypeValidation, Status: http.StatusBadRequest,
			Reason: "Validation Failed: 1: shards is missing;"}
	}
	var ids []uint32
	if err := json.Unmarshal(raw, &ids); err != nil || ids == nil {
		return nil, parseErr("[shards] must be an array of shard ids (integers from 0 to %d), got %s", uint32(math.MaxUint32), raw)
	}
	out := make([]routing.ShardID, len(ids))
	for i, id := range ids {
		out[i] = routing.ShardID(id)
	}
	return out, nil
}

func (s *Server) mergeShards(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "wait_for_completion", "timeout", "master_timeout", "cluster_manager_timeout")
	if err != nil {
		return err
	}
	wait, err := boolParam(q, "wait_for_completion", false)
	if err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	shards, err := ParseMergeBody(body)
	if err != nil {
		return err
	}
	task, err := s.svc.StartMerge(service.MergeRequest{Index: r.PathValue("index"), Shards: shards})
	if err != nil {
		return err
	}
	return s.answerTask(w, r, task, wait)
}

// answerTask answers a request that started a task: its id, or with
// wait_for_completion its result (or its error).
func (s *Server) answerTask(w http.ResponseWriter, r *http.Request, task *service.Task, wait bool) error {
	if !wait {
		s.writeJSON(w, r, http.StatusOK, map[string]any{"task": task.ID})
		return nil
	}
	if err := task.Wait(r.Context()); err != nil {
		return err
	}
	st := task.Status()
	if st.Err != nil {
		return taskError(task, st)
	}
	s.writeJSON(w, r, http.StatusOK, taskResponse(task, st))
	return nil
}

// taskError is the error a task ended with, in OpenSearch's shape.
func taskError(t *service.Task, st service.TaskStatus) *service.Error {
	e := service.AsError(st.Err)
	if e.Index == "" {
		e.Index = t.Index()
	}
	return e
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// taskResponse is the result of a finished split or merge.
func taskResponse(t *service.Task, st service.TaskStatus) map[string]any {
	out := map[string]any{
		"acknowledged":     st.Done,
		"phase":            st.Phase,
		"took_ms":          ms(st.Took),
		"stall_ms":         ms(st.Stall),
		"commit_ms":        ms(st.Commit),
		"handoffs":         st.Handoffs,
		"stall_waits":      st.StallWaits,
		"stall_waited_ms":  ms(st.StallWaited),
		"caught_up_ops":    st.CaughtUp,
		"linked_bytes":     st.Linked,
		"copied_bytes":     st.Copied,
		"table_version":    st.TableVersion,
		"phase_durations":  phaseDurations(st),
		"seq_no_at_clone":  st.SeqAtClone,
		"disk_before_byte": st.DiskBefore,
	}
	for k, v := range operands(t, st) {
		out[k] = v
	}
	return out
}

// operands are the shards a task acts on: a split's shard and children, a
// merge's shards (sources) and target (0 until reserved).
func operands(t *service.Task, st service.TaskStatus) map[string]any {
	targets := append([]routing.ShardID{}, st.Targets...)
	if t.Action() == service.MergeAction {
		target := routing.ShardID(0)
		if len(targets) == 1 {
			target = targets[0]
		}
		return map[string]any{"shards": t.Shards(), "target": target}
	}
	return map[string]any{"shard": t.Shards()[0], "children": targets}
}

func phaseDurations(st service.TaskStatus) map[string]float64 {
	out := map[string]float64{}
	for p, d := range st.PhaseDurations {
		out[p+"_ms"] = ms(d)
	}
	return out
}

func (s *Server) taskBody(t *service.Task) map[string]any {
	st := t.Status()
	end := time.Now()
	if st.Completed {
		end = st.End
	}
	status := map[string]any{
		"index":            t.Index(),
		"phase":            st.Phase,
		"phase_durations":  phaseDurations(st),
		"handoffs":         st.Handoffs,
		"stall_waits":      st.StallWaits,
		"stall_waited_ms":  ms(st.StallWaited),
		"cancel_requested": st.Cancelled,
	}
	for k, v := range operands(t, st) {
		status[k] = v
	}
	if st.CancelRefused != "" {
		status["cancel_refused"] = st.CancelRefused
	}
	body := map[string]any{
		"completed": st.Completed,
		"task": map[string]any{
			"node":                  t.Node,
			"id":                    t.Num,
			"type":                  "transport",
			"action":                t.Action(),
			"description":           t.Description(),
			"start_time_in_millis":  t.Start.UnixMilli(),
			"running_time_in_nanos": end.Sub(t.Start).Nanoseconds(),
			"cancellable":           !st.Published && !st.Completed,
			"cancelled":             st.Cancelled,
			"headers":               map[string]any{},
			"status":                status,
		},
	}
	if st.Completed {
		if st.Err != nil {
			body["error"] = errorBody(taskError(t, st))["error"]
		} else {
			body["response"] = taskResponse(t, st)
		}
	}
	return body
}

func (s *Server) getTask(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "wait_for_completion", "timeout")
	if err != nil {
		return err
	}
	t, err := s.svc.Task(r.PathValue("task_id"))
	if err != nil {
		if handled, ferr := s.forwardTask(w, r, r.PathValue("task_id")); handled {
			return ferr
		}
		return err
	}
	if wait, err := boolParam(q, "wait_for_completion", false); err != nil {
		return err
	} else if wait {
		timeout, err := durationParam(q, "timeout", 30*time.Second)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		if err := t.Wait(ctx); err != nil {
			return &service.Error{Type: "receive_timeout_transport_exception", Status: http.StatusRequestTimeout,
				Reason: fmt.Sprintf("timed out waiting for task [%s] to complete", t.ID)}
		}
	}
	s.writeJSON(w, r, http.StatusOK, s.taskBody(t))
	return nil
}

func (s *Server) listTasks(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r, "actions", "detailed", "nodes", "parent_task_id", "wait_for_completion", "group_by", "timeout"); err != nil {
		return err
	}
	tasks := map[string]any{}
	for _, t := range s.svc.Tasks() {
		if !t.Status().Completed {
			tasks[t.ID] = s.taskBody(t)["task"]
		}
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"nodes": map[string]any{s.svc.NodeID(): map[string]any{
		"name": s.svc.NodeName(), "transport_address": s.ipAddr + ":9300", "host": s.ipAddr, "ip": s.ipAddr + ":9300",
		"roles": nodeRoles, "tasks": tasks,
	}}})
	return nil
}

func (s *Server) cancelTask(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "wait_for_completion", "actions", "nodes", "parent_task_id")
	if err != nil {
		return err
	}
	t, err := s.svc.CancelTask(r.PathValue("task_id"))
	if err != nil {
		if _, lerr := s.svc.Task(r.PathValue("task_id")); lerr != nil {
			if handled, ferr := s.forwardTask(w, r, r.PathValue("task_id")); handled {
				return ferr
			}
		}
		return err
	}
	if wait, err := boolParam(q, "wait_for_completion", false); err != nil {
		return err
	} else if wait {
		if err := t.Wait(r.Context()); err != nil {
			return err
		}
	}
	task := s.taskBody(t)["task"]
	s.writeJSON(w, r, http.StatusOK, map[string]any{"nodes": map[string]any{s.svc.NodeID(): map[string]any{
		"name": s.svc.NodeName(), "transport_address": s.ipAddr + ":9300", "host": s.ipAddr, "ip": s.ipAddr + ":9300",
		"roles": nodeRoles, "tasks": map[string]any{t.ID: task},
	}}})
	return nil
}
