package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/shardsplit/shardsplit/baseline"
	"github.com/shardsplit/shardsplit/lab/experiment"
	"github.com/shardsplit/shardsplit/lab/loadgen"
)

const bucket = 100 * time.Millisecond

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// machine describes where the run happened.
func machine() map[string]any {
	m := map[string]any{"goos": runtime.GOOS, "goarch": runtime.GOARCH, "cpus": runtime.NumCPU(), "go": runtime.Version()}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m["cpu"] = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		if line, _, ok := strings.Cut(string(data), "\n"); ok {
			m["memory"] = strings.Join(strings.Fields(line)[1:], " ")
		}
	}
	return m
}

func summarize(res *comparison) map[string]any {
	c := res.cfg
	s := map[string]any{
		"config": map[string]any{
			"docs": c.docs, "doc_size": c.docSize, "writers": c.writers, "rate": c.rate, "shards": c.shards,
			"routing_shards": res.settings.RoutingShards, "split_shard": res.hotShard, "split_ways": c.splitWays,
			"mode": c.mode.String(), "durability": c.durability.String(), "cleanup": c.cleanup.String(),
			"steady": c.steady.String(), "after": c.after.String(), "seed": c.seed, "command": commandLine(c),
			"read_rate": c.readRate, "search_rate": readConfig(c).SearchRate, "count_every": readConfig(c).CountEvery,
			"dataset_bytes": res.datasetDoc,
		},
		"machine": machine(),
	}
	for _, o := range res.outcomes {
		s[o.Strategy] = experiment.Summarize(o)
	}
	return s
}

func commandLine(c *compareConfig) string {
	if len(c.args) == 0 {
		return "go run ./cmd/splitdemo"
	}
	return "go run ./cmd/splitdemo compare " + strings.Join(c.args, " ")
}

