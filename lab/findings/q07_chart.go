package findings

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// chartSeries678 is one line of lineChart678.
type chartSeries678 struct {
	Name   string
	XYs    plotter.XYs
	Dashed bool
}

// chartColors678 are the lines' colours, in order (cmd/splitdemo's blue
// and red first).
var chartColors678 = []color.NRGBA{
	{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

// lineChart678 writes a line chart with points (y from 0) to file, in
// cmd/splitdemo's report style (22 × 11 cm, legend on top).
func lineChart678(file, title, xlabel, ylabel string, series []chartSeries678) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	ymax := 0.0
	for i, s := range series {
		l, pts, err := plotter.NewLinePoints(s.XYs)
		if err != nil {
			return fmt.Errorf("chart %s: %w", file, err)
		}
		c := chartColors678[i%len(chartColors678)]
		l.Color, pts.Color, l.Width = c, c, vg.Points(1.5)
		if s.Dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			pts.Shape = draw.BoxGlyph{}
		}
		p.Add(l, pts)
		p.Legend.Add(s.Name, l, pts)
		for _, xy := range s.XYs {
			ymax = max(ymax, xy.Y)
		}
	}
	p.Legend.Top = true
	p.Y.Min, p.Y.Max = 0, max(ymax*1.3, 1)
	if err := p.Save(22*vg.Centimeter, 11*vg.Centimeter, file); err != nil {
		return fmt.Errorf("chart %s: %w", file, err)
	}
	return nil
}
