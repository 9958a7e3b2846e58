package strategies

import (
	"math"
	"sync/atomic"
)

// AdaptivePolicy is the deployment-wide [adaptive_routing] policy.
type AdaptivePolicy struct {
	Enabled          bool    `json:"enabled"`
	LatencyWeight    float64 `json:"latency_weight"`
	CostWeight       float64 `json:"cost_weight"`
	LoadWeight       float64 `json:"load_weight"`
	ExplorationRatio float64 `json:"exploration_ratio"`
	MinSamples       int     `json:"min_samples"`
}

// DefaultAdaptivePolicy is the shipped default: off, 1.0/0.5/0.25, 5%
// exploration, 50 samples.
func DefaultAdaptivePolicy() AdaptivePolicy {
	return AdaptivePolicy{LatencyWeight: 1.0, CostWeight: 0.5, LoadWeight: 0.25, ExplorationRatio: 0.05, MinSamples: 50}
}

// Sanitized returns the policy as the data plane runs it: negative or
// non-finite weights become zero and exploration is clamped to [0, 0.5].
func (p AdaptivePolicy) Sanitized() AdaptivePolicy {
	clampW := func(w float64) float64 {
		if math.IsNaN(w) || w < 0 {
			return 0
		}
		return math.Min(w, 100)
	}
	p.LatencyWeight = clampW(p.LatencyWeight)
	p.CostWeight = clampW(p.CostWeight)
	p.LoadWeight = clampW(p.LoadWeight)
	if math.IsNaN(p.ExplorationRatio) || p.ExplorationRatio < 0 {
		p.ExplorationRatio = 0
	}
	p.ExplorationRatio = math.Min(p.ExplorationRatio, 0.5)
	if p.MinSamples < 0 {
		p.MinSamples = 0
	}
	return p
}

// PolicyHolder publishes the current policy to every adaptive balancer; the
// control plane stores a new value and the next pick reads it.
type PolicyHolder struct {
	p atomic.Pointer[AdaptivePolicy]
}

// NewPolicyHolder returns a holder with p stored.
func NewPolicyHolder(p AdaptivePolicy) *PolicyHolder {
	h := &PolicyHolder{}
	h.Store(p)
	return h
}

// Load returns the current sanitized policy.
func (h *PolicyHolder) Load() AdaptivePolicy {
	if h == nil {
		return AdaptivePolicy{}
	}
	if p := h.p.Load(); p != nil {
		return *p
	}
	return AdaptivePolicy{}
}

// Store sanitizes and publishes p.
func (h *PolicyHolder) Store(p AdaptivePolicy) {
	s := p.Sanitized()
	h.p.Store(&s)
}
