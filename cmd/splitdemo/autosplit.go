package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/shardsplit/shardsplit/autosplit"
	"github.com/shardsplit/shardsplit/lab/experiment"
	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/policy"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

const autosplitUsage = `splitdemo autosplit: load-based automatic splitting (and merging) under a moving hot spot.

Usage:
  splitdemo autosplit [flags]

An index (4 shards, routing shards 256, routing_partition_size 1, 8 tenants
routed with a custom routing value) takes continuous fsync'd writes whose hot
tenant moves: for the first 35% of the run tenant A takes 35% of the writes,
for the next 35% tenant B takes 55%, then the load is spread evenly. Nothing
is split by hand: every 500 ms the policy (package policy) reads each shard's
statistics and the table and decides at most one action, which is carried
out at once — splits with the online split, merges with the in-place merge. Every
acknowledged write is verified at the end.

The thresholds are the anchors' (CockroachDB 2,500 writes/s, TiKV 10 s, 5 min)
scaled down so that a laptop-sized run shows them: split above 420 writes/s
sustained 3 s; merge when two adjacent leaves' combined peak over 6 s is under
210 writes/s; a load-based split's children may merge after 10 s.

Writes to --out (default ./autosplit-out/): report.md, shard-writes.png,
timeline.csv, summary.json.

Flags:
  --duration D     how long the writes run (default 120s; the run takes ~15 s more)
  --rate N         target writes per second, all writers (default 1000)
  --writers N      concurrent writers (default 32)
  --mode MODE      partition or opensearch (default partition)
  --seed N         workload seed (default 1)
  --out DIR        output directory (default ./autosplit-out)
  --json FILE      also write summary.json to FILE
  --data DIR       where to build the index (default: a temporary directory, removed)
  --log-level L    zap level for the log on stderr (default warn)
`

type autosplitConfig struct {
	duration            time.Duration
	rate                float64
	writers             int
	mode                routing.Mode
	seed                uint64
	out, jsonPath, data string
	logLevel            string
	args                []string
	// Scaled down for a short run (the test's tiny duration).
	docs int
	tick time.Duration
	th   policy.Thresholds
}

// demoThresholds are the anchors scaled down for a run of minutes.
func demoThresholds() policy.Thresholds {
	return policy.Thresholds{
		SplitWritesPerSec: 420,
		SplitSustain:      3 * time.Second,
		MaxShardBytes:     1 << 30,
		MergeWindow:       6 * time.Second,
		MergeLoadFraction: 0.5,
		MergeDelay:        10 * time.Second,
		MinKeySamples:     20,
		RetryAfter:        3 * time.Second,
	}
}

