package findings

import (
	"context"
	"flag"
	"fmt"
	"image/color"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/shardsplit/shardsplit/routing"
)

// routingCostQuestion is question 7 of design/findings.md, answered by runRoutingCost.
var routingCostQuestion = Question{ID: 7, Slug: "routing-cost", Title: "Routing cost against depth", Run: runRoutingCost,
	RaisedIn: "#13923 (ownership check O(1) unsplit, O(depth) split); OpenSearch's JMH: 84–99 ns at depth 0–2",
	Question: "What does routing a document cost at split depth 0…10, in both modes?"}

// Question 7 times routing.Table.Route (hash, placement, leaf search) at
// split depth 0..routeMaxDepth in both modes, in process with
// testing.Benchmark.
//
// Two shapes:
//   - "one id, chain": routing's own BenchmarkRoute (routing/bench_test.go,
//     design/2026-11-29-routing-bench.md): the 20-byte id
//     doc-0123456789abcdef on an 8-shard index with R = 8192, the leaf that
//     owns it split in two depth times (its root has depth+1 leaves).
//     routing's helper lives in a _test file, so routeChainTable rebuilds
//     the same table through routing's API; TestRouteChainTableMatchesBench
//     checks it is the same shape.
//   - "4,096 ids, full tree": OpenSearch's JMH setup in #13925 (one seed
//     shard split by 2 at every level, many documents): a 1-shard index
//     (R = 1024) whose root has the 2^d equal leaves of a full binary tree
//     of depth d, routing 4,096 different 20-byte ids in turn.

// routeMaxDepth is the deepest split depth timed.
const routeMaxDepth = 10

// routeBenchID is routing's BenchmarkRoute id (20 bytes).
const routeBenchID = "doc-0123456789abcdef"

// routeManyIDs is how many ids the full-tree shape cycles through.
const routeManyIDs = 4096

// jmhRange is OpenSearch's range-approach JMH result (#13925,
// DocRoutingBenchmark: 100,000 documents, single thread): ns per document
// at depth 0, 1 and 2 (8.38, 9.25 and 9.89 ms per 100,000).
var jmhRange = []float64{83.8, 92.5, 98.9}

// routeShape is one series of the chart.
type routeShape struct {
	name  string
	table func(mode routing.Mode, depth int) (*routing.Table, error)
	ids   []string
}

// routeSplit splits leaf id of t in two and commits it.
func routeSplit(t *routing.Table, id routing.ShardID) (*routing.Table, error) {
	next, err := routing.Apply(t, routing.Edit{Kind: routing.BeginSplit, Shard: id, Ways: 2})
	if err != nil {
		return nil, fmt.Errorf("split %d: %w", id, err)
	}
	rec, _ := next.Split(id)
	ids := make([]routing.ShardID, len(rec.Children))
	for i, c := range rec.Children {
		ids[i] = c.Shard
	}
	next, err = routing.Apply(next, routing.Edit{Kind: routing.CommitSplit, Shard: id, Children: ids})
	if err != nil {
		return nil, fmt.Errorf("commit split %d: %w", id, err)
	}
	return next, nil
}

