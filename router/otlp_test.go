package router

import (
	"context"
	"net"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/rolter/rolter/config"
)

// grpcReceiver is an in-process OTLP/gRPC collector.
type grpcReceiver struct {
	coltrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names []string
}

func (g *grpcReceiver) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				g.names = append(g.names, s.Name)
			}
		}
	}
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// protocol = "grpc" exports the same spans over OTLP/gRPC.
func TestTracingOverGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc := &grpcReceiver{}
	srv := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(srv, rc)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	tp, err := NewTracerProvider(context.Background(), config.Tracing{Endpoint: "http://" + ln.Addr().String(),
		Protocol: "grpc", SampleRatio: 1, ServiceName: "rolter"}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	eng := newEngine(t, okChat)
	h := newHarnessWith(t, providers("a", eng.URL)+"[[routes]]\nmodel = \"m\"\ntargets = [{provider = \"a\"}]\n", nil,
		func(o *Options) { o.TracerProvider = tp })
	if code, _, body := h.chat("m"); code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	got := map[string]int{}
	for _, n := range rc.names {
		got[n]++
	}
	if got["route"] != 1 || got["pick"] != 1 || got["attempt"] != 1 {
		t.Errorf("spans received over gRPC: %v, want one route, pick and attempt", got)
	}
}

// Exporter headers come from the SDK's standard environment variable,
// not from rolter.toml.
func TestTracingHeadersFromEnv(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-collector-key=from-env")
	rc := newOTLPReceiver(t)
	eng := newEngine(t, okChat)
	h, flush := tracedHarness(t, rc, providers("a", eng.URL)+"[[routes]]\nmodel = \"m\"\ntargets = [{provider = \"a\"}]\n")
	if code, _, _ := h.chat("m"); code != 200 {
		t.Fatalf("status %d", code)
	}
	flush()
	if len(rc.named("route")) != 1 {
		t.Fatalf("%d route spans, want 1", len(rc.named("route")))
	}
	rc.mu.Lock()
	got := rc.header.Get("X-Collector-Key")
	rc.mu.Unlock()
	if got != "from-env" {
		t.Errorf("collector saw x-collector-key %q, want from-env", got)
	}
}
