// Package adaptive owns the plain data of adaptive routing that crosses
// package lines: the deployment-wide Policy (what [adaptive_routing] in
// rolter.toml sets, Raft replicates and PUT /api/v1/adaptive-routing-policy
// changes) and the Telemetry an adaptive balancer reports (computed by
// strategies, exported by router, relayed between routers and served by
// adminapi). It imports only the standard library, so strategies, config,
// cluster and adminapi share one definition without importing each other.
package adaptive

import "math"

// Policy is the deployment-wide adaptive routing policy.
type Policy struct {
	Enabled          bool    `json:"enabled"`
	LatencyWeight    float64 `json:"latency_weight"`
	CostWeight       float64 `json:"cost_weight"`
	LoadWeight       float64 `json:"load_weight"`
	ExplorationRatio float64 `json:"exploration_ratio"`
	MinSamples       int     `json:"min_samples"`
}

// DefaultPolicy is the shipped default: off, 1.0/0.5/0.25, 5%
// exploration, 50 samples.
func DefaultPolicy() Policy {
	return Policy{LatencyWeight: 1.0, CostWeight: 0.5, LoadWeight: 0.25, ExplorationRatio: 0.05, MinSamples: 50}
}

// Sanitized returns the policy as the data plane runs it: negative or
// non-finite weights become zero and exploration is clamped to [0, 0.5].
func (p Policy) Sanitized() Policy {
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
