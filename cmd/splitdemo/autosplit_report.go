package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/shardsplit/shardsplit/routing"
)

func writeAutosplitOutputs(cfg *autosplitConfig, r *autosplitResult) error {
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r.summary, "", "  ")
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
	if err := writeAutosplitTimeline(filepath.Join(cfg.out, "timeline.csv"), r); err != nil {
		return err
	}
	if err := writeShardChart(filepath.Join(cfg.out, "shard-writes.png"), r); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(cfg.out, "report.md"), []byte(autosplitMarkdown(r)), 0o644)
}

// writeAutosplitTimeline writes one row per shard per statistics interval.
func writeAutosplitTimeline(path string, r *autosplitResult) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := csv.NewWriter(f)
	_ = w.Write([]string{"t_ms", "interval_ms", "shard", "writes", "writes_per_s", "reads_per_s", "size_bytes", "phase", "hot_tenant"})
	for _, s := range r.samples {
		p := r.phases[s.phase]
		_ = w.Write([]string{fmt.Sprint(s.at.Milliseconds()), fmt.Sprint(s.dur.Milliseconds()), fmt.Sprint(s.shard), fmt.Sprint(s.writes),
			fmt.Sprintf("%.1f", float64(s.writes)/s.dur.Seconds()), fmt.Sprintf("%.1f", float64(s.reads)/s.dur.Seconds()),
			fmt.Sprint(s.size), p.Name, p.Tenant})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return err
	}
	return f.Close()
}

// palette colours shards by id.
var palette = []color.NRGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xd6, 0x27, 0x28, 0xff},
	{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x7f, 0x7f, 0x7f, 0xff},
	{0xbc, 0xbd, 0x22, 0xff}, {0x17, 0xbe, 0xcf, 0xff},
}

// writeShardChart draws each shard's write rate per statistics interval,
// the split threshold, the phases, and every table edit (solid) and merge
// proposal (dashed) as a vertical line.
func writeShardChart(path string, r *autosplitResult) error {
	series := map[routing.ShardID]plotter.XYs{}
	ymax := r.cfg.th.SplitWritesPerSec
	for _, s := range r.samples {
		y := float64(s.writes) / s.dur.Seconds()
		series[s.shard] = append(series[s.shard], plotter.XY{X: s.at.Seconds(), Y: y})
		ymax = max(ymax, y)
	}
	ymax *= 1.15
	p := plot.New()
	p.Title.Text = "Writes per second of each shard (policy statistics intervals)"
	p.X.Label.Text = "time since the writes started (s)"
	p.Y.Label.Text = "writes/s"
	p.Y.Min, p.Y.Max = 0, ymax
	p.X.Min, p.X.Max = 0, r.end.Seconds()
	for i, ph := range r.phases {
		if i%2 == 1 {
			poly, err := plotter.NewPolygon(plotter.XYs{{X: ph.From.Seconds(), Y: 0}, {X: ph.To.Seconds(), Y: 0}, {X: ph.To.Seconds(), Y: ymax}, {X: ph.From.Seconds(), Y: ymax}})
			if err != nil {
				return err
			}
			poly.Color, poly.LineStyle.Width = color.NRGBA{0, 0, 0, 0x12}, 0
			p.Add(poly)
		}
	}
	vline := func(x float64, c color.Color, dashed bool) error {
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: ymax}})
		if err != nil {
			return err
		}
		l.Color, l.Width = c, vg.Points(0.8)
		if dashed {
			l.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		}
		p.Add(l)
		return nil
	}
	var labels plotter.XYLabels
	for _, e := range r.events {
		switch {
		case e.split:
			if err := vline(e.At.Seconds(), color.Black, false); err != nil {
				return err
			}
			labels.XYs = append(labels.XYs, plotter.XY{X: e.At.Seconds(), Y: ymax * (0.97 - 0.04*float64(len(labels.XYs)%5))})
			labels.Labels = append(labels.Labels, " "+strings.SplitN(e.Action, " (", 2)[0])
		case strings.HasPrefix(e.Action, "merge"):
			if err := vline(e.At.Seconds(), color.NRGBA{0x80, 0x80, 0x80, 0xff}, true); err != nil {
				return err
			}
		}
	}
	th, err := plotter.NewLine(plotter.XYs{{X: 0, Y: r.cfg.th.SplitWritesPerSec}, {X: r.end.Seconds(), Y: r.cfg.th.SplitWritesPerSec}})
	if err != nil {
		return err
	}
	th.Color, th.Dashes = color.NRGBA{0xd6, 0x27, 0x28, 0xff}, []vg.Length{vg.Points(6), vg.Points(3)}
	p.Add(th)
	p.Legend.Add(fmt.Sprintf("split threshold (%.0f/s)", r.cfg.th.SplitWritesPerSec), th)
	ids := make([]routing.ShardID, 0, len(series))
	for id := range series {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for i, id := range ids {
		l, err := plotter.NewLine(series[id])
		if err != nil {
			return err
		}
		l.Color, l.Width = palette[i%len(palette)], vg.Points(1.2)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("shard %d", id), l)
	}
	if len(labels.XYs) > 0 {
		lab, err := plotter.NewLabels(labels)
		if err != nil {
			return err
		}
		for i := range lab.TextStyle {
			lab.TextStyle[i].Font.Size = vg.Points(7)
		}
		p.Add(lab)
	}
	p.Legend.Top = true
	p.Legend.Left = false
	return p.Save(26*vg.Centimeter, 13*vg.Centimeter, path)
}

