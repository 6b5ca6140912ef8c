package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/service"
	"github.com/shardsplit/shardsplit/splitter"
)

// SplitBody is the body of POST /{index}/_shards/{shard_id}/_split.
type SplitBody struct {
	Ways   int
	Points []int64
}

// ParseSplitBody parses {"number_of_splits": N} or {"split_points": [...]}.
func ParseSplitBody(body []byte) (SplitBody, error) {
	var sb SplitBody
	m, err := decodeObject(body)
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
	shard, err := strconv.ParseUint(r.PathValue("shard_id"), 10, 32)
	if err != nil {
		return &service.Error{Type: service.TypeIllegalArgument, Status: http.StatusBadRequest,
			Reason: fmt.Sprintf("Failed to parse int parameter [shard_id] with value [%s]", r.PathValue("shard_id"))}
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	sb, err := ParseSplitBody(body)
	if err != nil {
		return err
	}
	task, err := s.svc.StartSplit(service.SplitRequest{Index: r.PathValue("index"), Shard: routing.ShardID(shard), Ways: sb.Ways, Points: sb.Points})
	if err != nil {
		return err
	}
	return s.answerTask(w, r, task, wait)
}

// ParseMergeBody parses {"shards": [a, b, ...]}: shard ids, at least two
// of them adjacent leaves of one root (the table checks that, with its
// own messages).
func ParseMergeBody(body []byte) ([]routing.ShardID, error) {
	m, err := decodeObject(body)
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
	snap := task.Snapshot()
	if snap.Err != nil {
		e := service.AsError(snap.Err)
		if e.Index == "" {
			e.Index = task.Index()
		}
		return e
	}
	s.writeJSON(w, r, http.StatusOK, taskResponse(task, snap))
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// taskResponse is the result of a finished split or merge.
func taskResponse(t *service.Task, snap service.TaskSnapshot) map[string]any {
	rep := snap.Report
	out := map[string]any{
		"acknowledged":     rep.Phase == splitter.PhaseDone,
		"phase":            rep.Phase.String(),
		"took_ms":          ms(rep.Total),
		"stall_ms":         ms(rep.Stall),
		"commit_ms":        ms(rep.Commit),
		"handoffs":         rep.Handoffs,
		"stall_waits":      rep.StallWaits,
		"stall_waited_ms":  ms(rep.StallWaited),
		"caught_up_ops":    rep.CaughtUp,
		"linked_bytes":     rep.Linked,
		"copied_bytes":     rep.Copied,
		"table_version":    rep.ToVersion,
		"phase_durations":  phaseDurations(rep),
		"seq_no_at_clone":  rep.SeqAtClone,
		"disk_before_byte": rep.DiskBefore,
	}
	for k, v := range operands(t, rep) {
		out[k] = v
	}
	return out
}

// operands are the shards a task acts on: a split's shard and children, a
// merge's shards (sources) and target (0 until reserved).
func operands(t *service.Task, rep splitter.Report) map[string]any {
	if t.Merge != nil {
		target := routing.ShardID(0)
		if len(rep.Targets) == 1 {
			target = rep.Targets[0]
		}
		return map[string]any{"shards": append([]routing.ShardID{}, t.Merge.Shards...), "target": target}
	}
	return map[string]any{"shard": t.Req.Shard, "children": append([]routing.ShardID{}, rep.SortedTargets()...)}
}

func phaseDurations(rep splitter.Report) map[string]float64 {
	out := map[string]float64{}
	for p, d := range rep.Durations {
		out[p.String()+"_ms"] = ms(d)
	}
	return out
}

func (s *Server) taskBody(t *service.Task) map[string]any {
	snap := t.Snapshot()
	end := time.Now()
	if snap.Completed {
		end = snap.End
	}
	status := map[string]any{
		"index":            t.Index(),
		"phase":            snap.Phase.String(),
		"phase_durations":  phaseDurations(snap.Report),
		"handoffs":         snap.Report.Handoffs,
		"stall_waits":      snap.Report.StallWaits,
		"stall_waited_ms":  ms(snap.Report.StallWaited),
		"cancel_requested": snap.Cancelled,
	}
	for k, v := range operands(t, snap.Report) {
		status[k] = v
	}
	if snap.CancelRefused != "" {
		status["cancel_refused"] = snap.CancelRefused
	}
	body := map[string]any{
		"completed": snap.Completed,
		"task": map[string]any{
			"node":                  t.Node,
			"id":                    t.Num,
			"type":                  "transport",
			"action":                t.Action(),
			"description":           t.Description(),
			"start_time_in_millis":  t.Start.UnixMilli(),
			"running_time_in_nanos": end.Sub(t.Start).Nanoseconds(),
			"cancellable":           !snap.Phase.Published() && !snap.Completed,
			"cancelled":             snap.Cancelled,
			"headers":               map[string]any{},
			"status":                status,
		},
	}
	if snap.Completed {
		if snap.Err != nil {
			e := service.AsError(snap.Err)
			if e.Index == "" {
				e.Index = t.Index()
			}
			body["error"] = errorBody(e)["error"]
		} else {
			body["response"] = taskResponse(t, snap)
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
		if !t.Snapshot().Completed {
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
