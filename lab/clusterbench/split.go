package clusterbench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/routing"
)

// The split scenario: the in-place split of a replicated shard across the
// processes, under writes offered through every node. An index of one
// shard and one replica is loaded to a parent size, the writers start,
// and after a steady span POST /{index}/_shards/0/_split splits it in two
// through REST. Measured per run: each child range's write-unavailability
// window (UnavailableWindow), throughput during the split against steady,
// the time to the hand-off and to green, the bytes peer recoveries sent
// and all the nodes sent, disk, and the nodes' counters of the hand-off's
// block and of the stale coordinators' retries (_nodes/stats).

// settingReplicaSplit is the index setting that chooses how the children
// get their replicas. StrategyRecover is the only strategy of a build
// that does not know the setting; StrategyLocal is the scenario's default,
// as it is the cluster's.
const (
	settingReplicaSplit = "index.shardsplit.replica_split"
	StrategyRecover     = "recover"
	StrategyLocal       = "local"
)

// Strategies are the replica-split strategies the scenario knows.
var Strategies = []string{"recover", "local", "handoff-first"}

// SplitConfig shapes the split scenario.
type SplitConfig struct {
	Strategies []string
	ParentSize int64 // bytes of 1 KiB documents loaded into the parent
	Runs       int
	// Load is the write load: Warmup is not measured, Duration is the
	// steady span before the split request.
	Load LoadConfig
	// After is how long the writes go on after the index is green again
	// (default 2 s): the last windows close and the parent is cleaned up.
	After time.Duration
	// Within bounds a split from the request to green (default 10 min).
	Within time.Duration
}

// SplitRun is one split of a replicated shard under load.
type SplitRun struct {
	Strategy string `json:"strategy"`
	// Refused is the cluster's refusal of the strategy (not built, or not
	// accepted by this build's setting); nothing else is measured.
	Refused string `json:"refused,omitempty"`
	// RolledBack is why a split accepted did not hand off (a copy failed,
	// or it was cancelled): the cluster rolled it back. Nothing else is
	// measured; the strategy's later runs still run.
	RolledBack string `json:"rolled_back,omitempty"`
	// Note says how the strategy was chosen when the index setting is not
	// known to this build (the default then applies).
	Note string `json:"note,omitempty"`

	ParentBytes int64             `json:"parent_bytes"` // the parent primary on disk before the split
	Docs        int64             `json:"docs"`
	Children    []routing.ShardID `json:"children"`
	// Windows are each child range's write-unavailability window, since the
	// start of the run; a child without a refused or blocked write has
	// none (zero).
	Windows []Window `json:"windows"`
	// Gaps are each child range's longest span without an acknowledged
	// write, from the request until the writes stopped.
	Gaps []time.Duration `json:"gaps_ns"`
	// Phases are the split's phases as its task showed them (polled every
	// 20 ms), since the start of the run, with the writes acknowledged per
	// second in each.
	Phases []Phase `json:"phases"`
	// Threshold is the steady p99 latency: a write slower is blocked.
	Threshold time.Duration `json:"threshold_ns"`
	SteadyOps float64       `json:"steady_ops_per_s"`
	DuringOps float64       `json:"during_ops_per_s"` // from the request to green
	ToHandoff time.Duration `json:"to_handoff_ns"`    // request → the split's task done (hand-off committed)
	ToGreen   time.Duration `json:"to_green_ns"`      // request → green after the hand-off
	// RecoveryBytes is what the nodes sent as file chunks of peer
	// recoveries during the run (encoded: base64 in JSON, ≈ 4/3 of the
	// file bytes); TransportBytes everything the nodes sent to each other.
	RecoveryBytes  uint64 `json:"recovery_bytes"`
	TransportBytes uint64 `json:"transport_bytes"`
	DiskBefore     int64  `json:"disk_before"` // every node's data directory
	DiskAtGreen    int64  `json:"disk_at_green"`
	DiskAfter      int64  `json:"disk_after"` // After later
	// HandoffBlocked is how long the parent primary's writes were blocked
	// for the hand-off on its node: from the block to its retirement on
	// applying the hand-off record (a cluster-state round trip).
	HandoffBlocked time.Duration `json:"handoff_blocked_ns"`
	// StaleRetries are the writes coordinators routed to the parent, were
	// refused and routed again to a child; StaleWaitTotal the sum of their
	// waits from the refusal to the answer. StaleWaitMax is the longest
	// such wait since the nodes started (a maximum cannot be taken per run
	// from counters).
	StaleRetries   uint64        `json:"stale_retries"`
	StaleWaitTotal time.Duration `json:"stale_wait_total_ns"`
	StaleWaitMax   time.Duration `json:"stale_wait_max_ns"`
	Acked          int           `json:"acked"`
	Errors         int           `json:"errors"`
}

