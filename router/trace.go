package router

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/rolter/rolter/strategies"
)

// Per-request observation: the request id, the routing headers, the
// OpenTelemetry spans (route → pick, attempt per upstream try), the stage
// timings and the request log line. proxy.go calls the hooks below at
// each step; with tracing off and no log line wanted they cost a few
// clock reads and histogram adds and allocate nothing.
//
// Spans: "route" (server span, the client request) is the parent of one
// "pick" per strategy call and one "attempt" (client span) per upstream
// try. The attempt's context is injected as traceparent into the
// upstream request, so an engine tracing with --otlp-traces-endpoint
// joins the trace under the attempt.

// reqObs is a request's observation state, held in its attempt.
type reqObs struct {
	id    string
	idv   [1]string // the x-request-id header value, aliasing id
	idBuf [requestIDLen]byte
	// target is the label of the target whose response the client got.
	target   string
	attempts int
	bytesIn  int64
	bytesOut int64
	firstAt  time.Time // first response byte to the client (s.clock)
	parse    time.Duration

	sent      time.Time // the current attempt's request went out
	headersAt time.Time // its response headers arrived
	relaying  bool
	status    int     // the current attempt's upstream status (0: none yet)
	failed    *target // the target of the failed response kept for relayFailure
	outcome   string  // the previous attempt's outcome: the next one's retry reason

	logOn bool      // the line is written whatever the status
	tap   *usageTap // non-nil when usage is read from the response
	usage *usage    // what the tap read at the end of a relay (nil: nothing); in the tap

	ctx    context.Context // carries the route span
	span   trace.Span      // route; nil when tracing is off
	traced bool            // span records (sampled)
	att    trace.Span      // the current attempt's span
}

const tracerName = "github.com/rolter/rolter/router"

// attemptValues are the x-rolter-attempts values, shared by every
// response so stamping one allocates nothing.
var attemptValues = func() [12][]string {
	var v [12][]string
	for i := range v {
		v[i] = []string{strconv.Itoa(i)}
	}
	return v
}()

func attemptsValue(n int) []string {
	if n < len(attemptValues) {
		return attemptValues[n]
	}
	return []string{strconv.Itoa(n)}
}

// begin starts the request's observation: its id (returned to the client
// on every answer, errors included), the node id header and the route span.
func (a *attempt) begin() {
	s, o := a.s, &a.obs
	o.id = s.requestID(a.r.header("X-Request-Id"), &o.idBuf)
	o.idv[0] = o.id
	a.w.setHeader("X-Request-Id", o.idv[:])
	obs := a.sn.cfg.Observability
	if obs.RoutingHeaders && s.nodeIDHeader != nil {
		a.w.setHeader("X-Rolter-Node-Id", s.nodeIDHeader)
	}
	if obs.RequestLog {
		o.logOn = s.wantsLog(a.r.Context(), obs.RequestLogSampleRatio)
	}
	if s.tracer != nil {
		ctx := s.prop.Extract(a.r.Context(), a.r.carrier())
		o.ctx, o.span = s.tracer.Start(ctx, "route", trace.WithSpanKind(trace.SpanKindServer))
		o.traced = o.span.IsRecording()
		if o.traced {
			o.span.SetAttributes(attribute.String("rolter.request_id", o.id),
				attribute.String("http.request.method", a.r.method()), attribute.String("url.path", a.r.path()))
			if s.nodeID != "" {
				o.span.SetAttributes(attribute.String("rolter.node_id", s.nodeID))
			}
		}
	}
	if o.logOn || o.traced {
		o.tap = taps.Get().(*usageTap)
		o.tap.n, o.tap.usage = 0, usage{}
	}
}

// stage records a stage that ran since → now, now read from the Server's
// clock, and returns now: the start of whatever comes next.
func (a *attempt) stage(st int, since time.Time) time.Time {
	now := a.s.clock.Now()
	a.times.put(a.s.stages, st, now.Sub(since))
	return now
}

// stageTo records a stage that ran since → now, for a caller that has
// read the clock already.
func (a *attempt) stageTo(st int, since, now time.Time) { a.s.stages.observed(st, since, now) }

// pickDone ends a pick that began at start: one clock read times both
// the pick stage and the strategy's pick-time series (the strategy's
// picks, the loads it reads and the eligibility it asks for).
func (a *attempt) pickDone(start time.Time) {
	d := a.s.clock.Now().Sub(start)
	a.times.put(a.s.stages, stagePick, d)
	a.times.putPick(a.s.stages, a.res.pool, d)
}

