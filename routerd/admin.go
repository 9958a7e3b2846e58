package routerd

import (
	"github.com/rolter/rolter/adaptive"
	"github.com/rolter/rolter/adminapi"
	"github.com/rolter/rolter/router/admission"
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
	_ adminapi.AdmissionSource = adminSource{}
)

// AdaptiveTelemetry implements adminapi.TelemetrySource over the running
// snapshot's adaptive balancers.
func (s adminSource) AdaptiveTelemetry() []adaptive.RouteTelemetry {
	return s.r.srv.AdaptiveTelemetry()
}

// RouteStats implements adminapi.StatsSource: the data plane's route
// stats ring.
func (s adminSource) RouteStats() []routestats.Route { return s.r.srv.RouteStats() }

// ConfigVersion implements adminapi.VersionSource: the config_version the
// data plane runs.
func (s adminSource) ConfigVersion() uint64 { return s.r.srv.ConfigVersion() }

// AdmissionState implements adminapi.AdmissionSource: the data plane's
// admission queues and engine saturation (nil while [admission] is off).
func (s adminSource) AdmissionState() *adminapi.AdmissionReport {
	queues, sat, on := s.r.srv.AdmissionState()
	if !on {
		return nil
	}
	out := &adminapi.AdmissionReport{Queues: map[string]adminapi.BandDepths{}, Saturation: sat}
	for pool, d := range queues {
		out.Queues[pool] = adminapi.BandDepths{Critical: d[admission.Critical], Standard: d[admission.Standard],
			Sheddable: d[admission.Sheddable]}
	}
	return out
}

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
