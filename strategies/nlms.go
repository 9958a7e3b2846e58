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
	nlmsStep       = 0.05
	nlmsEps        = 1e-6
	// nlmsStatAlpha smooths the running mean and variance of each feature.
	nlmsStatAlpha = 0.01
)

// nlms is the online linear model latency ≈ w0 + w1·queue + w2·kTokens,
// trained by normalised least mean squares on centred, scaled features.
//
// With m_i and v_i the running mean and variance of feature i (EWMA,
// alpha nlmsStatAlpha), c_i = x_i − m_i and z_i = c_i/√v_i, the model is
// held as y ≈ b + w1·c1 + w2·c2 (so w0 = b − w1·m1 − w2·m2), and a sample
// with error e moves
//
//	b   += μ·e / (1 + z1² + z2²)
//	w_i += μ·e·(z_i/√v_i) / (1 + z1² + z2²)
//
// Plain NLMS on raw features converges at the pace of its worst-scaled,
// most correlated direction: a queue of 0–60 beside the constant 1 leaves
// w0 crawling for thousands of samples. Centring makes the features
// nearly orthogonal to the bias and scaling gives them equal footing, so
// all three coefficients settle in a few hundred samples; μ = nlmsStep
// keeps the jitter from noisy samples small. When a mean moves, b moves
// with it so the prediction is unchanged. One multiply-add per feature
// per sample, no matrix, no allocation. Writes are serialised by mu;
// reads load the published (w0, w1, w2) from atomics and never block.
type nlms struct {
	mu    sync.Mutex
	b     float64          // intercept at the feature means (under mu)
	mean  [2]float64       // running means of queue and kTok (under mu)
	varnc [2]float64       // running variances (under mu)
	w     [3]atomic.Uint64 // published w0, w1, w2 (float64 bits)
	n     atomic.Uint64
}

func clampF(v, lo, hi float64) float64 {
	if math.IsNaN(v) {
		return lo
	}
	return max(lo, min(hi, v))
}

func (m *nlms) learn(queue, kTok, ms float64) {
	x := [2]float64{clampF(queue, 0, maxQueueDepth), clampF(kTok, 0, maxPromptKTok)}
	y := clampF(ms, 0, maxSampleMs)
	m.mu.Lock()
	defer m.mu.Unlock()
	w := [2]float64{math.Float64frombits(m.w[1].Load()), math.Float64frombits(m.w[2].Load())}
	first := m.n.Load() == 0
	var z, sd, c [2]float64
	pred, norm := m.b, 1.0
	for i := range x {
		old := m.mean[i]
		if first {
			m.mean[i] = x[i]
		} else {
			m.mean[i] += nlmsStatAlpha * (x[i] - m.mean[i])
		}
		m.b += w[i] * (m.mean[i] - old) // keep w0 fixed as the mean moves
		pred += w[i] * (m.mean[i] - old)
		c[i] = x[i] - m.mean[i]
		m.varnc[i] += nlmsStatAlpha * (c[i]*c[i] - m.varnc[i])
		if sd[i] = math.Sqrt(m.varnc[i]); sd[i] < nlmsEps {
			sd[i] = 1 // a feature that has not varied yet
		}
		z[i] = c[i] / sd[i]
		pred += w[i] * c[i]
		norm += z[i] * z[i]
	}
	g := nlmsStep * (y - pred) / norm
	m.b = clampF(m.b+g, -maxCoefficient, maxCoefficient)
	w0 := m.b
	for i := range w {
		w[i] = clampF(w[i]+g*z[i]/sd[i], 0, maxCoefficient)
		w0 -= w[i] * m.mean[i]
		m.w[i+1].Store(math.Float64bits(w[i]))
	}
	m.w[0].Store(math.Float64bits(clampF(w0, 0, maxCoefficient)))
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
