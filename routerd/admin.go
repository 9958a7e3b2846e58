package routerd

import (
	"github.com/rolter/rolter/adminapi"
	"github.com/rolter/rolter/routestats"
)

// adminSource is what the admin API and the telemetry pusher read of the
// data plane: adminapi's TelemetrySource (with StatsSource and
// VersionSource) and ParkedSource. It is read per admin request and per
// push, after Open built the data plane.
type adminSource struct{ r *Router }

var (
	_ adminapi.TelemetrySource = adminSource{}
	_ adminapi.StatsSource     = adminSource{}
	_ adminapi.VersionSource   = adminSource{}
	_ adminapi.ParkedSource    = adminSource{}
)

// AdaptiveTelemetry implements adminapi.TelemetrySource over the running
// snapshot's adaptive balancers.
func (s adminSource) AdaptiveTelemetry() []adminapi.RouteSample {
	routes := s.r.srv.AdaptiveTelemetry()
	out := make([]adminapi.RouteSample, 0, len(routes))
	for _, r := range routes {
		rs := adminapi.RouteSample{Model: r.Model, Engaged: r.Engaged, Observed: int64(r.Observed), Policy: r.Policy,
			Decisions: adminapi.Decisions{Blend: int64(r.Decisions.Blend), Exploration: int64(r.Decisions.Exploration),
				Fallback: int64(r.Decisions.Fallback)},
			Targets: make([]adminapi.TargetSample, len(r.Targets))}
		for i, t := range r.Targets {
			rs.Targets[i] = adminapi.TargetSample{Target: t.Target, Provider: t.Provider, UpstreamModel: t.UpstreamModel,
				Score: t.Score, LatencyScore: t.LatencyScore, CostScore: t.CostScore, LoadScore: t.LoadScore,
				LatencyMs: t.LatencyMs, CostPerMtok: t.CostPerMtok, InFlight: int64(t.InFlight), Samples: int64(t.Samples),
				LastSampleAgeMs: t.LastSampleAgeMs}
		}
		out = append(out, rs)
	}
	return out
}

// RouteStats implements adminapi.StatsSource: the data plane's route
// stats ring.
func (s adminSource) RouteStats() []routestats.Route { return s.r.srv.RouteStats() }

// ConfigVersion implements adminapi.VersionSource: the config_version the
// data plane runs.
func (s adminSource) ConfigVersion() uint64 { return s.r.srv.ConfigVersion() }

// staticEndpoints is adminapi.Endpoints over --peer-admin.
type staticEndpoints []string

// TelemetryEndpoints implements adminapi.Endpoints.
func (e staticEndpoints) TelemetryEndpoints() []string { return e }

// ParkedTargets implements adminapi.ParkedSource.
func (s adminSource) ParkedTargets() []adminapi.ParkedTarget {
	var out []adminapi.ParkedTarget
	for _, t := range s.r.srv.ParkedTargets() {
		out = append(out, adminapi.ParkedTarget{Target: t.Target, Model: t.Model, Until: t.Until.UTC(), Reason: t.Reason})
	}
	return out
}
