package router

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the data plane's Prometheus series (names from compat.md),
// registered on the Server's own registry. The model label is the pool key
// (route model, "slug/*", "provider/*"), never a caller-chosen string, so
// cardinality is bounded by the config.
type metrics struct {
	requests      *prometheus.CounterVec   // model, code
	retries       *prometheus.CounterVec   // model
	latency       *prometheus.HistogramVec // model
	ttft          *prometheus.HistogramVec // model
	targets       *prometheus.CounterVec   // provider, target, outcome
	configVersion prometheus.Gauge
	inFlight      *prometheus.GaugeVec   // provider
	parkedUntil   *prometheus.GaugeVec   // provider, target
	resumes       *prometheus.CounterVec // model, outcome (resume.go)
}

var msBuckets = []float64{5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rolter_requests_total", Help: "Client requests by addressed pool and HTTP status.",
		}, []string{"model", "code"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rolter_retries_total", Help: "Attempts retried on another target before the first byte.",
		}, []string{"model"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rolter_request_latency_ms", Help: "Client request latency in milliseconds.", Buckets: msBuckets,
		}, []string{"model"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rolter_request_ttft_ms", Help: "Time to the first response byte in milliseconds.", Buckets: msBuckets,
		}, []string{"model"}),
		targets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rolter_target_requests_total", Help: "Upstream attempts by target and outcome.",
		}, []string{"provider", "target", "outcome"}),
		configVersion: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rolter_config_version", Help: "Version of the config the data plane runs.",
		}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rolter_target_in_flight", Help: "This router's in-flight attempts per provider.",
		}, []string{"provider"}),
		parkedUntil: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rolter_target_parked_until_seconds",
			Help: "Unix time until which a target (provider/model) is parked after a 429 with Retry-After; in the past once it is not.",
		}, []string{"provider", "target"}),
	}
	m.resumes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rolter_stream_resumes_total",
		Help: "Streams broken after the first byte: resumed on another target, failed to resume, or not resumable.",
	}, []string{"model", "outcome"})
	reg.MustRegister(m.requests, m.retries, m.latency, m.ttft, m.targets, m.configVersion, m.inFlight, m.parkedUntil, m.resumes)
	return m
}

// queuedPrefillDesc is rolter_target_queued_prefill_tokens, read at scrape
// time from the running snapshot (prefillCollector).
var queuedPrefillDesc = prometheus.NewDesc("rolter_target_queued_prefill_tokens",
	"Prompt tokens waiting for prefill on the target as this router estimates them when it picks: "+
		"its own in-flight attempts without a first token plus the other routers' sums as last gossiped.",
	[]string{"target"}, nil)

// prefillCollector exports each target's queued-prefill estimate, the
// value its strategies see in RouteContext.QueuedPrefill.
type prefillCollector struct{ s *Server }

// Describe implements prometheus.Collector.
func (c prefillCollector) Describe(ch chan<- *prometheus.Desc) { ch <- queuedPrefillDesc }

// Collect implements prometheus.Collector.
func (c prefillCollector) Collect(ch chan<- prometheus.Metric) {
	for label, n := range c.s.QueuedPrefill() {
		ch <- prometheus.MustNewConstMetric(queuedPrefillDesc, prometheus.GaugeValue, float64(n), label)
	}
}