// routeChainTable is routing's tableAtDepth: 8 shards, R = 8192, the leaf
// owning routeBenchID split in two depth times.
func routeChainTable(mode routing.Mode, depth int) (*routing.Table, error) {
	t, err := routing.NewTable(mode, routing.Settings{Shards: 8, RoutingShards: 8192, PartitionSize: 1})
	if err != nil {
		return nil, err
	}
	for range depth {
		_, owner := t.Route(routeBenchID, "")
		if t, err = routeSplit(t, owner); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// routeFullTables returns the 1-shard (R = 1024) tables whose root has the
// leaves of a full binary tree of depth d, for d = 0..maxDepth: 2^d equal
// leaves. Lookup searches a root's flat leaf list, which is the same
// whether the leaves came from d levels of 2-way splits or one 2^d-way
// split, so each is built as the latter (d levels of Apply over a growing
// table took seconds).
func routeFullTables(mode routing.Mode, maxDepth int) ([]*routing.Table, error) {
	t, err := routing.NewTable(mode, routing.Settings{Shards: 1, RoutingShards: 1024, PartitionSize: 1})
	if err != nil {
		return nil, err
	}
	out := []*routing.Table{t}
	for d := 1; d <= maxDepth; d++ {
		next, err := routing.Apply(t, routing.Edit{Kind: routing.BeginSplit, Shard: 0, Ways: 1 << d})
		if err != nil {
			return nil, fmt.Errorf("split 0 into %d: %w", 1<<d, err)
		}
		rec, _ := next.Split(0)
		ids := make([]routing.ShardID, len(rec.Children))
		for i, c := range rec.Children {
			ids[i] = c.Shard
		}
		if next, err = routing.Apply(next, routing.Edit{Kind: routing.CommitSplit, Shard: 0, Children: ids}); err != nil {
			return nil, fmt.Errorf("commit split 0 into %d: %w", 1<<d, err)
		}
		out = append(out, next)
	}
	return out, nil
}

// routeIDs returns n distinct 20-byte ids.
func routeIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("doc-%016x", uint64(i)*0x9e3779b97f4a7c15)
	}
	return ids
}

// routeNsPerOp times routing ids (in turn) with t: ns per Route call and
// allocations per call.
func routeNsPerOp(t *routing.Table, ids []string) (ns float64, allocs int64) {
	r := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		var sink routing.ShardID
		i := 0
		for b.Loop() {
			_, sink = t.Route(ids[i], "")
			if i++; i == len(ids) {
				i = 0
			}
		}
		_ = sink
	})
	if r.N == 0 {
		return 0, 0
	}
	return float64(r.T.Nanoseconds()) / float64(r.N), r.AllocsPerOp()
}

// setBenchTime sets testing.Benchmark's duration (the -test.benchtime
// flag, registered by testing.Init outside go test) and returns a function
// that restores it.
func setBenchTime(d time.Duration) (restore func(), err error) {
	testing.Init()
	f := flag.Lookup("test.benchtime")
	if f == nil {
		return nil, fmt.Errorf("findings: testing has no benchtime flag")
	}
	old := f.Value.String()
	if err := f.Value.Set(d.String()); err != nil {
		return nil, fmt.Errorf("findings: benchtime %v: %w", d, err)
	}
	return func() { _ = f.Value.Set(old) }, nil
}

// routeCell is one (shape, mode, depth) measurement over the runs.
type routeCell struct {
	shape  string
	mode   routing.Mode
	depth  int
	leaves int // leaves of the routed root
	ns     []float64
	allocs int64 // the most any run allocated per op
}