// reading is the one-paragraph interpretation the report opens with.
func reading(res *comparison) string {
	var in, rfc, ni *experiment.Summary
	for _, o := range res.outcomes {
		m := experiment.Summarize(o)
		switch o.Strategy {
		case "inplace":
			in = &m
		case "rfc":
			rfc = &m
		default:
			ni = &m
		}
	}
	var b strings.Builder
	if in != nil {
		fmt.Fprintf(&b, "Splitting hot shard %d in place under %.0f writes/s stalled writes to the moved documents for at most %.1f ms "+
			"(split window %.0f ms; %.1f ms in steady windows as long); the moved writes issued in the first second from the request had a p99 of %.1f ms "+
			"(%.1f ms in a steady second), and write throughput during the split was %.0f%% of steady state (%.0f vs %.0f ops/s). ",
			res.hotShard, res.cfg.rate, in.MaxWriteStallMs, in.SplitDurationMs, in.SteadyWindowStallMs, in.WriteP99FirstSecondMs, in.WriteP99SteadySecondMs,
			100*in.ThroughputDuringSplitOps/max(1, in.ThroughputSteadyOps), in.ThroughputDuringSplitOps, in.ThroughputSteadyOps)
	}
	if rfc != nil {
		fmt.Fprintf(&b, "The RFC's data path (children that are whole copies of the parent, each removing its foreign documents after the handoff; %s cleanup) "+
			"stalled writes for at most %.1f ms (split window %.0f ms; first-second write p99 %.1f ms); its cleanup %sran %.1f s, writing %.1f MiB, "+
			"and the disk was back within 10%% of its settled size %.1f s after the split request (search p99 %.1f ms while it ran, %.1f ms steady). ",
			res.cfg.cleanup, rfc.MaxWriteStallMs, rfc.SplitDurationMs, rfc.WriteP99FirstSecondMs, cleanupCounts(*rfc),
			rfc.CleanupDurationMs/1000, float64(rfc.CleanupBytesWritten)/(1<<20), rfc.ReclaimMs/1000, rfc.CleanupSearchP99Ms, rfc.SearchP99SteadyMs)
	}
	verifyMs := 0.0
	if ni != nil {
		for _, o := range res.outcomes {
			for _, p := range o.Phases {
				if o.Strategy == "newindex" && p.Name == "wait-consistent" {
					verifyMs = msOf(p.End - p.Start)
				}
			}
		}
		fmt.Fprintf(&b, "Today's new-index _split x2, with %s, blocked every write for %.0f ms (longest stall %.0f ms; first-second write p99 %.0f ms; "+
			"%.0f ms of the block is our check that the target holds every document, a full scan here where OpenSearch counts from segment metadata) "+
			"and wrote %.1f MiB",
			cleanupModel(res.cfg.cleanup), ni.SplitDurationMs, ni.MaxWriteStallMs, ni.WriteP99FirstSecondMs, verifyMs, float64(ni.BytesWritten)/(1<<20))
		if ni.MergeDurationMs > 0 {
			fmt.Fprintf(&b, "; its merge after the alias swap took %.0f ms and wrote %.1f MiB, where Lucene's merges would rewrite the %.1f MiB of documents the targets keep",
				ni.MergeDurationMs, float64(ni.MergeBytesWritten)/(1<<20), float64(ni.LuceneMergeBytes)/(1<<20))
		}
		b.WriteString(". ")
	}
	if in != nil && ni != nil && in.MaxWriteStallMs > 0 {
		fmt.Fprintf(&b, "The in-place split's longest stall is %.0fx shorter than the new-index split's with %s cleanup (%.0fx against its block less our consistency check). ",
			ni.MaxWriteStallMs/in.MaxWriteStallMs, res.cfg.cleanup, max(0, ni.MaxWriteStallMs-verifyMs)/in.MaxWriteStallMs)
	}
	if steady := minSteady(in, rfc, ni); steady > 0 && steady < 0.95*res.cfg.rate {
		fmt.Fprintf(&b, "Caution: the writers did not reach the target rate even before the split (steady %.0f of %.0f writes/s): "+
			"each of the %d writers waits for its write's fsync, so they offer at most %d / latency writes/s and any extra latency shows as lost throughput; "+
			"raise --writers. ", steady, res.cfg.rate, res.cfg.writers, res.cfg.writers)
	}
	lost, foreign := 0, 0
	for _, o := range res.outcomes {
		lost += o.Verify.Lost + o.Verify.Unexpected + o.Verify.Misplaced + o.Verify.Duplicates
		if o.Reads != nil {
			foreign += o.Reads.Foreign
		}
	}
	if lost == 0 {
		b.WriteString("Every acknowledged write was verified afterwards: none lost, duplicated or misplaced.")
	} else {
		fmt.Fprintf(&b, "VERIFICATION FAILED: %d lost, duplicated, misplaced or unexpected documents.", lost)
	}
	if foreign > 0 {
		fmt.Fprintf(&b, " READS FAILED: %d foreign documents returned.", foreign)
	}
	for _, o := range res.outcomes {
		if n := o.FailedWrites(); n > 0 {
			if mustServe(o.Strategy) {
				fmt.Fprintf(&b, " WRITES FAILED: %d writes of the %s run got an error (an in-place split must fail none).", n, o.Strategy)
			} else {
				fmt.Fprintf(&b, " %d writes of the %s run got an error.", n, o.Strategy)
			}
		}
	}
	return b.String()
}

// cleanupModel names a cleanup model in the reading.
func cleanupModel(c baseline.Cleanup) string {
	switch c {
	case baseline.CleanupMark:
		return "Lucene's cleanup (a scan that routes every document and marks the foreign ones deleted, then merges that reclaim them)"
	case baseline.CleanupPerDoc:
		return "one-by-one deletes of the foreign documents and a compaction (a write per document, more than Lucene pays)"
	case baseline.CleanupRange:
		return "the foreign key ranges dropped without reading them (less than Lucene, whose segments mix every shard's documents, can do)"
	}
	return c.String() + " cleanup"
}

// cleanupCounts says what a cleanup did to documents.
func cleanupCounts(m experiment.Summary) string {
	switch {
	case m.CleanupDocsMarked > 0:
		return fmt.Sprintf("marked %d documents deleted (merge %.0f ms, %.1f MiB written; Lucene's merges would rewrite %.1f MiB) and ",
			m.CleanupDocsMarked, m.MergeDurationMs, float64(m.MergeBytesWritten)/(1<<20), float64(m.LuceneMergeBytes)/(1<<20))
	case m.CleanupDocsDeleted > 0:
		return fmt.Sprintf("deleted %d documents one by one and ", m.CleanupDocsDeleted)
	}
	return ""
}

