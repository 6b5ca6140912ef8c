package findings

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/opensearch-project/opensearch-go/v4/opensearchutil/shardhash"

	"github.com/shardsplit/shardsplit/lab/experiment"
	"github.com/shardsplit/shardsplit/lab/loadgen"
	"github.com/shardsplit/shardsplit/node"
	"github.com/shardsplit/shardsplit/routing"
	"github.com/shardsplit/shardsplit/splitter"
	"github.com/shardsplit/shardsplit/storage"
)

// staleQuestion is question 8 of design/findings.md, answered by runStale.
var staleQuestion = Question{ID: 8, Slug: "stale", Title: "Stale coordinators and smart clients", Run: runStale,
	RaisedIn: "#13923 (in-flight requests with stale cluster state)",
	Question: "How many writes are fenced per split and how long do retries take, how stale may a router be, and what does a smart client that routes from number_of_shards get wrong?"}

// Question 8: stale coordinators and smart clients.
//
//  1. Under load (lab/experiment.RunInPlace, fsync'd writes): how
//     many writes one split fences (each retry is one *node.StaleRoutingError
//     answer) and what the fenced writes' latency is, with routers that keep
//     what they learn and with routers that fall back to the first table
//     every 20 writes (InPlaceConfig.StaleEvery).
//  2. How stale a router may be: a node split three times for real
//     (splitter.Driver), then requests from routers holding each older
//     table: hops per request, and whether every document was found.
//  3. What a smart client gets wrong: opensearch-go v4.8.1's document
//     router picks a shard with shardhash.ForRouting(routing ?? _id,
//     routing_num_shards, number_of_shards) (opensearchtransport/
//     shard_routing.go:45), never refreshed by a split; called here, it is
//     compared with the table's owner after 1, 2 and 3 in-place splits.

// staleParent is the j-th split of the fixed sequence: root 0, then the
// leaf holding root 0's lowest key (a child of the first split), then
// root 1.
func staleParent(t *routing.Table, j int) routing.ShardID {
	switch j {
	case 0:
		return 0
	case 1:
		return t.Owner(0, routing.Key(t.RootSpan(0).Start))
	default:
		return routing.ShardID(j - 1)
	}
}

// staleSplits is how many in-place splits the sequence makes.
const staleSplits = 3

