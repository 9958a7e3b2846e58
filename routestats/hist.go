package routestats

import (
	"math"
	"sort"
	"time"
)

// histLen log-spaced buckets: bucket i holds durations up to bound(i) =
// 1 ms × 1.5^i (the last one everything above), so a percentile read from
// a merged histogram is within a factor 1.22 of the true value — enough to compare
// targets; Prometheus histograms stay the precise source.
const histLen = 32

const histGrowth = 1.5

var bounds = func() [histLen]float64 {
	var b [histLen]float64
	v := 1.0
	for i := range b {
		b[i] = v
		v *= histGrowth
	}
	b[histLen-1] = math.Inf(1)
	return b
}()

type hist [histLen]uint32

func (h *hist) add(d time.Duration) {
	ms := float64(d) / float64(time.Millisecond)
	i := sort.SearchFloat64s(bounds[:], ms)
	if i >= histLen {
		i = histLen - 1
	}
	h[i]++
}

// sparse returns the non-zero buckets as [index, count] pairs.
func (h *hist) sparse() Hist {
	var out Hist
	for i, n := range h {
		if n > 0 {
			out = append(out, [2]uint32{uint32(i), n})
		}
	}
	return out
}

// merge adds a sparse histogram (pairs with an index out of range are
// ignored: they come from another router's report).
func (h *hist) merge(s Hist) {
	for _, p := range s {
		if p[0] < histLen {
			h[p[0]] += p[1]
		}
	}
}

func (h *hist) total() uint64 {
	var n uint64
	for _, c := range h {
		n += uint64(c)
	}
	return n
}

// quantile returns the q-quantile in milliseconds: the geometric middle
// of the bucket holding it (within a factor √1.5 ≈ 1.22 of the true
// value); nil when the histogram is empty.
func (h *hist) quantile(q float64) *float64 {
	n := h.total()
	if n == 0 {
		return nil
	}
	rank := math.Max(1, math.Ceil(q*float64(n)))
	var cum uint64
	for i, c := range h {
		cum += uint64(c)
		if float64(cum) < rank {
			continue
		}
		var v float64
		switch {
		case i == 0:
			v = bounds[0] / 2
		case i == histLen-1:
			v = bounds[i-1] * math.Sqrt(histGrowth)
		default:
			v = math.Sqrt(bounds[i-1] * bounds[i])
		}
		v = math.Round(v*10) / 10
		return &v
	}
	return nil
}