func runRoutingCost(ctx context.Context, cfg Config) (Answer, error) {
	benchTime := 300 * time.Millisecond
	if cfg.Quick {
		benchTime = 50 * time.Millisecond
	}
	restore, err := setBenchTime(benchTime)
	if err != nil {
		return Answer{}, err
	}
	defer restore()

	modes := []routing.Mode{routing.ModePartition, routing.ModeOpenSearch}
	shapes := map[routing.Mode][]routeShape{}
	for _, m := range modes {
		full, err := routeFullTables(m, routeMaxDepth)
		if err != nil {
			return Answer{}, fmt.Errorf("full tree (%s): %w", m, err)
		}
		shapes[m] = []routeShape{
			{name: "one id, chain", table: routeChainTable, ids: []string{routeBenchID}},
			{name: fmt.Sprintf("%d ids, full tree", routeManyIDs),
				table: func(_ routing.Mode, d int) (*routing.Table, error) { return full[d], nil }, ids: routeIDs(routeManyIDs)},
		}
	}
	var cells []*routeCell
	tables := map[*routeCell]*routing.Table{}
	ids := map[*routeCell][]string{}
	for _, m := range modes {
		for _, s := range shapes[m] {
			for d := 0; d <= routeMaxDepth; d++ {
				t, err := s.table(m, d)
				if err != nil {
					return Answer{}, fmt.Errorf("%s (%s) depth %d: %w", s.name, m, d, err)
				}
				p, _ := t.Route(s.ids[0], "")
				c := &routeCell{shape: s.name, mode: m, depth: d, leaves: len(t.Leaves(p.Root))}
				cells, tables[c], ids[c] = append(cells, c), t, s.ids
			}
		}
	}
	// Runs are the outer loop, so load on the shared machine spreads over
	// every cell rather than landing on a few.
	for run := range cfg.runs() {
		cfg.Progressf("routing cost: run %d/%d (%d cells, %v each)", run+1, cfg.runs(), len(cells), benchTime)
		for _, c := range cells {
			if err := ctx.Err(); err != nil {
				return Answer{}, err
			}
			ns, allocs := routeNsPerOp(tables[c], ids[c])
			c.ns = append(c.ns, ns)
			c.allocs = max(c.allocs, allocs)
		}
	}

	a := Answer{Command: rerunCommand(cfg, 7)}
	tab := Table{Header: []string{"depth", "leaves searched (chain / full tree)"}}
	for _, m := range modes {
		for _, s := range shapes[m] {
			tab.Header = append(tab.Header, fmt.Sprintf("%s, %s: ns/op median [range]", m, s.name))
		}
	}
	tab.Header = append(tab.Header, "OpenSearch JMH, range approach: ns/doc")
	for d := 0; d <= routeMaxDepth; d++ {
		row := []string{fmt.Sprint(d), fmt.Sprintf("%d / %d", d+1, 1<<d)}
		for _, c := range cells {
			if c.depth != d {
				continue
			}
			n := Measured("", "", c.ns...)
			row = append(row, fmt.Sprintf("%s [%s–%s]", num(n.Median), num(n.Min), num(n.Max)))
		}
		jmh := "—"
		if d < len(jmhRange) {
			jmh = num(jmhRange[d])
		}
		tab.Rows = append(tab.Rows, append(row, jmh))
	}
	a.Tables = []Table{tab}
	var maxAllocs int64
	for _, c := range cells {
		a.Numbers = append(a.Numbers, Measured(fmt.Sprintf("route, %s, %s, depth %d (%d leaves)", c.mode, c.shape, c.depth, c.leaves), "ns/op", c.ns...))
		maxAllocs = max(maxAllocs, c.allocs)
	}
	a.Numbers = append(a.Numbers, Measured("OpenSearch JMH (#13925), range approach, depth 0–2", "ns/doc", jmhRange...))

	const chart = "routing-cost.png"
	if err := routeCostChart(filepath.Join(cfg.Out, chart), cells); err != nil {
		return a, err
	}
	a.Charts = []string{chart}
	a.Answer = routeCostAnswer(cells, maxAllocs, benchTime)
	lo, hi := routeCostRange(cells)
	a.Summary = routeCostSummary(lo, hi, maxAllocs)
	a.NotMeasured = "OpenSearch's routing on this machine (the JMH figures are #13925's, on its authors' machine, in Java, for a batch of 100,000 documents including their loop); " +
		"routing with a custom routing value or routing_partition_size > 1 (one more hash of the _id); concurrent routing from many goroutines; " +
		"the request path around routing (the fence check under the shard's apply lock, storage). " +
		fmt.Sprintf("Each timing is testing.Benchmark for %v on a machine shared with other work.", benchTime)
	return a, nil
}

// routeCostAnswer writes the answer from the medians.
func routeCostAnswer(cells []*routeCell, maxAllocs int64, benchTime time.Duration) string {
	median := func(shape string, m routing.Mode, d int) float64 {
		for _, c := range cells {
			if c.shape == shape && c.mode == m && c.depth == d {
				return Measured("", "", c.ns...).Median
			}
		}
		return 0
	}
	lo, hi := routeCostRange(cells)
	var parts []string
	for _, m := range []routing.Mode{routing.ModePartition, routing.ModeOpenSearch} {
		for _, shape := range []string{"one id, chain", fmt.Sprintf("%d ids, full tree", routeManyIDs)} {
			parts = append(parts, fmt.Sprintf("%s mode, %s: %s → %s ns", m, shape,
				num(median(shape, m, 0)), num(median(shape, m, routeMaxDepth))))
		}
	}
	allocs := "no allocation"
	if maxAllocs > 0 {
		allocs = fmt.Sprintf("up to %d allocations per call", maxAllocs)
	}
	return fmt.Sprintf("Routing one document costs %s–%s ns (medians at every depth 0–%d in both modes, %s), "+
		"against OpenSearch's JMH %s–%s ns per document at depth 0–2; depth 0 → %d: %s. "+
		"What depth adds is a binary search over more leaves (the chain's root has depth+1, the full tree's 2^depth, up to %d).",
		num(lo), num(hi), routeMaxDepth, allocs, num(jmhRange[0]), num(jmhRange[len(jmhRange)-1]), routeMaxDepth,
		strings.Join(parts, "; "), 1<<routeMaxDepth)
}