// staleTables returns the table before the splits and after each (pure:
// routing's edits only).
func staleTables(mode routing.Mode, s routing.Settings) ([]*routing.Table, error) {
	t, err := routing.NewTable(mode, s)
	if err != nil {
		return nil, err
	}
	out := []*routing.Table{t}
	for j := range staleSplits {
		if t, err = routeSplit(t, staleParent(t, j)); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// staleDoc is a document id and its routing value ("" = by _id).
type staleDoc struct{ id, routing string }

// clientWrong is what a client routing with shardhash.ForRouting gets
// wrong under table t.
type clientWrong struct {
	Docs    int
	Wrong   int // the client's shard is not the owner
	Retired int // of them, the client's shard is not an active shard at all
}

// staleClientWrong routes docs as opensearch-go's document router does and
// as t does, and counts the differences.
func staleClientWrong(t *routing.Table, docs []staleDoc) clientWrong {
	s := t.Settings()
	active := map[routing.ShardID]bool{}
	for _, id := range t.ActiveShards() {
		active[id] = true
	}
	out := clientWrong{Docs: len(docs)}
	for _, d := range docs {
		key := d.routing
		if key == "" {
			key = d.id
		}
		client := routing.ShardID(shardhash.ForRouting(key, s.RoutingShards, s.Shards))
		if _, owner := t.Route(d.id, d.routing); client != owner {
			out.Wrong++
			if !active[client] {
				out.Retired++
			}
		}
	}
	return out
}

// staleDocs returns n documents: by _id, or (tenants > 0) each with one of
// tenants routing values.
func staleDocs(n, tenants int, seed int64) []staleDoc {
	out := make([]staleDoc, n)
	for i := range out {
		out[i].id = fmt.Sprintf("doc-%d-%d", seed, i)
		if tenants > 0 {
			out[i].routing = fmt.Sprintf("tenant-%d", i%tenants)
		}
	}
	return out
}

// staleHops is what requests from routers holding one older table met.
type staleHops struct {
	Behind      int             // splits the router's table is behind
	Versions    routing.Version // table versions it is behind
	Requests    int
	Retried     int // requests that needed one retry
	MaxRetries  int
	NotFound    int   // gets that did not find their document
	SharedTotal int64 // retries of one router serving every request in turn
}

// staleNodeResult is what staleNode measured.
type staleNodeResult struct {
	Hops      []staleHops // one per older table, most stale first
	Placement node.PlacementReport
	// Fenced is how many rewrites from the first table were fenced,
	// FencedMax the most retries one of them took.
	Fenced, FencedMax int
}

// staleNode splits a node for real and measures routers holding each older
// table, then rewrites every document through routers holding the first
// table (a smart client's view) and checks the placement.
func staleNode(ctx context.Context, dir string, mode routing.Mode, docs []staleDoc) (staleNodeResult, error) {
	var res staleNodeResult
	eng, err := storage.Open(storage.Options{Dir: dir, Durability: storage.DurabilityAsync, CacheBytes: 8 << 20})
	if err != nil {
		return res, err
	}
	t0, err := routing.NewTable(mode, childrenSettings(1))
	if err != nil {
		_ = eng.Close()
		return res, err
	}
	n, err := node.Open(node.Config{Engine: eng, Table: t0})
	if err != nil {
		_ = eng.Close()
		return res, err
	}
	defer n.Close()
	fresh := node.NewRouter(n, n.Table(), node.RouterConfig{})
	src := []byte(`{"v":1}`)
	for _, d := range docs {
		if _, err := fresh.Index(d.id, d.routing, src); err != nil {
			return res, fmt.Errorf("index %s: %w", d.id, err)
		}
	}
	tables := []*routing.Table{n.Table()}
	drv := splitter.NewDriver(n, splitter.Config{})
	for j := range staleSplits {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		parent := staleParent(n.Table(), j)
		rep, err := drv.Run(splitter.SplitPlan(parent, 2))
		if err != nil || rep.Phase != splitter.PhaseDone {
			return res, fmt.Errorf("split of %d: %v (%v)", parent, err, rep.Err)
		}
		tables = append(tables, n.Table())
	}
	cur := n.Table()
	for j, t := range tables {
		h := staleHops{Behind: staleSplits - j, Versions: cur.Version() - t.Version(), Requests: len(docs)}
		shared := node.NewRouter(n, t, node.RouterConfig{})
		for _, d := range docs {
			// A router per request: each meets the stale table afresh.
			r := node.NewRouter(n, t, node.RouterConfig{})
			_, found, err := r.Get(d.id, d.routing)
			if err != nil {
				return res, fmt.Errorf("get %s from v%d: %w", d.id, t.Version(), err)
			}
			if !found {
				h.NotFound++
			}
			if k := int(r.Retries()); k > 0 {
				h.Retried++
				h.MaxRetries = max(h.MaxRetries, k)
			}
			if _, _, err := shared.Get(d.id, d.routing); err != nil {
				return res, err
			}
		}
		h.SharedTotal = shared.Retries()
		res.Hops = append(res.Hops, h)
	}
	// The smart client's view is the first table (every root one shard):
	// rewrite every document from it.
	for _, d := range docs {
		r := node.NewRouter(n, tables[0], node.RouterConfig{})
		w, err := r.Index(d.id, d.routing, []byte(`{"v":2}`))
		if err != nil {
			return res, fmt.Errorf("rewrite %s from v%d: %w", d.id, tables[0].Version(), err)
		}
		if w.Retries > 0 {
			res.Fenced++
			res.FencedMax = max(res.FencedMax, w.Retries)
		}
	}
	var err2 error
	res.Placement, err2 = n.CheckPlacement(nil)
	return res, err2
}

// staleLoadRun is one RunInPlace measurement.
type staleLoadRun struct {
	writes, retried, rejections       int
	maxRetries                        int     // the most retries one write took
	retriedP50, retriedMax, othersP50 float64 // ms
	verified                          bool
}

// staleLoadSummary reduces a run's records.
func staleLoadSummary(out *experiment.Outcome) staleLoadRun {
	var r staleLoadRun
	var retried, others []float64
	for _, rec := range out.Load.Records {
		if !rec.OK {
			continue
		}
		r.writes++
		lat := float64((rec.End - rec.Start).Microseconds()) / 1000
		if rec.Retries > 0 {
			r.retried++
			r.rejections += rec.Retries
			r.maxRetries = max(r.maxRetries, rec.Retries)
			retried = append(retried, lat)
		} else {
			others = append(others, lat)
		}
	}
	r.retriedP50, r.retriedMax = stalePercentile(retried, 0.5), stalePercentile(retried, 1)
	r.othersP50 = stalePercentile(others, 0.5)
	r.verified = out.Verify.OK()
	return r
}

// stalePercentile is the q-quantile (nearest rank) of v, 0 when empty.
func stalePercentile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// staleLoadSizes are the load runs' sizes.
type staleLoadSizes struct {
	docs          int
	rate          float64
	steady, after time.Duration
}

func (c Config) staleLoadSizes() staleLoadSizes {
	if c.Quick {
		return staleLoadSizes{docs: 2000, rate: 2000, steady: 200 * time.Millisecond, after: 300 * time.Millisecond}
	}
	return staleLoadSizes{docs: 40_000, rate: 4000, steady: time.Second, after: time.Second}
}

// staleEvery are the InPlaceConfig.StaleEvery values measured.
var staleEvery = []int{0, 20}

func runStale(ctx context.Context, cfg Config) (Answer, error) {
	a := Answer{Command: rerunCommand(cfg, 8)}
	if cfg.Scratch == "" { // Run always sets it; a direct call may not
		dir, err := os.MkdirTemp("", "findings-stale-")
		if err != nil {
			return a, fmt.Errorf("stale: scratch directory: %w", err)
		}
		defer os.RemoveAll(dir)
		cfg.Scratch = dir
	}
	modes := []routing.Mode{routing.ModePartition, routing.ModeOpenSearch}

	// 1. Fenced writes under load.
	sz := cfg.staleLoadSizes()
	loadTab := Table{Header: []string{"mode", "router", "writes per run", "stale-routing answers (one split per run)",
		"writes retried", "retried write latency p50 / max (ms)", "other writes p50 (ms)", "index verified"}}
	type key struct {
		mode  routing.Mode
		every int
	}
	runs := map[key][]staleLoadRun{}
	for _, m := range modes {
		load := loadgen.Config{Writers: 16, IDsPerWriter: sz.docs / 16, DocSize: 256, Rate: sz.rate, Seed: uint64(cfg.Seed)}
		dcfg := experiment.DatasetConfig{Mode: m, Settings: routing.Settings{Shards: 4, RoutingShards: 256, PartitionSize: 1},
			Layout: storage.LayoutPerShard, Docs: sz.docs, Load: load}
		cfg.Progressf("stale: dataset of %d documents (%s mode)", sz.docs, m)
		ds, err := experiment.BuildDataset(filepath.Join(cfg.Scratch, "dataset-"+m.String()), dcfg, cfg.Logger, nil)
		if err != nil {
			return a, fmt.Errorf("dataset (%s): %w", m, err)
		}
		for run := range cfg.runs() {
			for _, every := range staleEvery {
				if err := ctx.Err(); err != nil {
					return a, err
				}
				cfg.Progressf("stale: %s mode, StaleEvery %d, run %d/%d", m, every, run+1, cfg.runs())
				dir := filepath.Join(cfg.Scratch, fmt.Sprintf("run-%s-%d-%d", m, every, run))
				if err := ds.Clone(dir); err != nil {
					return a, err
				}
				out, err := experiment.RunInPlace(ctx, experiment.InPlaceConfig{Dir: dir, Dataset: ds, Durability: storage.DurabilityRequest,
					Load: load, Splits: []splitter.Plan{splitter.SplitPlan(0, 2)}, Steady: sz.steady, After: sz.after,
					Logger: cfg.Logger, StaleEvery: every})
				if err != nil {
					return a, fmt.Errorf("in-place run (%s, StaleEvery %d): %w", m, every, err)
				}
				runs[key{m, every}] = append(runs[key{m, every}], staleLoadSummary(out))
				if err := os.RemoveAll(dir); err != nil {
					return a, err
				}
			}
		}
	}
	field := func(rs []staleLoadRun, f func(staleLoadRun) float64) []float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		return v
	}
	for _, m := range modes {
		for _, every := range staleEvery {
			rs := runs[key{m, every}]
			router := "keeps what it learns"
			if every > 0 {
				router = fmt.Sprintf("back to the first table every %d writes", every)
			}
			label := fmt.Sprintf("%s, %s", m, router)
			writes := Measured("writes, "+label, "writes", field(rs, func(r staleLoadRun) float64 { return float64(r.writes) })...)
			rej := Measured("stale-routing answers per split, "+label, "answers", field(rs, func(r staleLoadRun) float64 { return float64(r.rejections) })...)
			ret := Measured("writes retried, "+label, "writes", field(rs, func(r staleLoadRun) float64 { return float64(r.retried) })...)
			p50 := Measured("retried write latency p50, "+label, "ms", field(rs, func(r staleLoadRun) float64 { return r.retriedP50 })...)
			mx := Measured("retried write latency max, "+label, "ms", field(rs, func(r staleLoadRun) float64 { return r.retriedMax })...)
			oth := Measured("other writes' latency p50, "+label, "ms", field(rs, func(r staleLoadRun) float64 { return r.othersP50 })...)
			verified := 0
			for _, r := range rs {
				if r.verified {
					verified++
				}
			}
			a.Numbers = append(a.Numbers, writes, rej, ret, p50, mx, oth)
			loadTab.Rows = append(loadTab.Rows, []string{m.String(), router, num(writes.Median),
				fmt.Sprintf("%s [%s–%s]", num(rej.Median), num(rej.Min), num(rej.Max)),
				fmt.Sprintf("%s [%s–%s]", num(ret.Median), num(ret.Min), num(ret.Max)),
				fmt.Sprintf("%s / %s", num(p50.Median), num(mx.Median)), num(oth.Median),
				fmt.Sprintf("%d of %d runs", verified, len(rs))})
		}
	}
	a.Tables = append(a.Tables, loadTab)

	// 2. How stale a router may be, on a node split for real.
	nodeDocs := 2000
	if !cfg.Quick {
		nodeDocs = 20_000
	}
	hopsTab := Table{Header: []string{"mode", "router's table: splits behind (versions)", "requests", "needed one retry",
		"most retries of one request", "not found", "retries of one router serving them all"}}
	var placementOK, fencedOnce []string
	worstBehind, worstRetries, notFound, rewriteMax := 0, 0, 0, 0
	for _, m := range modes {
		cfg.Progressf("stale: %d documents on a node split %d times (%s mode)", nodeDocs, staleSplits, m)
		nr, err := staleNode(ctx, filepath.Join(cfg.Scratch, "node-"+m.String()), m, staleDocs(nodeDocs, 0, cfg.Seed))
		if err != nil {
			return a, fmt.Errorf("stale routers (%s): %w", m, err)
		}
		rep := nr.Placement
		rewriteMax = max(rewriteMax, nr.FencedMax)
		for _, h := range nr.Hops {
			hopsTab.Rows = append(hopsTab.Rows, []string{m.String(), fmt.Sprintf("%d (%d)", h.Behind, h.Versions), fmt.Sprint(h.Requests),
				fmt.Sprintf("%d (%.1f%%)", h.Retried, 100*float64(h.Retried)/float64(h.Requests)), fmt.Sprint(h.MaxRetries),
				fmt.Sprint(h.NotFound), fmt.Sprint(h.SharedTotal)})
			a.Numbers = append(a.Numbers, Measured(fmt.Sprintf("requests needing a retry, router %d splits behind, %s", h.Behind, m), "%",
				100*float64(h.Retried)/float64(h.Requests)))
			worstBehind = max(worstBehind, h.Behind)
			worstRetries = max(worstRetries, h.MaxRetries)
			notFound += h.NotFound
		}
		placementOK = append(placementOK, fmt.Sprintf("%s: %d misplaced, %d duplicated", m, rep.Misplaced, rep.Duplicates))
		fencedOnce = append(fencedOnce, fmt.Sprintf("%s: %d of %d rewrites fenced", m, nr.Fenced, nodeDocs))
		if !rep.OK() {
			return a, fmt.Errorf("placement after stale rewrites (%s): %w", m, rep.Err())
		}
	}
	a.Tables = append(a.Tables, hopsTab)

	// 3. The smart client.
	clientTab := Table{Header: []string{"mode", "routing_partition_size", "in-place splits", "documents",
		"client's shard is wrong", "of them a retired parent"}}
	clientDocs := 20_000
	if !cfg.Quick {
		clientDocs = 200_000
	}
	wrongAt := map[string]float64{}
	allRetired := true // every wrong choice after a split names a retired parent (unpartitioned)
	for _, m := range modes {
		for _, p := range []int{1, 8} {
			tables, err := staleTables(m, childrenSettings(p))
			if err != nil {
				return a, err
			}
			tenants := 0
			if p > 1 {
				tenants = 1000 // a partitioned index requires a routing value
			}
			docs := staleDocs(clientDocs, tenants, cfg.Seed)
			for j, t := range tables {
				w := staleClientWrong(t, docs)
				share := 100 * float64(w.Wrong) / float64(w.Docs)
				clientTab.Rows = append(clientTab.Rows, []string{m.String(), fmt.Sprint(p), fmt.Sprint(j), fmt.Sprint(w.Docs),
					fmt.Sprintf("%d (%.2f%%)", w.Wrong, share), fmt.Sprint(w.Retired)})
				a.Numbers = append(a.Numbers, Measured(fmt.Sprintf("smart client's wrong shard, %s, P=%d, after %d splits", m, p, j), "%", share))
				wrongAt[fmt.Sprintf("%s/%d/%d", m, p, j)] = share
				if p == 1 && w.Retired != w.Wrong {
					allRetired = false
				}
			}
		}
	}
	a.Tables = append(a.Tables, clientTab)
	var series []chartSeries678
	for _, p := range []int{1, 8} {
		for _, m := range modes {
			var xys plotter.XYs
			for j := 0; j <= staleSplits; j++ {
				xys = append(xys, plotter.XY{X: float64(j), Y: wrongAt[fmt.Sprintf("%s/%d/%d", m, p, j)]})
			}
			series = append(series, chartSeries678{Name: fmt.Sprintf("%s mode, routing_partition_size %d", m, p), XYs: xys, Dashed: m == routing.ModeOpenSearch})
		}
	}
	const chart = "stale-smart-client.png"
	if err := lineChart678(filepath.Join(cfg.Out, chart), "opensearch-go v4.8.1's shard choice against the routing table",
		"in-place splits (root 0, a child of root 0, root 1; 8 shards)", "documents sent to the wrong shard (%)", series); err != nil {
		return a, err
	}
	a.Charts = []string{chart}

	pk := func(m routing.Mode, p, j int) float64 { return wrongAt[fmt.Sprintf("%s/%d/%d", m, p, j)] }
	rej0 := runs[key{routing.ModePartition, 0}]
	rejOS := runs[key{routing.ModeOpenSearch, 0}]
	med := func(rs []staleLoadRun, f func(staleLoadRun) float64) float64 {
		return Measured("", "", field(rs, f)...).Median
	}
	a.Answer = fmt.Sprintf("One split under %s fsync'd writes/s fenced a median of %s writes (partition mode; %s in opensearch mode), each retried at most %s at the new owner, with a median latency of %s ms against %s ms for the others; "+
		"a router any number of splits behind (up to %d here) converges in at most %d retr%s, because the fence answers with the whole current table (%d gets not found). "+
		"opensearch-go v4.8.1's shard-exact router computes the shard from number_of_shards and routing_num_shards only, so after 1, 2 and 3 in-place splits it names the wrong shard for %.1f%%, %.1f%% and %.1f%% of documents (partition mode; %.1f%%, %.1f%% and %.1f%% in opensearch mode)%s, and %.1f%% even before any split when routing_partition_size is 8; "+
		"sent through our node from the client's view (the unsplit table), each such request was fenced at most %s and retried at the owner, never misplaced (%s).",
		num(sz.rate), num(med(rej0, func(r staleLoadRun) float64 { return float64(r.rejections) })),
		num(med(rejOS, func(r staleLoadRun) float64 { return float64(r.rejections) })), staleTimes(staleMaxRetries(rej0, rejOS)),
		num(med(rej0, func(r staleLoadRun) float64 { return r.retriedP50 })), num(med(rej0, func(r staleLoadRun) float64 { return r.othersP50 })),
		worstBehind, worstRetries, map[bool]string{true: "y", false: "ies"}[worstRetries == 1], notFound,
		pk(routing.ModePartition, 1, 1), pk(routing.ModePartition, 1, 2), pk(routing.ModePartition, 1, 3),
		pk(routing.ModeOpenSearch, 1, 1), pk(routing.ModeOpenSearch, 1, 2), pk(routing.ModeOpenSearch, 1, 3),
		staleRetiredNote(allRetired), pk(routing.ModePartition, 8, 0), staleTimes(rewriteMax), strings.Join(append(fencedOnce, placementOK...), "; "))
	a.Summary = staleSummary(staleFacts{
		Fenced:       med(rej0, func(r staleLoadRun) float64 { return float64(r.rejections) }),
		MaxRetries:   staleMaxRetries(rej0, rejOS),
		WorstBehind:  worstBehind,
		WorstRetries: worstRetries,
		ClientWrong:  pk(routing.ModePartition, 1, 1),
	})
	a.NotMeasured = "The client itself was not run against a cluster: its shard choice is opensearch-go v4.8.1's own shardhash.ForRouting (opensearchutil/shardhash/shardhash.go:81), the function its document router calls (opensearchtransport/shard_routing.go:45) with routing_num_shards and number_of_shards fetched once per index from /_cluster/state/metadata (discovery.go:1850, cached at :1793). " +
		"Reading its source (not run): the shard map comes from /_cat/shards; mergeShardMap (index_routing_cache.go:398) carries a retired parent's entry forward and drops shard ids >= number_of_shards (:435), which every child has, so it keeps sending a split root's documents to the node that held the parent; that router is off unless OPENSEARCH_GO_ROUTER or Config.Router enables it (opensearchtransport/doc.go:226). " +
		"The server routes every request itself, so the client's choice costs at most a hop to another node (one node here). " +
		"Retry latency is from one split per run on this shared machine; multi-node coordinators and bulk requests (re-grouping per item) were not measured."
	return a, nil
}

// staleRetiredNote says whether every wrong choice named a retired parent.
func staleRetiredNote(all bool) string {
	if all {
		return ", every one a retired parent"
	}
	return ""
}

// staleMaxRetries is the most retries one write took over the runs.
func staleMaxRetries(runs ...[]staleLoadRun) int {
	m := 0
	for _, rs := range runs {
		for _, r := range rs {
			m = max(m, r.maxRetries)
		}
	}
	return m
}

// staleTimes spells a count of times.
func staleTimes(n int) string {
	switch n {
	case 1:
		return "once"
	case 2:
		return "twice"
	}
	return fmt.Sprintf("%d times", n)
}
