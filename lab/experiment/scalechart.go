package experiment

import (
	"bufio"
	"cmp"
	"fmt"
	"image/color"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// ScalePoint is one parent size of a split-cost curve: medians over runs.
type ScalePoint struct {
	Label         string  // the series (a build, a configuration)
	Parent        string  // e.g. "4GiB"
	ParentMiB     float64 // the dataset's unique bytes on disk
	Runs          int
	SplitMs       float64 // request to the end of the handoff
	StallMs       float64 // longest write stall during the split
	SteadyStallMs float64 // the same measure over steady windows of the split's length
	AfterStallMs  float64 // longest stall in the second after the handoff
	Throughput    float64 // split-window over steady throughput
	// Metrics holds the median of every metric the benchmark reported, by
	// unit (e.g. "child1-ms", "retire-close-ms").
	Metrics map[string]float64
}

var (
	benchParent = regexp.MustCompile(`parent=([0-9A-Za-z]+)`)
	// benchProcs is the -GOMAXPROCS suffix of a benchmark's name.
	benchProcs = regexp.MustCompile(`-[0-9]+$`)
)

// ParseScaleBench reads `go test -bench SplitUnderLoad` output and returns
// one point per parent size (medians over the runs), labelled label, in
// ascending parent size. The output must hold one configuration per
// parent size (the benchmark's name but its parent and -GOMAXPROCS
// suffix): BenchmarkSplitUnderLoad runs both layouts, and a median over
// both is neither's, so output of more than one is an error naming them
// (select one with -bench 'SplitUnderLoad/layout=per-shard').
func ParseScaleBench(r io.Reader, label string) ([]ScalePoint, error) {
	runs := map[string]map[string][]float64{}
	configs := map[string]string{} // parent -> the configuration its runs came from
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		m := benchParent.FindStringSubmatch(f[0])
		if m == nil {
			continue
		}
		config := benchParent.ReplaceAllString(benchProcs.ReplaceAllString(f[0], ""), "parent=*")
		if c, ok := configs[m[1]]; ok && c != config {
			return nil, fmt.Errorf("experiment: benchmark output mixes %s and %s: one configuration at a time, or their medians pool both", c, config)
		}
		configs[m[1]] = config
		if runs[m[1]] == nil {
			runs[m[1]] = map[string][]float64{}
		}
		for i := 2; i+1 < len(f); i += 2 { // f[1] is the iteration count
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("experiment: benchmark line %q: value %q: %w", sc.Text(), f[i], err)
			}
			runs[m[1]][f[i+1]] = append(runs[m[1]][f[i+1]], v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var pts []ScalePoint
	for parent, units := range runs {
		p := ScalePoint{Label: label, Parent: parent, Metrics: map[string]float64{}}
		for unit, vs := range units {
			p.Metrics[unit] = median(vs)
			p.Runs = max(p.Runs, len(vs))
		}
		p.ParentMiB, p.SplitMs, p.StallMs = p.Metrics["parent-MiB"], p.Metrics["split-ms"], p.Metrics["stall-ms"]
		p.SteadyStallMs, p.AfterStallMs, p.Throughput = p.Metrics["steady-stall-ms"], p.Metrics["after-stall-ms"], p.Metrics["split/steady"]
		pts = append(pts, p)
	}
	slices.SortFunc(pts, func(a, b ScalePoint) int { return cmp.Compare(a.ParentMiB, b.ParentMiB) })
	return pts, nil
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ScaleChart draws split time, the longest stall during the split, the
// steady-window stall, the longest stall in the second after the handoff
// and the parent's retirement (close + remove, when reported) against
// parent size (both axes logarithmic), one set of lines per
// label, with the issue-15 stall goal (20 ms) dashed. The format follows
// path's extension (.png, .svg, .pdf).
func ScaleChart(points []ScalePoint, path string) error {
	if len(points) == 0 {
		return fmt.Errorf("experiment: scale chart %s: no points", path)
	}
	p := plot.New()
	p.Title.Text = "In-place split against parent size (medians)"
	p.X.Label.Text = "parent size (MiB)"
	p.Y.Label.Text = "ms"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	var xticks []plot.Tick
	for _, pt := range points {
		if pt.ParentMiB > 0 && !slices.ContainsFunc(xticks, func(t plot.Tick) bool { return t.Value == pt.ParentMiB }) {
			xticks = append(xticks, plot.Tick{Value: pt.ParentMiB, Label: fmt.Sprintf("%s (%.0f)", pt.Parent, pt.ParentMiB)})
		}
	}
	p.X.Tick.Marker = plot.ConstantTicks(xticks)
	var yticks []plot.Tick
	for _, v := range []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000} {
		yticks = append(yticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	p.Y.Tick.Marker = plot.ConstantTicks(yticks)
	var labels []string
	for _, pt := range points {
		if !slices.Contains(labels, pt.Label) {
			labels = append(labels, pt.Label)
		}
	}
	measures := []struct {
		name  string
		of    func(ScalePoint) float64
		color color.Color
	}{
		{"split time", func(p ScalePoint) float64 { return p.SplitMs }, color.NRGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}},
		{"longest stall", func(p ScalePoint) float64 { return p.StallMs }, color.NRGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}},
		{"steady-window stall", func(p ScalePoint) float64 { return p.SteadyStallMs }, color.NRGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}},
		{"stall, second after", func(p ScalePoint) float64 { return p.AfterStallMs }, color.NRGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}},
		{"parent retirement (close + remove)", func(p ScalePoint) float64 { return p.Metrics["retire-close-ms"] + p.Metrics["retire-remove-ms"] },
			color.NRGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}},
	}
	xmin, xmax := points[0].ParentMiB, points[0].ParentMiB
	ymin, ymax := 20.0, 20.0
	for li, label := range labels {
		for _, m := range measures {
			var xys plotter.XYs
			for _, pt := range points {
				if pt.Label == label && pt.ParentMiB > 0 && m.of(pt) > 0 {
					xys = append(xys, plotter.XY{X: pt.ParentMiB, Y: m.of(pt)})
					xmin, xmax = min(xmin, pt.ParentMiB), max(xmax, pt.ParentMiB)
					ymin, ymax = min(ymin, m.of(pt)), max(ymax, m.of(pt))
				}
			}
			if len(xys) == 0 {
				continue
			}
			line, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			line.Color, line.Width = m.color, vg.Points(1.5)
			pts.Color, pts.Shape = m.color, draw.CircleGlyph{}
			if li > 0 { // later labels dashed, so before and after read apart
				line.Dashes = []vg.Length{vg.Points(2 + 2*float64(li)), vg.Points(2)}
				pts.Shape = draw.BoxGlyph{}
			}
			p.Add(line, pts)
			name := m.name
			if len(labels) > 1 || label != "" {
				name = label + ": " + name
			}
			p.Legend.Add(name, line, pts)
		}
	}
	goal, err := plotter.NewLine(plotter.XYs{{X: xmin, Y: 20}, {X: xmax, Y: 20}})
	if err != nil {
		return err
	}
	goal.Color, goal.Dashes = color.Black, []vg.Length{vg.Points(1), vg.Points(3)}
	p.Add(goal)
	p.Legend.Add("stall goal (20 ms)", goal)
	p.Legend.Top, p.Legend.Left = true, true
	// Room above the data for the legend (one line per series).
	p.Y.Min, p.Y.Max = ymin/1.5, ymax*math.Pow(2.2, float64(len(labels)*len(measures)+1)/3)
	p.X.Min, p.X.Max = xmin/1.3, xmax*1.3
	return p.Save(22*vg.Centimeter, 16*vg.Centimeter, path)
}
