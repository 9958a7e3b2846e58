package config

import (
	"math"
	"net/url"
)

// Tracing is the [tracing] section: OpenTelemetry traces of every request
// exported over OTLP. It is process-local (like [health]) and read when
// the router starts. An empty Endpoint turns tracing off. Exporter
// headers (an API key for a hosted collector) come from the environment
// as OTEL_EXPORTER_OTLP_HEADERS or OTEL_EXPORTER_OTLP_TRACES_HEADERS, so
// no secret sits in rolter.toml.
type Tracing struct {
	// Endpoint is the collector, e.g. "http://otel-collector:4318" (the
	// router posts to /v1/traces) or, with Protocol "grpc",
	// "http://otel-collector:4317". An http:// endpoint is plaintext.
	Endpoint string `toml:"endpoint"`
	// Protocol is "http" (OTLP/HTTP protobuf, the default) or "grpc".
	Protocol string `toml:"protocol"`
	// SampleRatio is the fraction of new traces recorded (parent-based:
	// a request arriving with a traceparent follows its sampled flag).
	// Default 1.0.
	SampleRatio float64 `toml:"sample_ratio"`
	// ServiceName is the service.name resource attribute (default
	// "rolter").
	ServiceName string `toml:"service_name"`
}

// Observability is the [observability] section: what the router tells
// clients and its log about each request. Process-local.
type Observability struct {
	// RoutingHeaders adds x-rolter-target, x-rolter-node-id and
	// x-rolter-attempts to every response (default true); turn it off
	// when clients must not learn the fleet's layout. x-request-id is
	// always returned.
	RoutingHeaders bool `toml:"routing_headers"`
	// RequestLog writes one structured "request" line per client request
	// (default false: the line and the usage reading behind it add CPU
	// to every request; BENCHMARKS.md has the measured cost).
	RequestLog bool `toml:"request_log"`
	// RequestLogSampleRatio is the fraction of successful requests
	// logged (default 1.0: all); a request that ends with a status ≥ 400
	// is always logged.
	RequestLogSampleRatio float64 `toml:"request_log_sample_ratio"`
}

// defaultTracing and defaultObservability are Default's sections.
func defaultTracing() Tracing {
	return Tracing{Protocol: "http", SampleRatio: 1, ServiceName: "rolter"}
}

func defaultObservability() Observability {
	return Observability{RoutingHeaders: true, RequestLog: false, RequestLogSampleRatio: 1}
}

// checkObserve validates [tracing] and [observability].
func (c *Config) checkObserve(v *validator) {
	t := c.Tracing
	if t.Endpoint != "" {
		if u, err := url.Parse(t.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.add("tracing", "endpoint", "must be an http:// or https:// URL such as \"http://otel-collector:4318\"")
		}
	}
	if t.Protocol != "http" && t.Protocol != "grpc" {
		v.add("tracing", "protocol", `must be "http" or "grpc"`)
	}
	if ratio(t.SampleRatio) {
		v.add("tracing", "sample_ratio", "must be in [0, 1]")
	}
	if t.ServiceName == "" {
		v.add("tracing", "service_name", "must not be empty")
	}
	if ratio(c.Observability.RequestLogSampleRatio) {
		v.add("observability", "request_log_sample_ratio", "must be in [0, 1]")
	}
}

// ratio reports whether f is outside [0, 1].
func ratio(f float64) bool { return math.IsNaN(f) || f < 0 || f > 1 }