// mustServe reports whether a strategy promises that no write fails
// because of it: the in-place splits do; the new-index procedure blocks
// writes and may let one wait past its bound.
func mustServe(strategy string) bool { return strategy == "inplace" || strategy == "rfc" }

// minSteady is the lower steady-state throughput of the strategies measured
// (0 if none).
func minSteady(ms ...*experiment.Summary) float64 {
	low := 0.0
	for _, m := range ms {
		if m != nil && (low == 0 || m.ThroughputSteadyOps < low) {
			low = m.ThroughputSteadyOps
		}
	}
	return low
}

func writeOutputs(cfg *compareConfig, res *comparison) error {
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(res.summary, "", "  ")
	if err != nil {
		return err
	}
	for _, path := range []string{filepath.Join(cfg.out, "summary.json"), cfg.jsonPath} {
		if path != "" {
			if err := os.WriteFile(path, append(js, '\n'), 0o644); err != nil {
				return err
			}
		}
	}
	if err := writeTimeline(filepath.Join(cfg.out, "timeline.csv"), res); err != nil {
		return err
	}
	if err := writeCharts(cfg.out, res); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(cfg.out, "report.md"), []byte(reportMarkdown(res)), 0o644)
}

// writeTimeline writes 100 ms buckets, time relative to each strategy's
// split request.
func writeTimeline(path string, res *comparison) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := csv.NewWriter(f)
	// acked, errors and retries count writes that ended in the bucket; the
	// latency columns describe the writes issued in it.
	// The read columns describe the reads that ended in the bucket;
	// disk_bytes is the last disk sample taken in it (empty if none).
	_ = w.Write([]string{"strategy", "t_ms", "acked", "errors", "retries", "issued_p50_ms", "issued_p99_ms", "issued_max_ms", "in_split_window",
		"gets", "get_p99_ms", "searches", "search_p99_ms", "counts", "count_max_ms", "in_cleanup", "disk_bytes"})
	for _, o := range res.outcomes {
		byStart := loadgen.BucketsByStart(o.Load.Records, bucket, o.End)
		gets := loadgen.Buckets(o.Reads.Of(loadgen.ReadGet), bucket, o.End)
		searches := loadgen.Buckets(o.Reads.Of(loadgen.ReadSearch), bucket, o.End)
		counts := loadgen.Buckets(o.Reads.Of(loadgen.ReadCount), bucket, o.End)
		disk := 0
		for i, b := range loadgen.Buckets(o.Load.Records, bucket, o.End) {
			from := time.Duration(i) * bucket
			inWindow := from+bucket > o.WindowStart && from < o.WindowEnd
			inCleanup := from+bucket > o.CleanupStart && from < o.CleanupEnd
			l := byStart[i]
			diskBytes := ""
			for ; disk < len(o.Disk) && o.Disk[disk].At < from+bucket; disk++ {
				diskBytes = fmt.Sprint(o.Disk[disk].Bytes)
			}
			_ = w.Write([]string{o.Strategy, fmt.Sprint((from - o.WindowStart).Milliseconds()), fmt.Sprint(b.Acked), fmt.Sprint(b.Errors),
				fmt.Sprint(b.Retries), fmt.Sprintf("%.3f", msOf(l.P50)), fmt.Sprintf("%.3f", msOf(l.P99)), fmt.Sprintf("%.3f", msOf(l.Max)),
				fmt.Sprint(inWindow), fmt.Sprint(gets[i].Acked), fmt.Sprintf("%.3f", msOf(gets[i].P99)), fmt.Sprint(searches[i].Acked),
				fmt.Sprintf("%.3f", msOf(searches[i].P99)), fmt.Sprint(counts[i].Acked), fmt.Sprintf("%.3f", msOf(counts[i].Max)),
				fmt.Sprint(inCleanup), diskBytes})
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return err
	}
	return f.Close()
}

