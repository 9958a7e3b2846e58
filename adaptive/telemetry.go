package adaptive

// Decisions is the decision split of one adaptive balancer.
type Decisions struct {
	Blend       uint64 `json:"blend"`
	Exploration uint64 `json:"exploration"`
	Fallback    uint64 `json:"fallback"`
}

// TargetTelemetry is one target's row of the telemetry report.
// Score = LatencyScore + CostScore + LoadScore, each component being the
// policy-weighted share of its signal (a zero-weight signal scores 0 while
// its raw value is still reported).
type TargetTelemetry struct {
	Target        string  `json:"target"`
	Provider      string  `json:"provider"`
	UpstreamModel string  `json:"upstream_model"`
	Score         float64 `json:"score"`
	LatencyScore  float64 `json:"latency_score"`
	CostScore     float64 `json:"cost_score"`
	LoadScore     float64 `json:"load_score"`
	// LatencyMs is the target's latency EWMA; nil before its first
	// successful completion.
	LatencyMs   *float64 `json:"latency_ms"`
	CostPerMtok float64  `json:"cost_per_mtok"`
	InFlight    uint64   `json:"in_flight"`
	// Samples is how many picks this route's balancer made of the target
	// (seed 000: "how many picks that target has served").
	Samples uint64 `json:"samples"`
	// LastSampleAgeMs is how long ago the balancer last picked the target;
	// nil when it never has.
	LastSampleAgeMs *int64 `json:"last_sample_age_ms"`
}

// Telemetry is the current state of one adaptive balancer, for
// the telemetry report and metrics. It is computed on demand, off the
// request path.
type Telemetry struct {
	Engaged   bool              `json:"engaged"`
	Observed  uint64            `json:"observed"`
	Decisions Decisions         `json:"decisions"`
	Policy    Policy            `json:"policy"`
	Targets   []TargetTelemetry `json:"targets"`
}

// RouteTelemetry is one adaptively balanced pool's Telemetry on one
// router: Model is its key (the route's public model name, or "slug/*"
// for a provider group). It is what GET /api/v1/adaptive-routing-telemetry
// gathers from every router.
type RouteTelemetry struct {
	Model string `json:"model"`
	Telemetry
}
