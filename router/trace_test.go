package router

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	v1 "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/rolter/rolter/config"
)

// otlpReceiver is an in-process OTLP/HTTP collector: it decodes the
// official protobuf the exporter posts to /v1/traces.
type otlpReceiver struct {
	*httptest.Server
	mu      sync.Mutex
	spans   []*tracepb.Span
	service string
	header  http.Header // of the last export
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	rc := &otlpReceiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want protobuf on /v1/traces", http.StatusBadRequest)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var req v1.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		rc.header = r.Header.Clone()
		for _, rs := range req.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					rc.service = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				rc.spans = append(rc.spans, ss.Spans...)
			}
		}
		rc.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&v1.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *otlpReceiver) named(name string) []*tracepb.Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range rc.spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value
		}
	}
	return nil
}

func attrString(s *tracepb.Span, key string) string { return attr(s, key).GetStringValue() }

// tracedHarness is a router exporting to rc through the real OTLP/HTTP
// exporter [tracing] configures; flush sends what it holds.
func tracedHarness(t *testing.T, rc *otlpReceiver, toml string) (h *harness, flush func()) {
	t.Helper()
	tp, err := NewTracerProvider(context.Background(), config.Tracing{Endpoint: rc.URL, Protocol: "http",
		SampleRatio: 1, ServiceName: "rolter-test"}, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	h = newHarnessWith(t, toml, nil, func(o *Options) { o.TracerProvider, o.NodeID = tp, "node-a" })
	return h, func() {
		if err := tp.ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
)

// A request arriving with a traceparent yields one trace: the route span
// under the client's span, the pick and the attempt under the route, the
// pick naming the chosen target, and the engine receiving a traceparent
// that names the attempt span.
func TestTraceOfARequest(t *testing.T) {
	rc := newOTLPReceiver(t)
	var mu sync.Mutex
	var gotParent, gotID string
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		mu.Lock()
		gotParent, gotID = r.Header.Get("Traceparent"), r.Header.Get("X-Request-Id")
		mu.Unlock()
		okChat(w, r, body)
	})
	h, flush := tracedHarness(t, rc, providers("a", eng.URL)+`
[[routes]]
model = "m"
targets = [{provider = "a", model = "meta/m"}]
`)
	code, hdr, body := h.chat("m", "traceparent", "00-"+clientTraceID+"-"+clientSpanID+"-01", "x-request-id", "req-42")
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	if hdr.Get("X-Request-Id") != "req-42" || gotID != "req-42" {
		t.Errorf("x-request-id: client got %q, engine got %q; want req-42 both", hdr.Get("X-Request-Id"), gotID)
	}
	if hdr.Get("X-Rolter-Target") != "a/meta/m" || hdr.Get("X-Rolter-Node-Id") != "node-a" || hdr.Get("X-Rolter-Attempts") != "1" {
		t.Errorf("routing headers %v", hdr)
	}
	flush()

	routes, picks, attempts := rc.named("route"), rc.named("pick"), rc.named("attempt")
	if len(routes) != 1 || len(picks) != 1 || len(attempts) != 1 {
		t.Fatalf("spans: %d route, %d pick, %d attempt; want one each", len(routes), len(picks), len(attempts))
	}
	route, pick, att := routes[0], picks[0], attempts[0]
	for _, s := range []*tracepb.Span{route, pick, att} {
		if hexID(s.TraceId) != clientTraceID {
			t.Errorf("span %s in trace %s, want the client's %s", s.Name, hexID(s.TraceId), clientTraceID)
		}
	}
	if hexID(route.ParentSpanId) != clientSpanID {
		t.Errorf("route's parent %s, want the client's span %s", hexID(route.ParentSpanId), clientSpanID)
	}
	if hexID(pick.ParentSpanId) != hexID(route.SpanId) || hexID(att.ParentSpanId) != hexID(route.SpanId) {
		t.Errorf("pick and attempt parents %s, %s; want the route span %s", hexID(pick.ParentSpanId), hexID(att.ParentSpanId), hexID(route.SpanId))
	}
	if got := attrString(pick, "rolter.pick.target"); got != "a/meta/m" {
		t.Errorf("pick span names target %q, want a/meta/m", got)
	}
	if got := attr(pick, "rolter.pick.eligible").GetIntValue(); got != 1 {
		t.Errorf("pick span counts %d eligible targets, want 1", got)
	}
	mu.Lock()
	want := "00-" + clientTraceID + "-" + hexID(att.SpanId) + "-01"
	if gotParent != want {
		t.Errorf("engine got traceparent %q, want %q (the attempt span)", gotParent, want)
	}
	mu.Unlock()
	if attrString(route, "gen_ai.request.model") != "m" || attrString(att, "gen_ai.request.model") != "meta/m" {
		t.Errorf("gen_ai.request.model: route %q, attempt %q", attrString(route, "gen_ai.request.model"), attrString(att, "gen_ai.request.model"))
	}
	if attr(route, "gen_ai.usage.input_tokens").GetIntValue() != 3 || attr(route, "gen_ai.usage.output_tokens").GetIntValue() != 1 {
		t.Errorf("usage attributes missing from the route span: %v", route.Attributes)
	}
	if fr := attr(route, "gen_ai.response.finish_reasons").GetArrayValue().GetValues(); len(fr) != 1 || fr[0].GetStringValue() != "stop" {
		t.Errorf("finish reasons %v", fr)
	}
	for _, s := range []*tracepb.Span{route, pick, att} {
		if attrString(s, "rolter.request_id") != "req-42" {
			t.Errorf("%s span request id %q, want req-42", s.Name, attrString(s, "rolter.request_id"))
		}
	}
	firstToken := false
	for _, e := range att.Events {
		firstToken = firstToken || e.Name == "first_token"
	}
	if !firstToken {
		t.Error("attempt span has no first_token event")
	}
	if rc.service != "rolter-test" {
		t.Errorf("service.name %q", rc.service)
	}
}