// pickTarget is the strategy's pick, explained in a "pick" span when the
// request is traced.
func (a *attempt) pickTarget(eligible strategies.Eligible) (int, bool) {
	p := a.res.pool
	if !a.obs.traced {
		return p.lb.PickEligible(a.rc, a.loads, eligible)
	}
	_, span := a.s.tracer.Start(a.obs.ctx, "pick")
	defer span.End()
	var ex strategies.Explanation
	idx, ok := strategies.PickExplained(p.lb, a.rc, a.loads, eligible, &ex)
	attrs := []attribute.KeyValue{
		attribute.String("rolter.request_id", a.obs.id),
		attribute.String("rolter.strategy", p.lb.Name()),
		attribute.Int("rolter.pick.eligible", ex.Eligible),
		attribute.String("rolter.pick.mode", ex.Mode),
	}
	if ex.Fallback != "" {
		attrs = append(attrs, attribute.String("rolter.pick.fallback", ex.Fallback))
	}
	if !ok || idx < 0 || idx >= len(p.targets) {
		span.SetAttributes(attrs...)
		span.SetStatus(codes.Error, "no eligible target")
		return idx, ok
	}
	attrs = append(attrs, attribute.String("rolter.pick.target", p.targets[idx].label),
		attribute.String("rolter.pick.provider", p.targets[idx].provider.name))
	if len(ex.Components) > 0 {
		attrs = append(attrs, attribute.Float64("rolter.pick.score", ex.Score))
	}
	for _, c := range ex.Components {
		attrs = append(attrs, attribute.Float64("rolter.pick.score."+c.Name, c.Score),
			attribute.Float64("rolter.pick.weight."+c.Name, c.Weight))
	}
	if r := ex.RunnerUp; r >= 0 && r < len(p.targets) {
		attrs = append(attrs, attribute.String("rolter.pick.runner_up", p.targets[r].label),
			attribute.Float64("rolter.pick.runner_up_score", ex.RunnerUpScore))
	}
	span.SetAttributes(attrs...)
	return idx, ok
}

// startAttempt counts an upstream attempt on t, sends the request id and,
// when tracing, starts the attempt span and injects its traceparent. sent
// is when the attempt began (the Server's clock): its request goes out
// now.
func (a *attempt) startAttempt(out *fasthttp.RequestHeader, t *target, upstreamModel string, sent time.Time) {
	s, o := a.s, &a.obs
	o.attempts++
	out.SetCanonical(bytesOf("X-Request-Id"), bytesOf(o.idv[0]))
	if a.sn.cfg.Observability.RoutingHeaders {
		a.w.setHeader("X-Rolter-Attempts", attemptsValue(o.attempts))
	}
	if s.tracer != nil {
		opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
		if o.traced { // the parent-based sampler records the child too
			attrs := make([]attribute.KeyValue, 0, 7)
			attrs = append(attrs,
				attribute.String("rolter.request_id", o.id),
				attribute.Int("rolter.attempt", o.attempts),
				attribute.String("rolter.target", t.label),
				attribute.String("rolter.provider", t.provider.name),
				attribute.String("gen_ai.operation.name", operationName(a.r.path())),
				attribute.String("gen_ai.request.model", upstreamModel))
			if o.attempts > 1 && o.outcome != "" {
				attrs = append(attrs, attribute.String("rolter.retry_reason", o.outcome))
			}
			opts = append(opts, trace.WithAttributes(attrs...))
		}
		ctx, span := s.tracer.Start(o.ctx, "attempt", opts...)
		s.prop.Inject(ctx, upstreamCarrier{out})
		o.att = span
	}
	o.status = 0
	o.sent = sent
}

// upstreamCarrier writes a trace context into the engine's request
// header.
type upstreamCarrier struct{ h *fasthttp.RequestHeader }

func (c upstreamCarrier) Get(key string) string { return string(c.h.Peek(key)) }
func (c upstreamCarrier) Set(key, value string) { c.h.Set(key, value) }
func (c upstreamCarrier) Keys() []string {
	var keys []string
	for k := range c.h.All() {
		keys = append(keys, string(k))
	}
	return keys
}

// upstreamAnswered records the time to the upstream's response headers.
func (a *attempt) upstreamAnswered(resp *reply) {
	o := &a.obs
	if resp == nil {
		return
	}
	o.headersAt = a.stage(stageTTFB, o.sent)
	o.status = resp.StatusCode
}

// stampHeaders sets the routing headers of a response from target t
// (after the upstream's headers were copied, so an upstream cannot forge
// them) and remembers t as the target that served.
func (a *attempt) stampHeaders(t *target) {
	o, h := &a.obs, a.w
	h.setHeader("X-Request-Id", o.idv[:])
	if t != nil {
		o.target = t.label
	}
	if !a.sn.cfg.Observability.RoutingHeaders {
		return
	}
	if t != nil {
		h.setHeader("X-Rolter-Target", targetHeader(t))
	}
	h.setHeader("X-Rolter-Attempts", attemptsValue(o.attempts))
	if a.s.nodeIDHeader != nil {
		h.setHeader("X-Rolter-Node-Id", a.s.nodeIDHeader)
	}
}

// targetHeader is t's x-rolter-target value, made once per target.
func targetHeader(t *target) []string {
	mk := func() []string { return []string{t.label} }
	if t.series == nil {
		return mk()
	}
	return t.series.header.get(mk)
}