var strategyColors = map[string]color.NRGBA{
	"inplace":  {R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"rfc":      {R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	"newindex": {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
}

// The charts: each PNG has two panels, the whole run in 100 ms buckets and
// a zoom on the split request (zoomBefore before it to zoomAfter after it)
// in 10 ms buckets, where a window of milliseconds is wide enough to see.
// Time is since each strategy's split request (t = 0, marked), its split
// window shaded in its colour.
const (
	zoomBucket = 10 * time.Millisecond
	zoomBefore = 500 * time.Millisecond
	zoomAfter  = 1500 * time.Millisecond
)

// chartSeries is one strategy's line on a panel: points in runs of
// adjacent buckets. A bucket with nothing to plot (no write issued in it,
// for the latency line) ends a run, so no segment is drawn across it.
type chartSeries struct {
	strategy string
	runs     []plotter.XYs
}

// chartPanel is what one panel plots: a line per strategy and the largest
// value, for the axis.
type chartPanel struct {
	series []chartSeries
	max    float64
}

// bucketed groups recs into the buckets of [from, to) by the time at
// returns (a record outside is dropped).
func bucketed(recs []loadgen.Record, from, to, b time.Duration, at func(loadgen.Record) time.Duration) [][]loadgen.Record {
	out := make([][]loadgen.Record, max(0, int((to-from+b-1)/b)))
	for _, r := range recs {
		if t := at(r); t >= from && t < to {
			i := int((t - from) / b)
			out[i] = append(out[i], r)
		}
	}
	return out
}

// chartData returns the throughput and latency panels over [from, to) of
// each outcome's run (since its load started), in buckets of b, x in
// seconds since its split request. Throughput is the writes acknowledged
// in each bucket, a value in every bucket (none acknowledged is 0 writes/s);
// latency is the p99 of the writes issued in each bucket, and a bucket in
// which no write was issued has none.
func chartData(outcomes []*experiment.Outcome, from, to func(*experiment.Outcome) time.Duration, b time.Duration) (tput, lat chartPanel) {
	tput.max, lat.max = 1, 1
	for _, o := range outcomes {
		lo, hi := max(0, from(o)), min(to(o), o.End.Truncate(b)) // drop the last, partial bucket
		x := func(i int) float64 { return (lo + time.Duration(i)*b + b/2 - o.WindowStart).Seconds() }
		var t plotter.XYs
		for i, in := range bucketed(o.Load.Records, lo, hi, b, func(r loadgen.Record) time.Duration { return r.End }) {
			acked := 0
			for _, r := range in {
				if r.OK {
					acked++
				}
			}
			ops := float64(acked) / b.Seconds()
			t = append(t, plotter.XY{X: x(i), Y: ops})
			tput.max = max(tput.max, ops)
		}
		tput.series = append(tput.series, chartSeries{o.Strategy, []plotter.XYs{t}})
		l := chartSeries{strategy: o.Strategy}
		var run plotter.XYs
		for i, in := range bucketed(o.Load.Records, lo, hi, b, func(r loadgen.Record) time.Duration { return r.Start }) {
			w := loadgen.Summarize(in, 0, 1<<62)
			if w.Acked == 0 {
				if len(run) > 0 {
					l.runs, run = append(l.runs, run), nil
				}
				continue
			}
			run = append(run, plotter.XY{X: x(i), Y: max(0.01, msOf(w.P99))})
			lat.max = max(lat.max, msOf(w.P99))
		}
		if len(run) > 0 {
			l.runs = append(l.runs, run)
		}
		lat.series = append(lat.series, l)
	}
	return tput, lat
}

// zeroTicks are major ticks at the multiples of a round step (1, 2 or 5
// times a power of ten, about eight across the axis), so t = 0 is always
// one of them, labelled, with four minor ticks between.
type zeroTicks struct{}

func (zeroTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return nil
	}
	raw := (hi - lo) / 8
	step := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, f := range []float64{1, 2, 5, 10} {
		if f*step >= raw {
			step *= f
			break
		}
	}
	scale := math.Pow(10, max(0, -math.Floor(math.Log10(step))))
	var ticks []plot.Tick
	for i := math.Ceil(lo / step * 5); i/5*step <= hi; i++ {
		v := i / 5 * step
		if v == 0 {
			v = 0 // not -0
		}
		if math.Mod(i, 5) == 0 {
			ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(math.Round(v*scale)/scale, 'f', -1, 64)})
		} else {
			ticks = append(ticks, plot.Tick{Value: v})
		}
	}
	return ticks
}

