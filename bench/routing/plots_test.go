package routing

import (
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/rolter/rolter/sim/fleet"
)

// TestLineChartDrawsEverySeries checks what a reader of the chart sees:
// a 1000×600 image with every series in its own colour, on a log axis
// too (where a zero is drawn at 1 instead of failing).
func TestLineChartDrawsEverySeries(t *testing.T) {
	for _, logY := range []bool{false, true} {
		ss := []series{{name: fleet.Oracle, x: []float64{0.3, 0.5, 0.7}, y: []float64{0, 900, 4000}},
			{name: "round_robin", x: []float64{0.3, 0.5, 0.7}, y: []float64{500, 2000, 30000}},
			{name: "cache_aware", x: []float64{0.3, 0.5, 0.7}, y: []float64{400, 1500, 9000}}}
		path := filepath.Join(t.TempDir(), "chart.png")
		if err := lineChart(path, "title", "x", "y", ss, logY); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if b := img.Bounds(); b.Dx() != chartWidth || b.Dy() != chartHeight {
			t.Fatalf("chart is %v, want %dx%d", b, chartWidth, chartHeight)
		}
		seen := map[color.RGBA]int{}
		for y := range chartHeight {
			for x := range chartWidth {
				r, g, b, _ := img.At(x, y).RGBA()
				seen[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 255}]++
			}
		}
		for i := range ss {
			if c := palette[i]; seen[c] < 50 {
				t.Errorf("logY %v: series %s (colour %v) has %d pixels", logY, ss[i].name, c, seen[c])
			}
		}
	}
	if err := lineChart(filepath.Join(t.TempDir(), "empty.png"), "t", "x", "y", []series{{name: "a"}}, false); err == nil {
		t.Error("a chart without data was written")
	}
}
