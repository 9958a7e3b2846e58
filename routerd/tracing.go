package routerd

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/router"
)

// startTracing builds the tracer provider [tracing] asks for (nil when it
// has no endpoint) and returns a stop that flushes the last spans.
func startTracing(ctx context.Context, t config.Tracing, nodeID string, log *slog.Logger) (trace.TracerProvider, func(), error) {
	tp, err := router.NewTracerProvider(ctx, t, nodeID)
	if err != nil || tp == nil {
		return nil, func() {}, err
	}
	log.Info("tracing", "endpoint", t.Endpoint, "protocol", t.Protocol, "sample_ratio", t.SampleRatio)
	return tp, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("flushing the last spans", "err", err)
		}
	}, nil
}