// writeCharts draws throughput.png and latency.png.
func writeCharts(dir string, res *comparison) error {
	all := func(*experiment.Outcome) time.Duration { return 0 }
	end := func(o *experiment.Outcome) time.Duration { return o.End }
	zoomFrom := func(o *experiment.Outcome) time.Duration { return o.WindowStart - zoomBefore }
	zoomTo := func(o *experiment.Outcome) time.Duration { return o.WindowStart + zoomAfter }
	tput, lat := chartData(res.outcomes, all, end, bucket)
	ztput, zlat := chartData(res.outcomes, zoomFrom, zoomTo, zoomBucket)
	zoomTitle := fmt.Sprintf("zoom: %v before to %v after the split request, %v buckets", zoomBefore, zoomAfter, zoomBucket)
	if err := drawPanels(filepath.Join(dir, "throughput.png"), res, "acked writes/s", false,
		panelSpec{"Acknowledged writes per second (100 ms buckets)", tput, false},
		panelSpec{zoomTitle, ztput, true}); err != nil {
		return err
	}
	return drawPanels(filepath.Join(dir, "latency.png"), res, "p99 latency (ms, log scale)", true,
		panelSpec{"p99 latency of the writes issued in each 100 ms bucket (first attempt to ack; no line where none was issued)", lat, false},
		panelSpec{zoomTitle, zlat, true})
}

// panelSpec is one panel of a chart.
type panelSpec struct {
	title string
	data  chartPanel
	zoom  bool
}

// drawPanels draws the panels one above the other into file.
func drawPanels(file string, res *comparison, ylabel string, logY bool, panels ...panelSpec) error {
	var plots [][]*plot.Plot
	for _, ps := range panels {
		p, err := drawPanel(res, ps, ylabel, logY)
		if err != nil {
			return err
		}
		plots = append(plots, []*plot.Plot{p})
	}
	img := vgimg.New(22*vg.Centimeter, 11*vg.Centimeter*vg.Length(len(panels)))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadX: vg.Points(4), PadY: vg.Points(8)}
	for i, c := range plot.Align(plots, tiles, dc) {
		plots[i][0].Draw(c[0])
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// drawPanel draws one panel: each split window shaded, t = 0 marked, a
// line per strategy (a run of one bucket as a point).
func drawPanel(res *comparison, ps panelSpec, ylabel string, logY bool) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = ps.title
	p.X.Label.Text = "time since the split request (s)"
	p.X.Tick.Marker = zeroTicks{}
	p.Y.Label.Text = ylabel
	ymin, ymax := 0.0, ps.data.max*1.15
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		ymin = 0.01
		ymax = ps.data.max * 2
	}
	for _, o := range res.outcomes {
		c := strategyColors[o.Strategy]
		shade := color.NRGBA{R: c.R, G: c.G, B: c.B, A: 0x40}
		x0, x1 := 0.0, (o.WindowEnd - o.WindowStart).Seconds()
		if !ps.zoom {
			x1 = max(x1, x0+0.02) // keep a millisecond window visible
		}
		poly, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: ymin}, {X: x1, Y: ymin}, {X: x1, Y: ymax}, {X: x0, Y: ymax}})
		if err != nil {
			return nil, err
		}
		poly.Color, poly.LineStyle.Width = shade, 0
		p.Add(poly)
		p.Legend.Add(fmt.Sprintf("%s split window (%.0f ms)", o.Strategy, msOf(o.WindowEnd-o.WindowStart)), poly)
	}
	request, err := plotter.NewLine(plotter.XYs{{X: 0, Y: ymin}, {X: 0, Y: ymax}})
	if err != nil {
		return nil, err
	}
	request.Color, request.Dashes = color.Black, []vg.Length{vg.Points(3), vg.Points(3)}
	p.Add(request)
	label, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: 0, Y: ymax}}, Labels: []string{" t = 0: split request"}})
	if err != nil {
		return nil, err
	}
	label.Offset = vg.Point{Y: -vg.Points(10)}
	p.Add(label)
	for _, s := range ps.data.series {
		var legend, point plot.Thumbnailer // the legend shows a line if there is one
		for _, run := range s.runs {
			if len(run) == 1 {
				pt, err := plotter.NewScatter(run)
				if err != nil {
					return nil, err
				}
				pt.Color, pt.Radius = strategyColors[s.strategy], vg.Points(1.5)
				p.Add(pt)
				point = pt
				continue
			}
			line, err := plotter.NewLine(run)
			if err != nil {
				return nil, err
			}
			line.Color, line.Width = strategyColors[s.strategy], vg.Points(1.2)
			p.Add(line)
			if legend == nil {
				legend = line
			}
		}
		if legend == nil {
			legend = point
		}
		if legend != nil {
			p.Legend.Add(s.strategy, legend)
		}
	}
	p.Legend.Top = true
	p.Y.Min, p.Y.Max = ymin, ymax
	if ps.zoom { // a long window's shade would widen the axis
		p.X.Min, p.X.Max = -zoomBefore.Seconds(), zoomAfter.Seconds()
	}
	return p, nil
}

