package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/router"
)

// newLogger is the process logger for --log-format: "text" (logfmt-like
// key=value) or "json" (one object a line, what log shippers parse).
func newLogger(format string, w io.Writer) (*slog.Logger, error) {
	switch format {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, nil)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, nil)), nil
	}
	return nil, fmt.Errorf("%w: --log-format must be text or json, not %q", errUsage, format)
}

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

// standaloneNodeID names a standalone router in x-rolter-node-id and its
// spans: --node-id, then $ROLTER_NODE_ID, then <hostname>-router-<--http
// port> ("" when none can be made: the header is then left out).
func standaloneNodeID(flagID, httpAddr string) string {
	if flagID != "" {
		return flagID
	}
	if id := os.Getenv("ROLTER_NODE_ID"); id != "" {
		return id
	}
	id, _ := defaultNodeID("router", httpAddr)
	return id
}
