package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/shardsplit/shardsplit/internal/experiment"
	"github.com/shardsplit/shardsplit/internal/loadgen"
)

const bucket = 100 * time.Millisecond

// metrics is one strategy's row of summary.json; the keys are the contract.
type metrics struct {
	MaxWriteStallMs          float64 `json:"max_write_stall_ms"`
	WriteP50Ms               float64 `json:"write_p50_ms"`
	WriteP99Ms               float64 `json:"write_p99_ms"`
	WriteMaxMs               float64 `json:"write_max_ms"`
	ThroughputSteadyOps      float64 `json:"throughput_steady_ops"`
	ThroughputDuringSplitOps float64 `json:"throughput_during_split_ops"`
	SplitDurationMs          float64 `json:"split_duration_ms"`
	WriteErrors              int     `json:"write_errors"`
	WriteRetries             int     `json:"write_retries"`
	AckedWrites              int     `json:"acked_writes"`
	LostWrites               int     `json:"lost_writes"`
	MisplacedDocs            int     `json:"misplaced_docs"`
	DuplicateDocs            int     `json:"duplicate_docs"`
	BytesWritten             uint64  `json:"bytes_written"`
	DiskBeforeBytes          int64   `json:"disk_before_bytes"`
	DiskPeakBytes            int64   `json:"disk_peak_bytes"`
	DiskAfterBytes           int64   `json:"disk_after_bytes"`
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// measure computes a strategy's metrics. The split window runs from the
// split request to the end of the last phase writers wait on; the
// steady window is the writes before it, after a one-second warm-up.
func measure(o *experiment.Outcome) metrics {
	recs := o.Load.Records
	in := loadgen.SummarizeOverlap(recs, o.WindowStart, o.WindowEnd)
	steadyFrom := min(time.Second, o.WindowStart/2)
	steady := loadgen.Summarize(recs, steadyFrom, o.WindowStart)
	all := loadgen.Summarize(recs, 0, o.End+time.Hour)
	return metrics{
		MaxWriteStallMs:          msOf(loadgen.MaxStall(recs, o.WindowStart, o.WindowEnd)),
		WriteP50Ms:               msOf(in.P50),
		WriteP99Ms:               msOf(in.P99),
		WriteMaxMs:               msOf(in.Max),
		ThroughputSteadyOps:      steady.OpsPerS,
		ThroughputDuringSplitOps: in.OpsPerS,
		SplitDurationMs:          msOf(o.WindowEnd - o.WindowStart),
		WriteErrors:              all.Errors,
		WriteRetries:             all.Retries,
		AckedWrites:              all.Acked,
		LostWrites:               o.Verify.Lost + o.Verify.Unexpected,
		MisplacedDocs:            o.Verify.Misplaced,
		DuplicateDocs:            o.Verify.Duplicates,
		BytesWritten:             o.BytesWritten,
		DiskBeforeBytes:          o.DiskBefore,
		DiskPeakBytes:            o.DiskPeak,
		DiskAfterBytes:           o.DiskAfter,
	}
}

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
			"dataset_bytes": res.datasetDoc,
		},
		"machine": machine(),
	}
	for _, o := range res.outcomes {
		s[o.Strategy] = measure(o)
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
	var in, ni *metrics
	for _, o := range res.outcomes {
		m := measure(o)
		if o.Strategy == "inplace" {
			in = &m
		} else {
			ni = &m
		}
	}
	var b strings.Builder
	if in != nil {
		fmt.Fprintf(&b, "Splitting hot shard %d in place under %.0f writes/s stalled writes to the moved documents for at most %.1f ms "+
			"(split window %.0f ms); write throughput during the split was %.0f%% of steady state (%.0f vs %.0f ops/s). ",
			res.hotShard, res.cfg.rate, in.MaxWriteStallMs, in.SplitDurationMs,
			100*in.ThroughputDuringSplitOps/max(1, in.ThroughputSteadyOps), in.ThroughputDuringSplitOps, in.ThroughputSteadyOps)
	}
	if ni != nil {
		fmt.Fprintf(&b, "Today's new-index _split x2 (%s cleanup) blocked every write for %.0f ms (longest stall %.0f ms, p99 write latency in the window %.0f ms) "+
			"and wrote %.1f MiB. ", res.cfg.cleanup, ni.SplitDurationMs, ni.MaxWriteStallMs, ni.WriteP99Ms, float64(ni.BytesWritten)/(1<<20))
	}
	if in != nil && ni != nil && in.MaxWriteStallMs > 0 {
		fmt.Fprintf(&b, "The in-place split's longest stall is %.0fx shorter. ", ni.MaxWriteStallMs/in.MaxWriteStallMs)
	}
	if steady := minSteady(in, ni); steady > 0 && steady < 0.95*res.cfg.rate {
		fmt.Fprintf(&b, "Caution: the writers did not reach the target rate even before the split (steady %.0f of %.0f writes/s): "+
			"each of the %d writers waits for its write's fsync, so they offer at most %d / latency writes/s and any extra latency shows as lost throughput; "+
			"raise --writers. ", steady, res.cfg.rate, res.cfg.writers, res.cfg.writers)
	}
	lost := 0
	for _, o := range res.outcomes {
		lost += o.Verify.Lost + o.Verify.Unexpected + o.Verify.Misplaced + o.Verify.Duplicates
	}
	if lost == 0 {
		b.WriteString("Every acknowledged write was verified afterwards: none lost, duplicated or misplaced.")
	} else {
		fmt.Fprintf(&b, "VERIFICATION FAILED: %d lost, duplicated, misplaced or unexpected documents.", lost)
	}
	return b.String()
}