func reportMarkdown(res *comparison) string {
	var b strings.Builder
	c := res.cfg
	b.WriteString("## shardsplit: in-place split, the RFC's in-place split, new-index `_split`\n\n")
	b.WriteString(res.reading + "\n\n")
	rows := []struct {
		name string
		get  func(experiment.Summary) string
	}{
		{"max write stall (ms)", func(m experiment.Summary) string { return fmt.Sprintf("%.1f", m.MaxWriteStallMs) }},
		{"same stall measure, steady windows of the split window's length (ms)", func(m experiment.Summary) string { return fmt.Sprintf("%.1f", m.SteadyWindowStallMs) }},
		{"write p99, first second from the request / steady second (ms)", func(m experiment.Summary) string {
			return fmt.Sprintf("%.1f / %.1f", m.WriteP99FirstSecondMs, m.WriteP99SteadySecondMs)
		}},
		{"write p50 / p99 / max in the split window (ms)", func(m experiment.Summary) string {
			return fmt.Sprintf("%.1f / %.1f / %.1f", m.WriteP50Ms, m.WriteP99Ms, m.WriteMaxMs)
		}},
		{"throughput steady (ops/s)", func(m experiment.Summary) string { return fmt.Sprintf("%.0f", m.ThroughputSteadyOps) }},
		{"throughput during the split (ops/s)", func(m experiment.Summary) string { return fmt.Sprintf("%.0f", m.ThroughputDuringSplitOps) }},
		{"split window (ms)", func(m experiment.Summary) string { return fmt.Sprintf("%.0f", m.SplitDurationMs) }},
		{"acked writes / errors / retries", func(m experiment.Summary) string {
			return fmt.Sprintf("%d / %d / %d", m.AckedWrites, m.WriteErrors, m.WriteRetries)
		}},
		{"lost / misplaced / duplicate", func(m experiment.Summary) string {
			return fmt.Sprintf("%d / %d / %d", m.LostWrites, m.MisplacedDocs, m.DuplicateDocs)
		}},
		{"bytes written (MiB)", func(m experiment.Summary) string { return fmt.Sprintf("%.1f", float64(m.BytesWritten)/(1<<20)) }},
		{"disk before / peak / after (MiB)", func(m experiment.Summary) string {
			return fmt.Sprintf("%.0f / %.0f / %.0f", mib(m.DiskBeforeBytes), mib(m.DiskPeakBytes), mib(m.DiskAfterBytes))
		}},
		{"get p99 steady / during / after (ms)", func(m experiment.Summary) string {
			return fmt.Sprintf("%.2f / %.2f / %.2f", m.GetP99SteadyMs, m.GetP99DuringMs, m.GetP99AfterMs)
		}},
		{"search p99 steady / during / after (ms)", func(m experiment.Summary) string {
			return fmt.Sprintf("%.2f / %.2f / %.2f", m.SearchP99SteadyMs, m.SearchP99DuringMs, m.SearchP99AfterMs)
		}},
		{"count p99 (ms)", func(m experiment.Summary) string { return fmt.Sprintf("%.0f", m.CountP99Ms) }},
		{"reads / errors / foreign docs seen", func(m experiment.Summary) string {
			return fmt.Sprintf("%d / %d / %d", m.Reads, m.ReadErrors, m.ReadForeignDocs)
		}},
		{"write stall: steady 1 s median / second after the handoff (ms)", func(m experiment.Summary) string {
			return fmt.Sprintf("%.1f / %.1f", m.Steady1sStallMs, m.AfterHandoffStallMs)
		}},
		{"writes/s acked in the second after the handoff", func(m experiment.Summary) string { return fmt.Sprintf("%.0f", m.ThroughputAfterHandoffOps) }},
		{"cleanup: duration (ms) / docs deleted one by one / docs marked / MiB written", func(m experiment.Summary) string {
			return fmt.Sprintf("%.0f / %d / %d / %.1f", m.CleanupDurationMs, m.CleanupDocsDeleted, m.CleanupDocsMarked, float64(m.CleanupBytesWritten)/(1<<20))
		}},
		{"merge: duration (ms) / MiB written / write p99 (ms)", func(m experiment.Summary) string {
			return fmt.Sprintf("%.0f / %.1f / %.1f", m.MergeDurationMs, float64(m.MergeBytesWritten)/(1<<20), m.MergeWriteP99Ms)
		}},
		{"MiB Lucene's merges would rewrite", func(m experiment.Summary) string { return fmt.Sprintf("%.1f", float64(m.LuceneMergeBytes)/(1<<20)) }},
		{"write / search p99 while cleanup ran (ms)", func(m experiment.Summary) string {
			return fmt.Sprintf("%.1f / %.2f", m.CleanupWriteP99Ms, m.CleanupSearchP99Ms)
		}},
		{"space reclaimed after (ms from the split request)", func(m experiment.Summary) string { return fmt.Sprintf("%.0f", m.ReclaimMs) }},
	}
	b.WriteString("| | ")
	var ms []experiment.Summary
	for _, o := range res.outcomes {
		b.WriteString(o.Strategy + " | ")
		ms = append(ms, experiment.Summarize(o))
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(ms)) + "\n")
	for _, r := range rows {
		b.WriteString("| " + r.name + " | ")
		for _, m := range ms {
			b.WriteString(r.get(m) + " | ")
		}
		b.WriteString("\n")
	}
	b.WriteString("\n![throughput](throughput.png)\n\n![p99 latency](latency.png)\n\n")
	for _, o := range res.outcomes {
		fmt.Fprintf(&b, "**%s phases** (ms since the split request):", o.Strategy)
		for _, p := range o.Phases {
			fmt.Fprintf(&b, " %s %.1f–%.1f;", p.Name, msOf(p.Start-o.WindowStart), msOf(p.End-o.WindowStart))
		}
		b.WriteString("\n")
		for _, n := range o.Notes {
			b.WriteString("- " + n + "\n")
		}
		b.WriteString("\n")
	}
	m := machine()
	fmt.Fprintf(&b, "<details><summary>How this was measured</summary>\n\n")
	fmt.Fprintf(&b, "- Command: `%s`\n", commandLine(c))
	fmt.Fprintf(&b, "- Index: %d shards, routing shards %d, %d documents of %d bytes (%.0f MiB on disk), 8 tenants routed with `routing`, tenant-0 hot (30%% of writes); in-place mode %s.\n",
		c.shards, res.settings.RoutingShards, c.docs, c.docSize, mib(res.datasetDoc), c.mode)
	fmt.Fprintf(&b, "- Load: %d writers, %.0f writes/s target (90%% index/update, 10%% delete), durability %s; in-place writers go back to a stale routing table every 200 writes.\n",
		c.writers, c.rate, c.durability)
	fmt.Fprintf(&b, "- Machine: %v, %v CPUs, %v, %v %v/%v. Run took %v.\n", m["cpu"], m["cpus"], m["memory"], m["go"], m["goos"], m["goarch"], res.took.Round(time.Second))
	b.WriteString("- Latency is from a write's first attempt to its acknowledgement, retries and backoff included. The split window runs from the split request to the end of the last phase writers wait on (in-place: handoff — cleanup runs after it in the background and only competes for the disk; new-index: write block to alias swap). The stall is the longest interval in which writes aimed at the moved documents (all documents, for the new-index split) were outstanding and none was acknowledged. With --align-flush an in-place (or rfc) split's window and the times since the split request start when it begins, after its wait for the parent's own flush (align_wait_ms, aligned); its steady window ends at the request.\n")
	fmt.Fprintf(&b, "- Reads: %.0f routed gets/s of ids the writers had acknowledged (2 loops), %.0f unrouted searches/s across every shard (a page of 10 hits from each shard; every %dth search an exact count of every document instead), every hit checked against the table the search ran at.\n",
		c.readRate, readConfig(c).SearchRate, readConfig(c).CountEvery)
	b.WriteString("- Strategies: `inplace` excises each child to its span when it is made; `rfc` makes each child a hard-linked copy of the whole parent, hands off exactly as `inplace` (same driver, journal and fencing), then, in the background while the child serves, removes the child's foreign documents and compacts those key ranges; `newindex` is write block, `_split` x2 (link, remove the targets' foreign documents, open), a check that the target holds every document once and as many as the source, alias swap.\n")
	fmt.Fprintf(&b, "- Cleanup model (`--cleanup %s`, %s). `mark`, the default, is Lucene's: OpenSearch's split target runs `IndexWriter.deleteDocuments` of a `ShardSplittingQuery` before it starts, which routes every document by its `_id` or routing value and sets the foreign ones' bits in the segments' live-docs files (`.liv`, one bit per document) without rewriting any; merges reclaim their space after the target starts (`StoreRecovery.addIndices`; Lucene's `FrozenBufferedUpdates.applyQueryDeletes`; OpenSearch's merge policy allows 20%% deleted documents by default, and a split leaves about half of each segment deleted). Here the scan reads every document, routes it with the target's table and marks the foreign key ranges deleted with range tombstones in one synced batch (under the write block for `newindex`, after the handoff for `rfc`); the merge is a compaction of those ranges, timed on its own (`merge_*`). `per-doc` deletes each foreign document with a point delete, a write each, more than Lucene pays; `range` drops the foreign ranges without reading them, which Lucene cannot do.\n",
		c.cleanup, cleanupModel(c.cleanup))
	b.WriteString("- What carries over to Lucene: the shape of the new-index split (writers blocked from the write block to the alias swap; hard links; a scan that routes every document under the block; merges after it) and of the in-place split (no write block, a handoff). Not exactly: the mark scan reads every document here, where Lucene reads the `_id` terms (and `_routing` terms, or stored fields for a partitioned index), so its time is likely an upper bound of Lucene's for the same documents on the same disk; the check that the target holds every document is a full scan here, where OpenSearch counts from segment metadata (the reading quotes the ratio without it too). The merge does not carry over: ours is a compaction of the marked key ranges at full speed, which drops whole the tables inside a range and rewrites those across its edges or holding recent writes (`merge_bytes_written`); Lucene's merges rewrite every live document of each segment with deletes (`lucene_merge_bytes`, at least once), throttled in the background (the RFC measured 2.5–3 h per 100 GB on 2 cores, with search 40–50 % slower until they end, opensearch-project/OpenSearch#12918). So `merge_duration_ms`, `reclaim_ms`, the disk peak and searches during the cleanup measure our engine, not Lucene's. Our stall, handoff and fencing measure this prototype's design, not OpenSearch's. One run on a shared machine: its numbers move between runs by more than many of their differences.\n")
	b.WriteString("- Windows: *steady* is the load before the split request after a one-second warm-up; *during* is the split window (reads and writes in flight in it); *after* is the 10 s after the split window (or what the run has); the *cleanup* is defined under `cleanup_duration_ms` below.\n")
	b.WriteString("- Raw data: `timeline.csv` (100 ms buckets: writes, gets, searches, counts, the cleanup and disk samples), `summary.json`.\n\n")
	b.WriteString("`summary.json` holds `config`, `machine` and one object per strategy with these keys:\n\n")
	for _, k := range experiment.SummaryKeyDocs {
		fmt.Fprintf(&b, "- `%s`: %s.\n", k[0], k[1])
	}
	b.WriteString("\n</details>\n")
	return b.String()
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