// Phase is a span in which a split's task showed one phase.
type Phase struct {
	Name    string        `json:"name"`
	Start   time.Duration `json:"start_ns"`
	End     time.Duration `json:"end_ns"`
	OpsPerS float64       `json:"ops_per_s"`
}

// MaxWindow is the longest of the run's child windows.
func (r SplitRun) MaxWindow() time.Duration {
	var m time.Duration
	for _, w := range r.Windows {
		m = max(m, w.Len())
	}
	return m
}

// StaleWaitMean is the mean wait of the run's stale retries.
func (r SplitRun) StaleWaitMean() time.Duration {
	if r.StaleRetries == 0 {
		return 0
	}
	return r.StaleWaitTotal / time.Duration(r.StaleRetries)
}

func (cfg *SplitConfig) defaults() {
	cfg.Load.defaults()
	if len(cfg.Strategies) == 0 {
		cfg.Strategies = []string{StrategyLocal}
	}
	if cfg.Runs == 0 {
		cfg.Runs = 5
	}
	if cfg.After == 0 {
		cfg.After = 2 * time.Second
	}
	if cfg.Within == 0 {
		cfg.Within = 10 * time.Minute
	}
}

// Split runs the split scenario: runs times each strategy, the order of
// the strategies rotating from run to run. A strategy the cluster refuses
// is measured no further (its one run says why).
func Split(ctx context.Context, c *Cluster, cfg SplitConfig, progress func(string)) ([]SplitRun, error) {
	cfg.defaults()
	refused := map[string]bool{}
	var out []SplitRun
	for r := range cfg.Runs {
		for k := range cfg.Strategies {
			strategy := cfg.Strategies[(k+r)%len(cfg.Strategies)]
			if refused[strategy] {
				continue
			}
			if err := ctx.Err(); err != nil {
				return out, err
			}
			index := fmt.Sprintf("split-%s-%d", strategy, r)
			run, err := splitRun(ctx, c, index, strategy, cfg)
			if err != nil {
				return out, fmt.Errorf("clusterbench: split %s, run %d: %w", strategy, r+1, err)
			}
			out = append(out, run)
			if run.Refused != "" {
				refused[strategy] = true
				progress(fmt.Sprintf("%s: refused: %s", strategy, run.Refused))
				continue
			}
			if run.RolledBack != "" {
				progress(fmt.Sprintf("run %d, %s: the split was rolled back: %s", r+1, strategy, run.RolledBack))
				continue
			}
			var ws []string
			for i, w := range run.Windows {
				ws = append(ws, fmt.Sprintf("child %d %v (longest without an ack %v)", run.Children[i], w.Len().Round(time.Millisecond),
					run.Gaps[i].Round(time.Millisecond)))
			}
			var ps []string
			for _, p := range run.Phases {
				ps = append(ps, fmt.Sprintf("%s %v at %.0f writes/s", p.Name, (p.End-p.Start).Round(time.Millisecond), p.OpsPerS))
			}
			progress(fmt.Sprintf("run %d, %s: %.0f MiB parent; phases %s; windows %s (steady p99 %v); %.0f writes/s during / %.0f steady; "+
				"hand-off %v, green %v after the request; recovery sent %.1f MiB; stale retries %d (mean wait %v); parent blocked %v",
				r+1, strategy, float64(run.ParentBytes)/(1<<20), strings.Join(ps, ", "), strings.Join(ws, ", "), run.Threshold.Round(100*time.Microsecond),
				run.DuringOps, run.SteadyOps, run.ToHandoff.Round(time.Millisecond), run.ToGreen.Round(time.Millisecond),
				float64(run.RecoveryBytes)/(1<<20), run.StaleRetries, run.StaleWaitMean().Round(time.Millisecond),
				run.HandoffBlocked.Round(time.Millisecond)))
		}
	}
	return out, nil
}