// minSteady is the lower steady-state throughput of the strategies measured
// (0 if none).
func minSteady(ms ...*metrics) float64 {
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
	_ = w.Write([]string{"strategy", "t_ms", "acked", "errors", "retries", "issued_p50_ms", "issued_p99_ms", "issued_max_ms", "in_split_window"})
	for _, o := range res.outcomes {
		byStart := loadgen.BucketsByStart(o.Load.Records, bucket, o.End)
		for i, b := range loadgen.Buckets(o.Load.Records, bucket, o.End) {
			from := time.Duration(i) * bucket
			inWindow := from+bucket > o.WindowStart && from < o.WindowEnd
			l := byStart[i]
			_ = w.Write([]string{o.Strategy, fmt.Sprint((from - o.WindowStart).Milliseconds()), fmt.Sprint(b.Acked), fmt.Sprint(b.Errors),
				fmt.Sprint(b.Retries), fmt.Sprintf("%.3f", msOf(l.P50)), fmt.Sprintf("%.3f", msOf(l.P99)), fmt.Sprintf("%.3f", msOf(l.Max)),
				fmt.Sprint(inWindow)})
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
	"newindex": {R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
}

// writeCharts draws throughput and p99 latency per 100 ms bucket for each
// strategy against time since its split request, with each split window
// shaded in the strategy's colour.
func writeCharts(dir string, res *comparison) error {
	type series struct {
		name string
		xys  plotter.XYs
	}
	var tput, lat []series
	maxT, maxL := 1.0, 1.0
	for _, o := range res.outcomes {
		var t, l plotter.XYs
		end := o.End.Truncate(bucket) // drop the last, partial bucket
		for i, b := range loadgen.Buckets(o.Load.Records, bucket, end) {
			x := (time.Duration(i)*bucket + bucket/2 - o.WindowStart).Seconds()
			ops := float64(b.Acked) / bucket.Seconds()
			t = append(t, plotter.XY{X: x, Y: ops})
			maxT = max(maxT, ops)
		}
		for i, b := range loadgen.BucketsByStart(o.Load.Records, bucket, end) {
			if b.Acked > 0 {
				x := (time.Duration(i)*bucket + bucket/2 - o.WindowStart).Seconds()
				l = append(l, plotter.XY{X: x, Y: max(0.01, msOf(b.P99))})
				maxL = max(maxL, msOf(b.P99))
			}
		}
		tput = append(tput, series{o.Strategy, t})
		lat = append(lat, series{o.Strategy, l})
	}
	draw := func(file, title, ylabel string, data []series, ymax float64, logY bool) error {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "time since the split request (s)"
		p.Y.Label.Text = ylabel
		ymin := 0.0
		if logY {
			p.Y.Scale = plot.LogScale{}
			p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
			ymin = 0.01
		}
		for _, o := range res.outcomes {
			c := strategyColors[o.Strategy]
			shade := color.NRGBA{R: c.R, G: c.G, B: c.B, A: 0x40}
			x0, x1 := 0.0, (o.WindowEnd - o.WindowStart).Seconds()
			x1 = max(x1, x0+0.02) // keep a millisecond window visible
			poly, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: ymin}, {X: x1, Y: ymin}, {X: x1, Y: ymax * 1.1}, {X: x0, Y: ymax * 1.1}})
			if err != nil {
				return err
			}
			poly.Color, poly.LineStyle.Width = shade, 0
			p.Add(poly)
			p.Legend.Add(o.Strategy+" split window", poly)
		}
		for _, s := range data {
			line, err := plotter.NewLine(s.xys)
			if err != nil {
				return err
			}
			line.Color, line.Width = strategyColors[s.name], vg.Points(1.2)
			p.Add(line)
			p.Legend.Add(s.name, line)
		}
		p.Legend.Top = true
		p.Y.Min, p.Y.Max = ymin, ymax*1.1
		return p.Save(22*vg.Centimeter, 11*vg.Centimeter, filepath.Join(dir, file))
	}
	if err := draw("throughput.png", "Acknowledged writes per second (100 ms buckets)", "acked writes/s", tput, maxT, false); err != nil {
		return err
	}
	return draw("latency.png", "p99 latency of the writes issued in each 100 ms bucket (first attempt to ack)", "p99 latency (ms, log scale)", lat, maxL, true)
}

