package router

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rolter/rolter/routestats"
)

// child caches one child of a metric vector: WithLabelValues hashes and
// looks up its labels on every call, which the request path pays several
// times per request otherwise. The child is still created on first use
// only, so /metrics shows the same series as without the cache.
type child[T any] struct{ p atomic.Pointer[T] }

// get returns the cached child, creating it with mk on first use (racing
// callers get the same child: WithLabelValues is idempotent).
func (c *child[T]) get(mk func() T) T {
	if v := c.p.Load(); v != nil {
		return *v
	}
	v := mk()
	c.p.Store(&v)
	return v
}

// poolSeries are a pool's cached series; a nil *poolSeries caches nothing.
type poolSeries struct {
	latency, ttft child[prometheus.Observer]
	ok            child[prometheus.Counter]  // rolter_requests_total{code="200"}
	pickTime      child[prometheus.Observer] // rolter_router_pick_seconds{strategy}
}

// targetSeries are a target's cached series; a nil *targetSeries caches
// nothing.
type targetSeries struct {
	inFlight child[prometheus.Gauge]
	success  child[prometheus.Counter] // rolter_target_requests_total{outcome="success"}
	header   child[[]string]           // the x-rolter-target value
	// stats is the target's pair in the route stats ring (routestats.go),
	// replaced when the ring forgets it.
	stats atomic.Pointer[routestats.Handle]
}

func (m *metrics) requestLatency(p *pool) prometheus.Observer {
	mk := func() prometheus.Observer { return m.latency.WithLabelValues(p.key) }
	if p.series == nil {
		return mk()
	}
	return p.series.latency.get(mk)
}

func (m *metrics) requestTTFT(p *pool) prometheus.Observer {
	mk := func() prometheus.Observer { return m.ttft.WithLabelValues(p.key) }
	if p.series == nil {
		return mk()
	}
	return p.series.ttft.get(mk)
}

// request counts a finished client request; p is nil when the address did
// not resolve (label is then "").
func (m *metrics) request(p *pool, label string, code int) {
	if code == 200 && p != nil && p.series != nil {
		p.series.ok.get(func() prometheus.Counter { return m.requests.WithLabelValues(label, "200") }).Inc()
		return
	}
	m.requests.WithLabelValues(label, strconv.Itoa(code)).Inc()
}

func (m *metrics) targetInFlight(t *target) prometheus.Gauge {
	mk := func() prometheus.Gauge { return m.inFlight.WithLabelValues(t.provider.name) }
	if t.series == nil {
		return mk()
	}
	return t.series.inFlight.get(mk)
}

func (m *metrics) targetOutcome(t *target, outcome string) prometheus.Counter {
	mk := func() prometheus.Counter { return m.targets.WithLabelValues(t.provider.name, t.label, outcome) }
	if outcome != "success" || t.series == nil {
		return mk()
	}
	return t.series.success.get(mk)
}