// routeCostChart draws ns/op against depth: one line per mode and shape
// (medians) with the runs' range as error bars, and the JMH points.
func routeCostChart(file string, cells []*routeCell) error {
	p := plot.New()
	p.Title.Text = "Routing one document against split depth"
	p.X.Label.Text = "split depth (levels of 2-way splits above the routed leaf)"
	p.Y.Label.Text = "ns per route (median, range of runs)"
	colors := []color.NRGBA{
		{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, {R: 0x1f, G: 0x77, B: 0xb4, A: 0x90},
		{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, {R: 0xd6, G: 0x27, B: 0x28, A: 0x90},
	}
	type key struct {
		mode  routing.Mode
		shape string
	}
	var order []key
	series := map[key][]*routeCell{}
	for _, c := range cells {
		k := key{c.mode, c.shape}
		if _, ok := series[k]; !ok {
			order = append(order, k)
		}
		series[k] = append(series[k], c)
	}
	ymax := 0.0
	for i, k := range order {
		var xys plotter.XYs
		var errs plotter.YErrors
		for _, c := range series[k] {
			n := Measured("", "", c.ns...)
			xys = append(xys, plotter.XY{X: float64(c.depth), Y: n.Median})
			errs = append(errs, struct{ Low, High float64 }{n.Median - n.Min, n.Max - n.Median})
			ymax = max(ymax, n.Max)
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return fmt.Errorf("chart %s: %w", file, err)
		}
		col := colors[i%len(colors)]
		l.Color, pts.Color, l.Width = col, col, vg.Points(1.5)
		if i%2 == 1 {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			pts.Shape = draw.BoxGlyph{}
		}
		eb := &plotter.YErrorBars{XYs: xys, YErrors: errs, LineStyle: l.LineStyle, CapWidth: vg.Points(4)}
		eb.LineStyle.Dashes = nil
		p.Add(l, pts, eb)
		p.Legend.Add(fmt.Sprintf("%s, %s", k.mode, k.shape), l, pts)
	}
	var jmh plotter.XYs
	for d, v := range jmhRange {
		jmh = append(jmh, plotter.XY{X: float64(d), Y: v})
		ymax = max(ymax, v)
	}
	sc, err := plotter.NewScatter(jmh)
	if err != nil {
		return fmt.Errorf("chart %s: %w", file, err)
	}
	sc.Shape, sc.Color = draw.TriangleGlyph{}, color.NRGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff}
	p.Add(sc)
	p.Legend.Add("OpenSearch JMH, range approach (#13925)", sc)
	p.Legend.Top, p.Legend.Left = true, true
	p.Y.Min, p.Y.Max = 0, ymax*1.35
	p.X.Min, p.X.Max = -0.3, routeMaxDepth+0.3
	if err := p.Save(22*vg.Centimeter, 11*vg.Centimeter, file); err != nil {
		return fmt.Errorf("chart %s: %w", file, err)
	}
	return nil
}

// rerunCommand is the command that reruns question id as cfg did.
func rerunCommand(cfg Config, id int) string {
	s := fmt.Sprintf("splitdemo findings --only %d --seed %d", id, cfg.Seed)
	if cfg.Quick {
		s += " --quick"
	}
	if cfg.Runs > 0 {
		s += fmt.Sprintf(" --runs %d", cfg.Runs)
	}
	return s
}
