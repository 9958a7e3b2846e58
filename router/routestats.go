package router

import (
	"time"

	"github.com/rolter/rolter/routestats"
)

// RouteStats returns this router's per-route, per-target figures over the
// last hour (routestats.Ring.Report), for the admin API's telemetry push.
func (s *Server) RouteStats() []routestats.Route { return s.routeStats.Report() }

// recordStats adds the attempt that just ended on t to the route stats
// ring: the one hook the request path has into it.
func (a *attempt) recordStats(t *target, success bool, begin, now time.Time) {
	a.attempts++
	// Only the attempt that answers the client relays, so a first byte
	// is always this attempt's.
	a.s.routeStats.Record(a.res.pool.key, t.provider.name, t.label, routestats.Attempt{Retry: a.attempts > 1, OK: success,
		Latency: now.Sub(begin), TTFT: a.firstByte.Sub(begin), FirstByte: !a.firstByte.IsZero(), At: now})
}