// A request retried on another target shows two attempt spans: the
// failed one with its status, the second with the retry's reason.
func TestTraceOfARetriedRequest(t *testing.T) {
	rc := newOTLPReceiver(t)
	bad := newEngine(t, status(503))
	var mu sync.Mutex
	var parents []string
	good := newEngine(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		mu.Lock()
		parents = append(parents, r.Header.Get("Traceparent"))
		mu.Unlock()
		okChat(w, r, body)
	})
	h, flush := tracedHarness(t, rc, providers("bad", bad.URL, "good", good.URL)+`
[[routes]]
model = "m"
targets = [{provider = "bad"}, {provider = "good"}]
`)
	code, hdr, body := h.chat("m")
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	if hdr.Get("X-Rolter-Attempts") != "2" || hdr.Get("X-Rolter-Target") != "good/m" {
		t.Errorf("routing headers %v, want 2 attempts served by good/m", hdr)
	}
	id := hdr.Get("X-Request-Id")
	if len(id) != requestIDLen {
		t.Errorf("generated x-request-id %q", id)
	}
	flush()
	attempts := rc.named("attempt")
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans, want 2", len(attempts))
	}
	byN := map[int64]*tracepb.Span{}
	for _, s := range attempts {
		byN[attr(s, "rolter.attempt").GetIntValue()] = s
	}
	first, second := byN[1], byN[2]
	if first == nil || second == nil {
		t.Fatalf("attempt numbers %v", byN)
	}
	if attrString(first, "rolter.target") != "bad/m" || attr(first, "http.response.status_code").GetIntValue() != 503 ||
		first.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("first attempt %v", first.Attributes)
	}
	if attrString(second, "rolter.target") != "good/m" || attrString(second, "rolter.retry_reason") != "http_503" {
		t.Errorf("second attempt %v", second.Attributes)
	}
	if hexID(first.TraceId) != hexID(second.TraceId) || hexID(first.ParentSpanId) != hexID(second.ParentSpanId) {
		t.Error("the two attempts are not siblings in one trace")
	}
	if len(rc.named("route")) != 1 || len(rc.named("pick")) != 2 {
		t.Errorf("%d route and %d pick spans, want 1 and 2", len(rc.named("route")), len(rc.named("pick")))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(parents) != 1 || !strings.Contains(parents[0], hexID(second.SpanId)) {
		t.Errorf("good engine traceparent %v, want the second attempt's span %s", parents, hexID(second.SpanId))
	}
}

func hexID(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// Sampling is parent-based: a client's unsampled traceparent records
// nothing, and the engine still gets the trace id with the flag off.
func TestTraceFollowsAnUnsampledParent(t *testing.T) {
	rc := newOTLPReceiver(t)
	var mu sync.Mutex
	var got string
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		mu.Lock()
		got = r.Header.Get("Traceparent")
		mu.Unlock()
		okChat(w, r, body)
	})
	h, flush := tracedHarness(t, rc, providers("a", eng.URL)+"[[routes]]\nmodel = \"m\"\ntargets = [{provider = \"a\"}]\n")
	if code, _, _ := h.chat("m", "traceparent", "00-"+clientTraceID+"-"+clientSpanID+"-00"); code != 200 {
		t.Fatalf("status %d", code)
	}
	flush()
	if n := len(rc.named("route")) + len(rc.named("pick")) + len(rc.named("attempt")); n != 0 {
		t.Errorf("%d spans exported for an unsampled parent", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.HasPrefix(got, "00-"+clientTraceID+"-") || !strings.HasSuffix(got, "-00") || strings.Contains(got, clientSpanID) {
		t.Errorf("engine got traceparent %q, want the client's trace id, a new span id, sampled flag off", got)
	}
}
