package router

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rolter/rolter/adaptive"
)

// adaptiveBalancer is what the router reads from an adaptive pool's
// balancer (strategies.(*Adaptive)) for telemetry and metrics.
type adaptiveBalancer interface {
	Telemetry() adaptive.Telemetry
}

// AdaptiveTelemetry returns the current state of every adaptive balancer
// in the running snapshot (routes and provider groups), sorted by model.
// Scores are computed here, off the request path; nil when the snapshot
// has no adaptive pool.
func (s *Server) AdaptiveTelemetry() []adaptive.RouteTelemetry {
	sn := s.snap.Load()
	if sn == nil {
		return nil
	}
	var out []adaptive.RouteTelemetry
	add := func(pools map[string]*pool) {
		for _, p := range pools {
			if a, ok := p.lb.(adaptiveBalancer); ok {
				out = append(out, adaptive.RouteTelemetry{Model: p.key, Telemetry: a.Telemetry()})
			}
		}
	}
	add(sn.routes)
	add(sn.groups)
	sort.Slice(out, func(i, j int) bool { return out[i].Model < out[j].Model })
	return out
}

// Policy returns the adaptive routing policy the balancers read now.
func (s *Server) Policy() adaptive.Policy { return s.policy.Load() }

// adaptiveCollector exports the rolter_adaptive_routing_* series of
// compat.md, read from the balancers at scrape time.
type adaptiveCollector struct {
	s         *Server
	score     *prometheus.Desc
	decisions *prometheus.Desc
	engaged   *prometheus.Desc
}

func newAdaptiveCollector(s *Server) *adaptiveCollector {
	return &adaptiveCollector{
		s: s,
		score: prometheus.NewDesc("rolter_adaptive_routing_target_score",
			"Blended adaptive score of a target (latency + cost + load shares, 0..1).", []string{"model", "target"}, nil),
		decisions: prometheus.NewDesc("rolter_adaptive_routing_decisions_total",
			"Adaptive picks by mode since the route's balancer was built.", []string{"model", "mode"}, nil),
		engaged: prometheus.NewDesc("rolter_adaptive_routing_engaged",
			"1 when the adaptive blend is steering the route, 0 while it defers to its fallback.", []string{"model"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *adaptiveCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.score
	ch <- c.decisions
	ch <- c.engaged
}

// Collect implements prometheus.Collector.
func (c *adaptiveCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.s.AdaptiveTelemetry() {
		engaged := 0.0
		if r.Engaged {
			engaged = 1
		}
		ch <- prometheus.MustNewConstMetric(c.engaged, prometheus.GaugeValue, engaged, r.Model)
		d := r.Decisions
		ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(d.Blend), r.Model, "blend")
		ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(d.Exploration), r.Model, "exploration")
		ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(d.Fallback), r.Model, "fallback")
		seen := make(map[string]bool, len(r.Targets))
		for _, t := range r.Targets {
			if seen[t.Target] { // one series per label set, even if a target is listed twice
				continue
			}
			seen[t.Target] = true
			ch <- prometheus.MustNewConstMetric(c.score, prometheus.GaugeValue, t.Score, r.Model, t.Target)
		}
	}
}
