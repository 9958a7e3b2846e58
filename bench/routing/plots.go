package routing

import (
	"context"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/rolter/rolter/sim/fleet"
)

// The chart files Plots writes (the Makefile and BENCHMARKS.md name them).
const (
	TTFTChart = "ttft_p90_vs_load.png"
	HitChart  = "hit_rate_vs_routers.png"
)

// Plots writes TTFTChart (a load sweep at the largest replica count: the
// oracle and every strategy at each of loads) and HitChart (from rows)
// into dir, and returns their paths.
func Plots(ctx context.Context, dir string, src Source, base fleet.Config, names []string,
	routers []int, rows []Row, loads []float64, capacity float64, parallel int) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	rmax := routers[len(routers)-1]
	all := append([]string{fleet.Oracle}, names...)
	var jobs []simJob
	for _, l := range loads {
		w, rate, err := src.At(l * capacity)
		if err != nil {
			return nil, err
		}
		for _, n := range all {
			c := base
			c.Strategy, c.Routers, c.Rate = n, rmax, rate
			jobs = append(jobs, simJob{c, w})
		}
	}
	results, err := runAll(ctx, jobs, parallel)
	if err != nil {
		return nil, err
	}
	var ttft []series
	for i, n := range all {
		s := series{name: n}
		for j, l := range loads {
			s.x = append(s.x, l)
			s.y = append(s.y, float64(results[j*len(all)+i].TTFT.P90.Milliseconds()))
		}
		ttft = append(ttft, s)
	}
	p1 := filepath.Join(dir, TTFTChart)
	if err := lineChart(p1, fmt.Sprintf("TTFT p90 vs load (%d engines, %d routers)", base.Engines, rmax),
		"load (fraction of no-cache capacity)", "TTFT p90 ms (log)", ttft, true); err != nil {
		return nil, err
	}
	var hits []series
	for _, n := range all {
		s := series{name: n}
		for _, r := range rows {
			if r.Strategy == n {
				s.x = append(s.x, float64(r.Routers))
				s.y = append(s.y, 100*r.HitRate)
			}
		}
		hits = append(hits, s)
	}
	p2 := filepath.Join(dir, HitChart)
	if err := lineChart(p2, fmt.Sprintf("prefix-cache hit rate vs router replicas (load %.2f)", rows[0].Load),
		"router replicas", "hit rate % (tokens)", hits, false); err != nil {
		return nil, err
	}
	return []string{p1, p2}, nil
}

type series struct {
	name string
	x, y []float64
}

// palette gives each series its colour, in order (the oracle first).
var palette = []color.RGBA{
	{0, 0, 0, 255}, {31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255}, {188, 189, 34, 255},
	{23, 190, 207, 255}, {0, 0, 128, 255}, {128, 0, 0, 255}, {0, 128, 128, 255}, {128, 128, 0, 255},
}

// Chart size in pixels at vgimg's default 96 dpi, and the strip on the
// right that holds the legend.
const (
	chartWidth, chartHeight = 1000, 600
	legendWidth             = 200
)

func px(n float64) vg.Length { return vg.Length(n) * vg.Inch / vgimg.DefaultDPI }

// lineChart draws the series as lines with point markers (the oracle's
// line thicker), axes with tick labels and grid lines, the legend beside
// the plot, and writes a PNG. logY puts the y axis on a log scale (values
// below 1 drawn at 1).
func lineChart(path, title, xlabel, ylabel string, ss []series, logY bool) error {
	points := 0
	for _, s := range ss {
		points += len(s.x)
	}
	if points == 0 {
		return fmt.Errorf("plot %s: no data", path)
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
	} else {
		p.Y.Min = 0 // hit rates start from zero
	}
	legend := plot.NewLegend()
	for i, s := range ss {
		xys := make(plotter.XYs, len(s.x))
		for j := range s.x {
			y := s.y[j]
			if logY {
				y = math.Max(y, 1)
			}
			xys[j] = plotter.XY{X: s.x[j], Y: y}
		}
		line, dots, err := plotter.NewLinePoints(xys)
		if err != nil {
			return fmt.Errorf("plot %s: %s: %w", path, s.name, err)
		}
		c := palette[i%len(palette)]
		line.Color, dots.Color = c, c
		line.Width = vg.Points(1.5)
		if s.name == fleet.Oracle {
			line.Width = vg.Points(3)
		}
		dots.Shape = draw.CircleGlyph{}
		dots.Radius = vg.Points(2.5)
		p.Add(line, dots)
		legend.Add(s.name, line, dots)
	}
	img := vgimg.New(px(chartWidth), px(chartHeight))
	dc := draw.New(img)
	p.Draw(draw.Crop(dc, 0, -px(legendWidth), 0, 0))
	legend.Top, legend.Left = true, true
	legend.Draw(draw.Crop(dc, px(chartWidth-legendWidth+10), 0, 0, -px(30)))
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return f.Close()
}

// logTicks labels a log axis at 1, 2 and 5 times each power of ten (with
// unlabelled minor ticks between), so a range within one decade still
// reads.
type logTicks struct{}

func (logTicks) Ticks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(min)); math.Pow(10, e) <= max; e++ {
		base := math.Pow(10, e)
		for m := 1; m < 10; m++ {
			v := base * float64(m)
			if v < min || v > max {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'f', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}