// createSplitIndex creates index (one shard, one replica) with the
// strategy's setting. A build that does not know the setting refuses it;
// the default strategy then runs without it (and the run says so), any
// other is refused.
func createSplitIndex(c *Cluster, index, strategy string) (refused, note string, err error) {
	body := fmt.Sprintf(`{"settings":{"number_of_shards":1,"number_of_replicas":1,%q:%q}}`, settingReplicaSplit, strategy)
	status, answer, err := c.Do("PUT", "/"+index, body)
	if err != nil && status == http.StatusBadRequest {
		if strategy != StrategyRecover {
			return refusal(status, answer, err), "", nil
		}
		if !strings.Contains(err.Error(), "unknown setting") {
			return "", "", err
		}
		note = "this build does not know " + settingReplicaSplit + "; recover is its only strategy"
		if _, _, err = c.Do("PUT", "/"+index, `{"settings":{"number_of_shards":1,"number_of_replicas":1}}`); err != nil {
			return "", "", err
		}
	} else if err != nil {
		return "", "", err
	}
	return "", note, c.WaitGreen(index, 60*time.Second)
}

// recordingSink writes through a Sink and keeps every write's result with
// the child range of its document.
type recordingSink struct {
	s     *Sink
	child func(id, rv string) int
	start time.Time
	mu    sync.Mutex
	by    [][]WriteResult // by child
}

func (r *recordingSink) Write(w int, op loadgen.Op) (int, error) {
	begin := time.Since(r.start)
	retries, err := r.s.Write(w, op)
	res := WriteResult{Start: begin, End: time.Since(r.start), OK: err == nil}
	k := r.child(op.ID, op.Routing)
	r.mu.Lock()
	r.by[k] = append(r.by[k], res)
	r.mu.Unlock()
	return retries, err
}

func splitRun(ctx context.Context, c *Cluster, index, strategy string, cfg SplitConfig) (SplitRun, error) {
	run := SplitRun{Strategy: strategy}
	refused, note, err := createSplitIndex(c, index, strategy)
	if err != nil || refused != "" {
		run.Refused = refused
		return run, err
	}
	run.Note = note
	defer func() { _, _, _ = c.Do("DELETE", "/"+index, "") }()
	if run.Docs, err = bulkLoad(c, index, cfg.ParentSize); err != nil {
		return run, err
	}
	if err := c.WaitGreen(index, 10*time.Minute); err != nil {
		return run, err
	}
	children, route, err := childRoutes(c, index)
	if err != nil {
		return run, err
	}
	run.Children = children
	rows, err := c.Shards(index)
	if err != nil {
		return run, err
	}
	for _, row := range rows {
		if row.Prirep == "p" {
			if i := c.NodeIndex(row.Node); i >= 0 {
				_, run.ParentBytes = largestIndexDir(c.nodes[i].Data)
			}
		}
	}
	run.DiskBefore = c.diskUsed()
	before, err := c.nodeStats()
	if err != nil {
		return run, err
	}

	start := time.Now()
	sink := &recordingSink{s: NewSink(c, index), child: route, start: start, by: make([][]WriteResult, len(children))}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		loadgen.Run(runCtx, loadgen.Config{Writers: cfg.Load.Writers, Rate: cfg.Load.Rate, DocSize: cfg.Load.DocSize, Seed: 3}, sink, start)
	}()
	finish := func() {
		stop()
		wg.Wait()
	}
	if !sleepCtx(ctx, cfg.Load.Warmup+cfg.Load.Duration) {
		finish()
		return run, ctx.Err()
	}
	requested := time.Since(start)
	status, body, err := c.DoOn(0, "POST", "/"+index+"/_shards/0/_split", `{"number_of_splits":2}`)
	if err != nil {
		finish()
		if status >= 400 && status < 500 {
			run.Refused = refusal(status, body, err)
			return run, nil
		}
		return run, err
	}
	var task struct {
		Task string `json:"task"`
	}
	if err := json.Unmarshal(body, &task); err != nil || task.Task == "" {
		finish()
		return run, fmt.Errorf("the split's answer %s: %v", body, err)
	}
	phases, failed, err := c.waitTask(ctx, task.Task, start, cfg.Within)
	if err != nil || failed != "" {
		finish()
		run.RolledBack = failed
		return run, err
	}
	handedOff := time.Since(start)
	if err := c.WaitGreen(index, cfg.Within); err != nil {
		finish()
		return run, err
	}
	green := time.Since(start)
	run.DiskAtGreen = c.diskUsed()
	sleepCtx(ctx, cfg.After)
	finish()
	run.DiskAfter = c.diskUsed()
	after, err := c.nodeStats()
	if err != nil {
		return run, err
	}

	var all []WriteResult
	for _, ws := range sink.by {
		all = append(all, ws...)
	}
	for _, w := range all {
		if w.OK {
			run.Acked++
		} else {
			run.Errors++
		}
	}
	run.ToHandoff, run.ToGreen = handedOff-requested, green-requested
	run.Threshold = LatencyPercentile(all, cfg.Load.Warmup, requested, 99)
	run.SteadyOps = Throughput(all, cfg.Load.Warmup, requested)
	for _, p := range phases {
		p.OpsPerS = Throughput(all, p.Start, p.End)
		run.Phases = append(run.Phases, p)
	}
	run.DuringOps = Throughput(all, requested, green)
	stopped := time.Since(start)
	for _, ws := range sink.by {
		w, _ := UnavailableWindow(ws, requested, run.Threshold)
		run.Windows = append(run.Windows, w)
		run.Gaps = append(run.Gaps, LongestGap(ws, requested, stopped))
	}
	d := after.minus(before)
	run.RecoveryBytes, run.TransportBytes = d.RecoveryBytes, d.TransportBytes
	run.StaleRetries, run.StaleWaitTotal, run.StaleWaitMax = d.StaleRetries, d.StaleWaitTotal, after.StaleWaitMax
	if d.Handoffs > 0 {
		run.HandoffBlocked = d.HandoffTotal / time.Duration(d.Handoffs)
	}
	return run, nil
}

