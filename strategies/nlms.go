package strategies

import (
	"math"
	"sync"
	"sync/atomic"
)

// MinPredictSamples is how many successful completions a target needs
// before predicted_latency trusts its model.
const MinPredictSamples = 8

// Bounds that keep one absurd sample from poisoning a model.
const (
	maxSampleMs    = 600_000 // 10 minutes
	maxQueueDepth  = 10_000
	maxPromptKTok  = 1_000
	maxCoefficient = 600_000
	nlmsStep       = 0.5
	nlmsEps        = 1e-6
)

// nlms is the online linear model latency ≈ w0 + w1·queue + w2·kTokens,
// trained by normalised least mean squares: one multiply-add per feature per
// sample, no matrix, no allocation. Writes are serialised by mu; reads load
// the coefficients from atomics and never block.
type nlms struct {
	mu sync.Mutex
	w  [3]atomic.Uint64 // float64 bits
	n  atomic.Uint64
}

func clampF(v, lo, hi float64) float64 {
	if math.IsNaN(v) {
		return lo
	}
	return math.Max(lo, math.Min(hi, v))
}

func (m *nlms) learn(queue, kTok, ms float64) {
	x := [3]float64{1, clampF(queue, 0, maxQueueDepth), clampF(kTok, 0, maxPromptKTok)}
	y := clampF(ms, 0, maxSampleMs)
	m.mu.Lock()
	defer m.mu.Unlock()
	var w [3]float64
	pred, norm := 0.0, nlmsEps
	for i := range w {
		w[i] = math.Float64frombits(m.w[i].Load())
		pred += w[i] * x[i]
		norm += x[i] * x[i]
	}
	g := nlmsStep * (y - pred) / norm
	for i := range w {
		m.w[i].Store(math.Float64bits(clampF(w[i]+g*x[i], 0, maxCoefficient)))
	}
	m.n.Add(1)
}

func (m *nlms) predict(queue, kTok float64) (float64, bool) {
	if m.n.Load() < MinPredictSamples {
		return 0, false
	}
	w0, w1, w2 := m.coefficients()
	return w0 + w1*clampF(queue, 0, maxQueueDepth) + w2*clampF(kTok, 0, maxPromptKTok), true
}

func (m *nlms) coefficients() (w0, w1, w2 float64) {
	return math.Float64frombits(m.w[0].Load()), math.Float64frombits(m.w[1].Load()), math.Float64frombits(m.w[2].Load())
}