func autosplitMarkdown(r *autosplitResult) string {
	var b strings.Builder
	s := r.summary
	th := r.cfg.th
	b.WriteString("## shardsplit: load-based automatic split under a moving hot spot\n\n")
	b.WriteString(r.reading + "\n\n")
	fmt.Fprintf(&b, "**The thresholds are scaled down for a run of minutes** (the anchors are CockroachDB's 2,500 writes/s and 5 min, TiKV's 10 s): "+
		"split above %.0f writes/s sustained %v; merge two adjacent leaves of a root when their combined peak over %v is under %.0f writes/s "+
		"(%.0f%% of the split threshold) and their combined size under %d MiB; a load-based split's children may merge %v after it; "+
		"no action involving a shard of a failed one is proposed for %v after the failure. "+
		"The policy is evaluated every %v.\n\n",
		th.SplitWritesPerSec, th.SplitSustain, th.MergeWindow, th.MergeLoadFraction*th.SplitWritesPerSec, 100*th.MergeLoadFraction,
		th.MaxShardBytes>>20, th.MergeDelay, th.RetryAfter, r.cfg.tick)
	b.WriteString("| phase | hot tenant | share of writes | max shard write share before the policy acted | at the end of the phase | splits | merges proposed |\n|---|---|---:|---:|---:|---:|---:|\n")
	for _, p := range r.phases {
		t := p.Tenant
		if t == "" {
			t = "none"
		}
		fmt.Fprintf(&b, "| %s (%.0f–%.0f s) | %s | %.0f%% | %.0f%% | %.0f%% | %d | %d |\n", p.Name, p.From.Seconds(), p.To.Seconds(), t, 100*p.Share,
			100*p.Before, 100*p.After, p.Splits, p.Proposals)
	}
	fmt.Fprintf(&b, "\n\"Before\" is measured from the phase's second second to its first split (or over its first quarter without one); \"at the end\" over its last quarter. With %d shards, an even spread would give each root %.0f%%.\n\n",
		r.settings.Shards, 100/float64(r.settings.Shards))
	b.WriteString("![write rate per shard](shard-writes.png)\n\n")
	b.WriteString("Solid vertical lines: splits (table edits). Dashed: merge proposals (carried out with the in-place merge unless the events table says it failed). Shaded: the second phase.\n\n")
	b.WriteString("| t (s) | action | result | table version after | longest stall of writes to the parent (ms) | parent lock held (ms) |\n|---:|---|---|---:|---:|---:|\n")
	for _, e := range r.events {
		st, lk := "", ""
		if e.split {
			st, lk = fmt.Sprintf("%.1f", e.StallMs), fmt.Sprintf("%.2f", e.LockMs)
		}
		fmt.Fprintf(&b, "| %.1f | %s | %s | %d | %s | %s |\n", e.At.Seconds(), e.Action, e.Result, e.Version, st, lk)
	}
	fmt.Fprintf(&b, "\n| | |\n|---|---:|\n")
	for _, k := range []string{"splits", "merges", "merges_proposed", "max_write_stall_ms", "acked_writes", "write_errors", "write_retries",
		"lost_writes", "misplaced_docs", "duplicate_docs", "final_shards"} {
		fmt.Fprintf(&b, "| %s | %v |\n", k, s[k])
	}
	m := machine()
	b.WriteString("\n<details><summary>How this was measured</summary>\n\n")
	fmt.Fprintf(&b, "- Command: `%s`\n", autosplitCommand(r.cfg))
	fmt.Fprintf(&b, "- Index: %d shards, routing shards %d, routing_partition_size %d, %s mode, per-shard layout; %d documents of 1 KiB loaded first; 8 tenants routed with `routing` (a quarter of the ids), the rest by `_id`.\n",
		r.settings.Shards, r.settings.RoutingShards, r.settings.PartitionSize, r.cfg.mode, r.cfg.docs)
	fmt.Fprintf(&b, "- Load: %d writers, %.0f writes/s target, fsync before every acknowledgement (90%% index/update, 10%% delete); each writer's router follows the table through stale-routing retries.\n",
		r.cfg.writers, r.cfg.rate)
	b.WriteString("- Statistics: storage's per-shard counters (documents written, reads) read every tick, one write in 8 sampled into a 256-entry reservoir of routing keys per shard, size from Pebble's EstimateDiskUsage; the policy (`policy.Decide`) is a pure function of them, the table and the time.\n")
	b.WriteString("- Stall: for each split, the longest interval in which writes aimed at the parent (issued while it was being split) were outstanding and none was acknowledged, from the split's decision to its end.\n")
	b.WriteString("- Verification: every acknowledged write checked against the index at the end with `internal/model` and `node.CheckPlacement` (each document once, on the shard the final table names).\n")
	fmt.Fprintf(&b, "- Machine: %v, %v CPUs, %v, %v. Run took %v.\n", m["cpu"], m["cpus"], m["memory"], m["go"], r.took.Round(time.Second))
	b.WriteString("- Raw data: `timeline.csv` (one row per shard per statistics interval), `summary.json`.\n\n</details>\n")
	return b.String()
}