// refusal is a refused request's status and OpenSearch error reason (the
// whole error when the body has none).
func refusal(status int, body []byte, err error) string {
	var e struct {
		Error struct {
			Type   string `json:"type"`
			Reason string `json:"reason"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error.Reason == "" {
		return err.Error()
	}
	return fmt.Sprintf("%d %s: %s", status, e.Error.Type, e.Error.Reason)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// childRoutes returns the children a split of shard 0 of index in two
// makes and a function from a document to the position of its child, from
// the index's routing as the cluster state has it.
func childRoutes(c *Cluster, index string) ([]routing.ShardID, func(id, rv string) int, error) {
	_, b, err := c.Do("GET", "/_cluster/state/metadata/"+index, "")
	if err != nil {
		return nil, nil, err
	}
	var st struct {
		Metadata struct {
			Indices map[string]struct {
				RoutingNumShards int `json:"routing_num_shards"`
			} `json:"indices"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, nil, fmt.Errorf("the cluster state of %s: %w", index, err)
	}
	im, ok := st.Metadata.Indices[index]
	if !ok {
		return nil, nil, fmt.Errorf("the cluster state has no index %s", index)
	}
	settings, err := routing.NewSettings(index, 1, im.RoutingNumShards, 0)
	if err != nil {
		return nil, nil, err
	}
	t, err := routing.NewTable(routing.ModePartition, settings)
	if err != nil {
		return nil, nil, err
	}
	if t, err = routing.Apply(t, routing.Edit{Kind: routing.BeginSplit, Shard: 0, Ways: 2}); err != nil {
		return nil, nil, err
	}
	rec, _ := t.Split(0)
	var children []routing.ShardID
	for _, ch := range rec.Children {
		children = append(children, ch.Shard)
	}
	if t, err = routing.Apply(t, routing.Edit{Kind: routing.CommitSplit, Shard: 0, Children: children}); err != nil {
		return nil, nil, err
	}
	pos := map[routing.ShardID]int{}
	for i, ch := range children {
		pos[ch] = i
	}
	return children, func(id, rv string) int {
		_, sh := t.Route(id, rv)
		return pos[sh]
	}, nil
}

// waitTask waits until the task is completed, and returns the phases its
// status showed (since start) until then and, for a task that ended in an
// error, the error's reason.
func (c *Cluster) waitTask(ctx context.Context, id string, start time.Time, within time.Duration) ([]Phase, string, error) {
	deadline := time.Now().Add(within)
	var phases []Phase
	for {
		_, b, err := c.Do("GET", "/_tasks/"+id, "")
		now := time.Since(start)
		if err != nil {
			return phases, "", err
		}
		var t struct {
			Completed bool            `json:"completed"`
			Error     json.RawMessage `json:"error"`
			Task      struct {
				Status struct {
					Phase string `json:"phase"`
				} `json:"status"`
			} `json:"task"`
		}
		if err := json.Unmarshal(b, &t); err != nil {
			return phases, "", fmt.Errorf("task %s: %w", id, err)
		}
		if n := len(phases); n > 0 {
			phases[n-1].End = now
		}
		if n := len(phases); !t.Completed && (n == 0 || phases[n-1].Name != t.Task.Status.Phase) {
			phases = append(phases, Phase{Name: t.Task.Status.Phase, Start: now, End: now})
		}
		if t.Completed {
			if len(t.Error) > 0 && string(t.Error) != "null" {
				var e struct {
					Type   string `json:"type"`
					Reason string `json:"reason"`
				}
				if json.Unmarshal(t.Error, &e) != nil || e.Reason == "" {
					return phases, string(t.Error), nil
				}
				return phases, e.Type + ": " + e.Reason, nil
			}
			return phases, "", nil
		}
		if time.Now().After(deadline) {
			return phases, "", fmt.Errorf("task %s not completed within %v", id, within)
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return phases, "", ctx.Err()
		}
	}
}

// diskUsed is the bytes in every node's data directory.
func (c *Cluster) diskUsed() int64 {
	var n int64
	for _, node := range c.nodes {
		n += dirSize(node.Data)
	}
	return n
}

// splitStats are the nodes' split counters, summed (maxima: the largest).
type splitStats struct {
	RecoveryBytes, TransportBytes, Handoffs, StaleRetries uint64
	HandoffTotal, StaleWaitTotal, StaleWaitMax            time.Duration
}

func (a splitStats) minus(b splitStats) splitStats {
	return splitStats{RecoveryBytes: a.RecoveryBytes - b.RecoveryBytes, TransportBytes: a.TransportBytes - b.TransportBytes,
		Handoffs: a.Handoffs - b.Handoffs, StaleRetries: a.StaleRetries - b.StaleRetries,
		HandoffTotal: a.HandoffTotal - b.HandoffTotal, StaleWaitTotal: a.StaleWaitTotal - b.StaleWaitTotal}
}

// nodeStats reads every live node's own counters from its _nodes/stats.
func (c *Cluster) nodeStats() (splitStats, error) {
	var sum splitStats
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	for i := range c.nodes {
		if !c.Alive(i) {
			continue
		}
		_, b, err := c.DoOn(i, "GET", "/_nodes/_local/stats/transport", "")
		if err != nil {
			return sum, err
		}
		var r struct {
			Nodes map[string]struct {
				Transport struct {
					TxSize uint64 `json:"tx_size_in_bytes"`
				} `json:"transport"`
				Split *struct {
					Recovery struct {
						Bytes uint64 `json:"chunk_size_in_bytes"`
					} `json:"recovery"`
					Handoff struct {
						Count   uint64  `json:"count"`
						Blocked float64 `json:"blocked_time_in_millis"`
					} `json:"handoff"`
					Stale struct {
						Retried uint64  `json:"retried"`
						Wait    float64 `json:"wait_time_in_millis"`
						MaxWait float64 `json:"max_wait_time_in_millis"`
					} `json:"stale_coordinator"`
				} `json:"shard_split"`
			} `json:"nodes"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			return sum, fmt.Errorf("%s's node stats: %w", c.nodes[i].Name, err)
		}
		found := false
		for _, n := range r.Nodes {
			if n.Split == nil {
				continue
			}
			found = true
			sum.TransportBytes += n.Transport.TxSize
			sum.RecoveryBytes += n.Split.Recovery.Bytes
			sum.Handoffs += n.Split.Handoff.Count
			sum.HandoffTotal += ms(n.Split.Handoff.Blocked)
			sum.StaleRetries += n.Split.Stale.Retried
			sum.StaleWaitTotal += ms(n.Split.Stale.Wait)
			sum.StaleWaitMax = max(sum.StaleWaitMax, ms(n.Split.Stale.MaxWait))
		}
		if !found {
			return sum, errors.New(c.nodes[i].Name + "'s node stats have no shard_split section")
		}
	}
	return sum, nil
}
