package router

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/rolter/rolter/config"
)

// NewTracerProvider builds the OpenTelemetry SDK provider [tracing]
// describes: an OTLP exporter (HTTP protobuf to <endpoint>/v1/traces, or
// gRPC), batched, sampling new traces at sample_ratio and following an
// incoming traceparent's decision. Exporter headers come from
// OTEL_EXPORTER_OTLP_HEADERS / OTEL_EXPORTER_OTLP_TRACES_HEADERS, which the
// SDK reads itself. nodeID becomes service.instance.id. It returns nil
// when the section has no endpoint. Shut the provider down to flush the
// last spans.
func NewTracerProvider(ctx context.Context, t config.Tracing, nodeID string) (*sdktrace.TracerProvider, error) {
	if t.Endpoint == "" {
		return nil, nil
	}
	var exp *otlptrace.Exporter
	var err error
	switch t.Protocol {
	case "grpc":
		exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(t.Endpoint))
	default:
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(tracesURL(t.Endpoint)))
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", t.ServiceName)}
	if nodeID != "" {
		attrs = append(attrs, attribute.String("service.instance.id", nodeID))
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(t.SampleRatio))),
	), nil
}

// tracesURL is an OTLP/HTTP endpoint with the traces path: a bare
// collector address gets /v1/traces, a URL with a path is kept.
func tracesURL(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || strings.Trim(u.Path, "/") != "" {
		return endpoint
	}
	u.Path = "/v1/traces"
	return u.String()
}