// relayStart marks the start of the relay of t's response.
func (a *attempt) relayStart(t *target) {
	a.stampHeaders(t)
	a.obs.relaying = true
}

// firstToken records the first response byte reaching the client.
func (a *attempt) firstToken(now time.Time) {
	o := &a.obs
	o.firstAt = now
	if o.att != nil && o.att.IsRecording() {
		o.att.AddEvent("first_token", trace.WithAttributes(attribute.Float64("rolter.ttft_ms", ms(now.Sub(a.start)))))
	}
}

// relayed counts bytes written to the client and feeds the usage tap.
func (a *attempt) relayed(p []byte) {
	a.obs.bytesOut += int64(len(p))
	if a.obs.tap != nil {
		a.obs.tap.write(p)
	}
}

// endAttempt closes the attempt with its outcome ("success",
// "connect_error", "http_503", …) at now (the Server's clock).
func (a *attempt) endAttempt(outcome string, now time.Time) {
	o := &a.obs
	o.outcome = outcome
	if o.relaying {
		o.relaying = false
		a.stageTo(stageRelay, o.headersAt, now)
		if o.tap != nil {
			o.tap.usage = parseUsage(o.tap.tail())
			o.usage = &o.tap.usage
		}
	}
	if o.att == nil {
		return
	}
	if o.att.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 8)
		attrs = append(attrs, attribute.String("rolter.outcome", outcome))
		if o.status != 0 {
			attrs = append(attrs, attribute.Int("http.response.status_code", o.status),
				attribute.Float64("rolter.ttfb_ms", ms(o.headersAt.Sub(o.sent))))
		}
		o.att.SetAttributes(usageAttrs(attrs, o.usage)...)
		if outcome != "success" {
			o.att.SetStatus(codes.Error, outcome)
		}
	}
	o.att.End()
	o.att = nil
}

// finish ends the route span and writes the request log line.
func (a *attempt) finish(code int) {
	s, o := a.s, &a.obs
	if o.span != nil {
		if o.traced {
			attrs := make([]attribute.KeyValue, 0, 12)
			attrs = append(attrs,
				attribute.String("gen_ai.operation.name", operationName(a.r.path())),
				attribute.String("gen_ai.request.model", a.req.model),
				attribute.String("rolter.route", a.label),
				attribute.String("rolter.key", a.keyName()),
				attribute.Int("rolter.attempts", o.attempts),
				attribute.Int("http.response.status_code", code))
			if o.target != "" {
				attrs = append(attrs, attribute.String("rolter.target", o.target))
			}
			o.span.SetAttributes(usageAttrs(attrs, o.usage)...)
			if code >= 500 || code == 0 {
				o.span.SetStatus(codes.Error, http.StatusText(code))
			}
		}
		o.span.End()
	}
	obs := a.sn.cfg.Observability
	if obs.RequestLog && (o.logOn || (code >= 400 || code == 0) && s.log.Enabled(a.r.Context(), slog.LevelInfo)) {
		a.logRequest(code, ms(s.clock.Now().Sub(a.start)))
	}
	if o.tap != nil {
		taps.Put(o.tap)
		o.tap, o.usage = nil, nil
	}
}

// keyName is the request's API key's name ("" on an open router, or
// before the key is known).
func (a *attempt) keyName() string {
	if a.key == nil {
		return ""
	}
	return a.key.name
}

// usageAttrs appends the GenAI semantic-convention usage attributes
// (none for a nil u).
func usageAttrs(attrs []attribute.KeyValue, u *usage) []attribute.KeyValue {
	if u == nil {
		return attrs
	}
	if u.reported {
		attrs = append(attrs, attribute.Int("gen_ai.usage.input_tokens", u.prompt),
			attribute.Int("gen_ai.usage.output_tokens", u.completion))
		if u.cachedReported {
			attrs = append(attrs, attribute.Int("gen_ai.usage.cache_read.input_tokens", u.cached))
		}
	}
	if len(u.finish) > 0 {
		attrs = append(attrs, attribute.StringSlice("gen_ai.response.finish_reasons", u.finish))
	}
	return attrs
}

// operationName is the GenAI operation of an API path.
func operationName(path string) string {
	switch path {
	case "/v1/chat/completions":
		return "chat"
	case "/v1/completions":
		return "text_completion"
	case "/v1/embeddings":
		return "embeddings"
	}
	return path
}

// initObservation sets up the tracer, the node id header and the request
// id prefix.
func (s *Server) initObservation(o Options) {
	if o.TracerProvider != nil {
		s.tracer = o.TracerProvider.Tracer(tracerName)
		s.prop = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	s.nodeID = o.NodeID
	if o.NodeID != "" {
		s.nodeIDHeader = []string{o.NodeID}
	}
	var b [6]byte
	_, _ = cryptorand.Read(b[:])
	hex.Encode(s.idPrefix[:], b[:])
}