func reportMarkdown(res *comparison) string {
	var b strings.Builder
	c := res.cfg
	b.WriteString("## shardsplit: in-place split vs new-index `_split`\n\n")
	b.WriteString(res.reading + "\n\n")
	rows := []struct {
		name string
		get  func(metrics) string
	}{
		{"max write stall (ms)", func(m metrics) string { return fmt.Sprintf("%.1f", m.MaxWriteStallMs) }},
		{"write p50 / p99 / max in the split window (ms)", func(m metrics) string {
			return fmt.Sprintf("%.1f / %.1f / %.1f", m.WriteP50Ms, m.WriteP99Ms, m.WriteMaxMs)
		}},
		{"throughput steady (ops/s)", func(m metrics) string { return fmt.Sprintf("%.0f", m.ThroughputSteadyOps) }},
		{"throughput during the split (ops/s)", func(m metrics) string { return fmt.Sprintf("%.0f", m.ThroughputDuringSplitOps) }},
		{"split window (ms)", func(m metrics) string { return fmt.Sprintf("%.0f", m.SplitDurationMs) }},
		{"acked writes / errors / retries", func(m metrics) string {
			return fmt.Sprintf("%d / %d / %d", m.AckedWrites, m.WriteErrors, m.WriteRetries)
		}},
		{"lost / misplaced / duplicate", func(m metrics) string {
			return fmt.Sprintf("%d / %d / %d", m.LostWrites, m.MisplacedDocs, m.DuplicateDocs)
		}},
		{"bytes written (MiB)", func(m metrics) string { return fmt.Sprintf("%.1f", float64(m.BytesWritten)/(1<<20)) }},
		{"disk before / peak / after (MiB)", func(m metrics) string {
			return fmt.Sprintf("%.0f / %.0f / %.0f", mib(m.DiskBeforeBytes), mib(m.DiskPeakBytes), mib(m.DiskAfterBytes))
		}},
	}
	b.WriteString("| | ")
	var ms []metrics
	for _, o := range res.outcomes {
		b.WriteString(o.Strategy + " | ")
		ms = append(ms, measure(o))
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
	b.WriteString("- Latency is from a write's first attempt to its acknowledgement, retries and backoff included. The split window runs from the split request to the end of the last phase writers wait on (in-place: handoff — cleanup runs after it in the background and only competes for the disk; new-index: write block to alias swap and unblock). The stall is the longest interval in which writes aimed at the moved documents (all documents, for the new-index split) were outstanding and none was acknowledged.\n")
	b.WriteString("- Raw data: `timeline.csv` (100 ms buckets), `summary.json`.\n\n</details>\n")
	return b.String()
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