func parseAutosplit(args []string, stdout io.Writer) (*autosplitConfig, int, error) {
	fs := flag.NewFlagSet("autosplit", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := &autosplitConfig{args: args, docs: 20000, tick: 500 * time.Millisecond, th: demoThresholds()}
	fs.DurationVar(&c.duration, "duration", 120*time.Second, "")
	fs.Float64Var(&c.rate, "rate", 1000, "")
	fs.IntVar(&c.writers, "writers", 32, "")
	mode := fs.String("mode", "partition", "")
	fs.Uint64Var(&c.seed, "seed", 1, "")
	fs.StringVar(&c.out, "out", "autosplit-out", "")
	fs.StringVar(&c.jsonPath, "json", "", "")
	fs.StringVar(&c.data, "data", "", "")
	fs.StringVar(&c.logLevel, "log-level", "warn", "")
	if code, err := parseFlags(fs, args, autosplitUsage, stdout); err != nil {
		return nil, code, err
	}
	var err error
	if c.mode, err = routing.ParseMode(*mode); err != nil {
		return nil, exitUsage, err
	}
	switch {
	case c.duration <= 0:
		return nil, exitUsage, fmt.Errorf("--duration %v must be positive", c.duration)
	case c.writers < 1:
		return nil, exitUsage, fmt.Errorf("--writers %d must be at least 1", c.writers)
	}
	if err := paceable("--rate", c.rate, c.writers, fmt.Sprintf("one write per writer of %d", c.writers)); err != nil {
		return nil, exitUsage, err
	}
	if _, err := newLogger(c.logLevel); err != nil { // a usage error, before anything is built
		return nil, exitUsage, err
	}
	return c, exitOK, nil
}

func runAutosplit(args []string, stdout, stderr io.Writer) int {
	cfg, code, err := parseAutosplit(args, stdout)
	if err != nil {
		if code != exitOK {
			fmt.Fprintf(stderr, "splitdemo autosplit: %v (try 'splitdemo help autosplit')\n", err)
		}
		return code
	}
	undo, err := prepareOutputs(cfg.out, cfg.jsonPath)
	if err != nil {
		fmt.Fprintf(stderr, "splitdemo autosplit: %v\n", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := autosplitRun(ctx, cfg, stderr)
	if err != nil {
		undo() // nothing to write: leave no empty --out behind
		fmt.Fprintf(stderr, "splitdemo autosplit: %v\n", err)
		return exitFail
	}
	if err := writeAutosplitOutputs(cfg, res); err != nil {
		fmt.Fprintf(stderr, "splitdemo autosplit: write outputs: %v\n", err)
		return exitFail
	}
	fmt.Fprintln(stdout, res.reading)
	fmt.Fprintf(stdout, "outputs in %s\n", cfg.out)
	if !res.verified() {
		return exitFail
	}
	return exitOK
}

// verified reports whether the run checked something and found it right:
// a run whose load acknowledged no write verified nothing, and one whose
// writes got errors failed, however it verified (the splits and merges
// are in place: no write may fail because of them, and verification
// allows whatever a failed write left).
func (r *autosplitResult) verified() bool { return r.verify.OK() && r.acked > 0 && r.failed == 0 }

// phase is one stretch of the run's load.
type phase struct {
	Name      string  `json:"name"`
	Tenant    string  `json:"hot_tenant"` // "" = none
	Share     float64 `json:"hot_share"`
	From, To  time.Duration
	FromMs    int64   `json:"from_ms"`
	ToMs      int64   `json:"to_ms"`
	Before    float64 `json:"max_shard_write_share_before"`
	After     float64 `json:"max_shard_write_share_after"`
	Splits    int     `json:"splits"`
	Proposals int     `json:"merges_proposed"`
	tenant    int
}

// sample is one shard's load over one statistics interval.
type sample struct {
	at     time.Duration // end of the interval, since the load started
	dur    time.Duration
	shard  routing.ShardID
	writes uint64
	reads  uint64
	size   uint64
	phase  int
}

// autoEvent is one action the policy took or proposed.
type autoEvent struct {
	At      time.Duration
	AtMs    int64   `json:"at_ms"`
	Action  string  `json:"action"`
	Result  string  `json:"result"`
	Version uint64  `json:"table_version"`
	StallMs float64 `json:"write_stall_ms,omitempty"` // split: longest stall of writes to the parent in its window
	LockMs  float64 `json:"parent_lock_ms,omitempty"`
	split   bool
	merge   bool
}

type autosplitResult struct {
	cfg       *autosplitConfig
	settings  routing.Settings
	phases    []phase
	samples   []sample
	events    []autoEvent
	hotKeys   []policy.HotKey
	proposals int
	load      *loadgen.Result
	verify    experiment.Verification
	acked     int // writes the load acknowledged
	failed    int // writes that got an error
	end       time.Duration
	maxStall  time.Duration
	finalTab  *routing.Table
	took      time.Duration
	reading   string
	summary   map[string]any
}

// stallExecutor splits through the splitter and marks the writes aimed at
// the parent while it does, so the stall of exactly those writes can be
// measured (loadgen's Moving flag).
type stallExecutor struct {
	inner   autosplit.SplitterExecutor
	n       *node.Node
	parent  atomic.Pointer[movingParent]
	start   time.Time
	windows []window
}

type movingParent struct {
	t  *routing.Table
	id routing.ShardID
}

type window struct{ from, to time.Duration }

func (e *stallExecutor) Split(plan splitter.Plan) (splitter.Report, error) {
	e.parent.Store(&movingParent{t: e.n.Table(), id: plan.Parent()})
	from := time.Since(e.start)
	r, err := e.inner.Split(plan)
	e.windows = append(e.windows, window{from, time.Since(e.start)})
	e.parent.Store(nil)
	return r, err
}

func (e *stallExecutor) Merge(shards []routing.ShardID) (splitter.Report, error) {
	return e.inner.Merge(shards)
}

// Resume takes up a split or merge the driver gave up on
// (autosplit.Resumer).
func (e *stallExecutor) Resume() (splitter.Report, bool, error) {
	return e.inner.Resume()
}

func (e *stallExecutor) moving(id, r string) bool {
	p := e.parent.Load()
	if p == nil {
		return false
	}
	_, s := p.t.Route(id, r)
	return s == p.id
}

// autosink writes through one router per writer.
type autosink struct{ routers []*node.Router }

func (s *autosink) Write(w int, op loadgen.Op) (int, error) {
	var res node.Result
	var err error
	if op.Delete {
		res, err = s.routers[w].Delete(op.ID, op.Routing)
	} else {
		res, err = s.routers[w].Index(op.ID, op.Routing, op.Source)
	}
	return res.Retries, err
}

type nodeSearcher struct{ n *node.Node }

func (s nodeSearcher) Search(fn func(routing.ShardID, storage.Doc) error) error {
	_, err := s.n.Search(fn)
	return err
}

func autosplitRun(ctx context.Context, cfg *autosplitConfig, stderr io.Writer) (*autosplitResult, error) {
	began := time.Now()
	logger, err := newLogger(cfg.logLevel)
	if err != nil {
		return nil, err
	}
	defer logger.Sync() //nolint:errcheck
	dir := cfg.data
	if dir == "" {
		if dir, err = os.MkdirTemp("", "splitdemo-autosplit-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	}
	settings := routing.Settings{Shards: 4, RoutingShards: 256, PartitionSize: 1}
	lc := loadgen.Config{Writers: cfg.writers, Rate: cfg.rate, DocSize: 1024, IDsPerWriter: max(100, cfg.docs/cfg.writers),
		Tenants: 8, Seed: cfg.seed}
	ds, err := experiment.BuildDataset(filepath.Join(dir, "index"), experiment.DatasetConfig{Mode: cfg.mode, Settings: settings,
		Layout: storage.LayoutPerShard, Docs: cfg.docs, Load: lc}, logger, nil)
	if err != nil {
		return nil, fmt.Errorf("build index: %w", err)
	}
	// The hot tenants: A, then B on another root (so A's shards cool down
	// while B's heat up).
	tenantRoot := func(t int) routing.ShardID { p, _ := ds.Table.Route("x", fmt.Sprintf("tenant-%d", t)); return p.Root }
	a, b := 0, -1
	for t := 1; t < lc.Tenants; t++ {
		if tenantRoot(t) != tenantRoot(a) {
			b = t
			break
		}
	}
	if b < 0 {
		b = 1
	}
	d := cfg.duration
	res := &autosplitResult{cfg: cfg, settings: settings, phases: []phase{
		{Name: "tenant A hot", Tenant: fmt.Sprintf("tenant-%d", a), Share: 0.35, From: 0, To: d * 35 / 100, tenant: a},
		{Name: "tenant B hot", Tenant: fmt.Sprintf("tenant-%d", b), Share: 0.55, From: d * 35 / 100, To: d * 70 / 100, tenant: b},
		{Name: "spread evenly", From: d * 70 / 100, To: d},
	}}
	sched := slices.Clone(res.phases) // the writers' copy: the loop below counts into res.phases
	lc.Hot = func(el time.Duration) (int, float64) {
		for _, p := range sched {
			if el < p.To {
				return p.tenant, p.Share
			}
		}
		return 0, 0
	}

	eng, err := storage.Open(storage.Options{Dir: ds.Dir, Layout: storage.LayoutPerShard, Durability: storage.DurabilityRequest, Logger: logger})
	if err != nil {
		return nil, err
	}
	n, err := node.Open(node.Config{Engine: eng, Logger: logger})
	if err != nil {
		_ = eng.Close()
		return nil, err
	}
	defer n.Close()
	exec := &stallExecutor{inner: autosplit.SplitterExecutor{Driver: splitter.NewDriver(n, splitter.Config{Logger: logger})}, n: n}
	lc.Moving = exec.moving
	loop, err := autosplit.New(autosplit.Config{Node: n, Executor: exec, Thresholds: cfg.th, Logger: logger})
	if err != nil {
		return nil, err
	}
	sink := &autosink{}
	for range cfg.writers {
		sink.routers = append(sink.routers, node.NewRouter(n, n.Table(), node.RouterConfig{MaxRetries: 16}))
	}

	start := time.Now()
	exec.start = start
	loadCtx, cancel := context.WithCancel(ctx)
	done := make(chan *loadgen.Result, 1)
	go func() { done <- loadgen.Run(loadCtx, lc, sink, start) }()
	proposed := map[string]bool{}
	hot := map[string]bool{}
	ticker := time.NewTicker(cfg.tick)
	var tickErr error
	for el := time.Duration(0); el < d && ctx.Err() == nil; el = time.Since(start) {
		select {
		case <-ctx.Done():
			continue
		case <-ticker.C:
		}
		now := time.Now()
		at := now.Sub(start)
		ph := len(res.phases) - 1
		for i, p := range res.phases {
			if at < p.To {
				ph = i
				break
			}
		}
		ev, err := loop.Tick(now)
		if err != nil {
			tickErr = err
			break
		}
		for id, st := range ev.Stats {
			if k := len(st.Intervals); k > 0 && st.Intervals[k-1].To.Equal(now) {
				iv := st.Intervals[k-1]
				res.samples = append(res.samples, sample{at: at, dur: iv.To.Sub(iv.From), shard: id, writes: iv.Writes, reads: iv.Reads, size: st.Size, phase: ph})
			}
		}
		for _, h := range ev.Decision.Unsplittable {
			if key := fmt.Sprintf("%d/%s", h.Shard, h.Value); !hot[key] {
				hot[key] = true
				res.hotKeys = append(res.hotKeys, h)
				res.events = append(res.events, autoEvent{At: at, Action: "refuse: " + h.String(), Result: "reported", Version: uint64(ev.Version)})
			}
		}
		act := ev.Decision.Action
		switch act.Kind {
		case policy.Split:
			e := autoEvent{At: at, Action: act.String(), Version: uint64(ev.Version), split: true}
			if ev.Err != nil {
				e.Result = "failed: " + ev.Err.Error()
			} else {
				e.Result = fmt.Sprintf("children %v", ev.Split.SortedTargets())
				e.LockMs = msOf(ev.Split.Stall)
				res.phases[ph].Splits++
			}
			res.events = append(res.events, e)
		case policy.Merge:
			key := fmt.Sprint(act.Shards)
			first := !proposed[key]
			if first {
				proposed[key] = true
				res.proposals++
				res.phases[ph].Proposals++
			}
			if ev.Err == nil {
				e := autoEvent{At: at, Action: act.String(), Result: fmt.Sprintf("target %v", ev.Merge.Targets), Version: uint64(ev.Version), merge: true}
				e.LockMs = msOf(ev.Merge.Stall)
				res.events = append(res.events, e)
			} else if first {
				res.events = append(res.events, autoEvent{At: at, Action: act.String(), Result: "failed: " + ev.Err.Error(), Version: uint64(ev.Version)})
			}
		}
		fmt.Fprintf(stderr, "\rautosplit: %5.1fs of %v, table v%d, %d shards ", at.Seconds(), d, ev.Version, len(n.Table().ActiveShards()))
	}
	ticker.Stop()
	fmt.Fprintln(stderr)
	res.end = time.Since(start)
	cancel()
	res.load = <-done
	if tickErr != nil {
		return nil, tickErr
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	// The stall of each split: writes aimed at the parent, in its window.
	for i, w := range exec.windows {
		s := loadgen.MaxStall(res.load.Records, w.from, w.to)
		res.maxStall = max(res.maxStall, s)
		k := 0
		for j := range res.events {
			if res.events[j].split {
				if k == i {
					res.events[j].StallMs = msOf(s)
				}
				k++
			}
		}
	}
	res.finalTab = n.Table()
	if res.verify, err = experiment.Verify(res.finalTab, nodeSearcher{n}, ds, res.load); err != nil {
		return nil, err
	}
	res.measurePhases()
	res.took = time.Since(began)
	res.summary = autosplitSummary(res)
	res.reading = autosplitReading(res)
	return res, nil
}

// shareMax is the highest share of the writes of (from, to] that one shard
// took.
func (r *autosplitResult) shareMax(from, to time.Duration) float64 {
	by := map[routing.ShardID]uint64{}
	var total uint64
	for _, s := range r.samples {
		if s.at > from && s.at <= to {
			by[s.shard] += s.writes
			total += s.writes
		}
	}
	best := 0.0
	for _, w := range by {
		best = max(best, float64(w)/float64(max(1, total)))
	}
	return best
}

// measurePhases computes each phase's max shard write share before its
// first split (or, without one, over its first quarter) and over its last
// quarter.
func (r *autosplitResult) measurePhases() {
	for i := range r.phases {
		p := &r.phases[i]
		p.FromMs, p.ToMs = p.From.Milliseconds(), p.To.Milliseconds()
		q := (p.To - p.From) / 4
		beforeEnd := p.From + q
		for _, e := range r.events {
			if e.split && e.At > p.From && e.At <= p.To {
				beforeEnd = e.At
				break
			}
		}
		warm := min(time.Second, (beforeEnd-p.From)/2) // the first interval of a phase straddles the change
		p.Before = r.shareMax(p.From+warm, beforeEnd)
		p.After = r.shareMax(p.To-q, p.To)
	}
}

func autosplitSummary(r *autosplitResult) map[string]any {
	splits, merges := 0, 0
	for _, e := range r.events {
		if e.split && !strings.HasPrefix(e.Result, "failed") {
			splits++
		}
		if e.merge {
			merges++
		}
	}
	type hk struct {
		Shard        uint32  `json:"shard"`
		Routing      string  `json:"routing"`
		Share        float64 `json:"share"`
		WritesPerSec float64 `json:"writes_per_s"`
		Remedy       string  `json:"remedy"`
	}
	hks := []hk{}
	for _, h := range r.hotKeys {
		hks = append(hks, hk{uint32(h.Shard), h.Value, h.Share, h.WritesPerSec, h.Remedy})
	}
	all := loadgen.Summarize(r.load.Records, 0, r.end+time.Hour)
	r.acked, r.failed = all.Acked, all.Errors
	th := r.cfg.th
	return map[string]any{
		"max_shard_write_share_before": r.phases[0].Before,
		"max_shard_write_share_after":  r.phases[0].After,
		"splits":                       splits,
		"merges":                       merges,
		"merges_proposed":              r.proposals,
		"unsplittable_hot_keys":        hks,
		"max_write_stall_ms":           msOf(r.maxStall),
		"lost_writes":                  r.verify.Lost + r.verify.Unexpected,
		"misplaced_docs":               r.verify.Misplaced,
		"duplicate_docs":               r.verify.Duplicates,
		"acked_writes":                 all.Acked,
		"write_errors":                 all.Errors,
		"write_retries":                all.Retries,
		"final_shards":                 len(r.finalTab.ActiveShards()),
		"final_table_version":          uint64(r.finalTab.Version()),
		"phases":                       r.phases,
		"events":                       r.eventsJSON(),
		"thresholds": map[string]any{
			"split_writes_per_s": th.SplitWritesPerSec, "split_sustain": th.SplitSustain.String(),
			"max_shard_bytes": th.MaxShardBytes, "merge_window": th.MergeWindow.String(),
			"merge_load_fraction": th.MergeLoadFraction, "merge_delay": th.MergeDelay.String(),
			"min_key_samples": th.MinKeySamples, "retry_after": th.RetryAfter.String(),
			"scaled_down_from": "CockroachDB 2,500 QPS, TiKV 10 s, CockroachDB 5 min merge window and delay",
		},
		"config": map[string]any{
			"duration": r.cfg.duration.String(), "rate": r.cfg.rate, "writers": r.cfg.writers, "mode": r.cfg.mode.String(),
			"seed": r.cfg.seed, "docs": r.cfg.docs, "shards": r.settings.Shards, "routing_shards": r.settings.RoutingShards,
			"routing_partition_size": r.settings.PartitionSize, "tick": r.cfg.tick.String(), "command": autosplitCommand(r.cfg),
		},
		"machine": machine(),
	}
}

func (r *autosplitResult) eventsJSON() []autoEvent {
	out := slices.Clone(r.events)
	for i := range out {
		out[i].AtMs = out[i].At.Milliseconds()
	}
	return out
}

func autosplitCommand(c *autosplitConfig) string {
	return strings.TrimSpace("go run ./cmd/splitdemo autosplit " + strings.Join(c.args, " "))
}

func autosplitReading(r *autosplitResult) string {
	s := r.summary
	var b strings.Builder
	p0 := r.phases[0]
	fmt.Fprintf(&b, "With %s taking %.0f%% of %.0f writes/s, the hottest shard took %.0f%% of the writes before the policy acted and %.0f%% at the end of that phase. ",
		p0.Tenant, 100*p0.Share, r.cfg.rate, 100*p0.Before, 100*p0.After)
	fmt.Fprintf(&b, "Over the run the policy split %d times (longest stall of writes to a splitting shard %.1f ms), proposed %d merges (executed: %d), and refused to split %d hot keys. ",
		s["splits"], s["max_write_stall_ms"], r.proposals, s["merges"], len(r.hotKeys))
	switch {
	case r.acked == 0:
		fmt.Fprintf(&b, "NOTHING VERIFIED: no write was acknowledged in %v (%d errors; --rate %v with %d writers is one write per writer every %v).",
			r.end.Round(time.Millisecond), s["write_errors"], r.cfg.rate, r.cfg.writers, time.Duration(float64(time.Second)*float64(r.cfg.writers)/r.cfg.rate))
	case r.verify.OK():
		fmt.Fprintf(&b, "All %d acknowledged writes verified: 0 lost, 0 misplaced, 0 duplicated.", s["acked_writes"])
	default:
		fmt.Fprintf(&b, "VERIFICATION FAILED: %d lost, %d misplaced, %d duplicated, %d unexpected (%v).",
			r.verify.Lost, r.verify.Misplaced, r.verify.Duplicates, r.verify.Unexpected, r.verify.Examples)
	}
	if r.failed > 0 {
		fmt.Fprintf(&b, " WRITES FAILED: %d writes got an error (an in-place split or merge must fail none).", r.failed)
	}
	return b.String()
}
