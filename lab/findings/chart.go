package findings

import (
	"fmt"
	"image/color"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// bars is one series of a grouped bar chart: a value per group.
type bars struct {
	Name   string
	Values []float64
}

var palette = []color.Color{
	color.NRGBA{R: 0x88, G: 0x88, B: 0x88, A: 0xff}, // grey: the reference (steady)
	color.NRGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.NRGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.NRGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
}

// groupedBars writes a bar chart with one group per label and one bar per
// series into dir/file.
func groupedBars(dir, file, title, ylabel string, labels []string, series []bars) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	w := vg.Points(float64(60 / max(1, len(series))))
	for i, s := range series {
		b, err := plotter.NewBarChart(plotter.Values(s.Values), w)
		if err != nil {
			return fmt.Errorf("chart %s: %w", file, err)
		}
		b.Color = palette[i%len(palette)]
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(float64(i)-float64(len(series)-1)/2)
		p.Add(b)
		p.Legend.Add(s.Name, b)
	}
	p.Legend.Top = true
	p.NominalX(labels...)
	p.Y.Min = 0
	width := vg.Length(max(16, 3.2*float64(len(labels)))) * vg.Centimeter
	if err := p.Save(width, 11*vg.Centimeter, filepath.Join(dir, file)); err != nil {
		return fmt.Errorf("chart %s: %w", file, err)
	}
	return nil
}

// line is one series of a line chart.
type line struct {
	Name string
	XYs  plotter.XYs
}

// lines writes a line chart with points into dir/file; logX puts x on a
// log scale.
func lines(dir, file, title, xlabel, ylabel string, logX bool, series []line) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	if logX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	var ymax float64
	for i, s := range series {
		l, pts, err := plotter.NewLinePoints(s.XYs)
		if err != nil {
			return fmt.Errorf("chart %s: %w", file, err)
		}
		l.Color, pts.Color = palette[(i+1)%len(palette)], palette[(i+1)%len(palette)]
		l.Width = vg.Points(1.5)
		p.Add(l, pts)
		p.Legend.Add(s.Name, l, pts)
		for _, xy := range s.XYs {
			ymax = max(ymax, xy.Y)
		}
	}
	p.Legend.Top = true
	p.Y.Min = 0
	// Room above the data for the legend (a line per series): it sits
	// over the top right, where the largest parent's point often is.
	if ymax > 0 {
		p.Y.Max = ymax * (1.1 + 0.09*float64(len(series)))
	}
	if err := p.Save(18*vg.Centimeter, 11*vg.Centimeter, filepath.Join(dir, file)); err != nil {
		return fmt.Errorf("chart %s: %w", file, err)
	}
	return nil
}
