package router

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/strategies"
)

// discardExporter drops every batch: the benchmark measures the router's
// side of tracing (spans, attributes, the batch queue), not a collector.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkRequestPathObserved is BenchmarkRequestPath with the
// observation features on: traced (every request sampled, batched to a
// discarding exporter) and logged (the request line as JSON to
// io.Discard).
func BenchmarkRequestPathObserved(b *testing.B) {
	for _, mode := range []string{"traced", "logged"} {
		for _, stream := range []bool{false, true} {
			name, flag := mode+"/json", "false"
			if stream {
				name, flag = mode+"/sse", "true"
			}
			b.Run(name, func(b *testing.B) {
				toml := benchConfig
				o := Options{Transport: memEngine{sse: stream}, Rand: strategies.NewRand(1)}
				if mode == "traced" {
					tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
					defer func() { _ = tp.Shutdown(context.Background()) }()
					o.TracerProvider = tp
				} else {
					toml += "\n[observability]\nrequest_log = true\n"
					o.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
				}
				cfg, err := config.Parse("rolter.toml", []byte(toml), func(string) string { return "" })
				if err != nil {
					b.Fatal(err)
				}
				s := New(o)
				if err := s.Apply(cfg); err != nil {
					b.Fatal(err)
				}
				serveBenchBody(b, s.Handler(), strings.Replace(benchBody, "%s", flag, 1))
			})
		}
	}
}
