package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/rolter/rolter/router/admission"
	"github.com/rolter/rolter/strategies"
)

// statusClientClosed is logged/counted when the client went away (nginx's
// 499); nothing is written to the client then.
const statusClientClosed = 499

// statusLater is what run returns when the answer's status and headers
// are committed and its body is copied after the handler returned
// (fasthttp's front, laterBody): the request goes on in copyBody.
const statusLater = -1

// serveInference handles POST /v1/chat/completions, /v1/completions and
// /v1/embeddings. It runs the request up to the commit of its answer's
// status and headers (auth, admission, the mesh hold, picks, retries and
// failover before the first byte); the copy of the engine's body and the
// end of the request follow at once, or, when the front writes the body
// after the handler returned (fasthttp), in copyBody. Its frame stays
// small (accept does the checks and returns): on net/http a stream waits
// under it for as long as it is open.
func (s *Server) serveInference(w answer, r inbound) {
	sn := s.awaitSnapshot(r.Context())
	if sn == nil {
		writeError(w, ErrNoConfig, noConfigRetryAfter)
		return
	}
	// One allocation holds the request's routing state for its whole life.
	a := &attempt{s: s, sn: sn, w: w, r: r, start: s.clock.Now()}
	a.req, a.rc = &a.reqv, &a.rcv
	if st, ok := w.(settler); ok {
		a.settleLate = st.settleLater(a)
	}
	a.begin()
	later := false
	defer func() {
		// Deferred, so that a request whose handler panicked ends too
		// (net/http and serveFast recover the panic).
		if !later {
			a.done()
		}
	}()
	a.code = a.serve()
	later = a.code == statusLater
}

// serve is the request up to its answer: the status the client got, or
// statusLater.
func (a *attempt) serve() int {
	var ok bool
	if a.open, ok = a.accept(); !ok {
		return a.code
	}
	if code := a.admit(); code != 0 {
		return code
	}
	a.admitted = true
	a.s.budget.Load().deposit()
	return a.run()
}

// copyBody is the rest of a request whose answer's body the front copies
// after the handler returned (laterBody): the relay of the engine's body
// (resumes and the terminal error event included), then done.
func (a *attempt) copyBody() {
	p := &a.later
	defer a.done() // fasthttp recovers a panic in the body's WriteTo
	a.code = a.relayBody(p.deadline, &p.l, p.resp)
}

// abandon ends a request whose body copy never ran (the client left
// before the front wrote the header, or the front gave up on the
// response): the engine's response is closed and the request ends as the
// client's departure.
func (a *attempt) abandon() {
	p := &a.later
	p.resp.close()
	a.end(&p.l, false, "canceled")
	a.code = statusClientClosed
	a.done()
}

// done is the end of the request's answer, whichever way it ended and on
// either front, called exactly once: the request is settled (settle), at
// once or, when its front took it (settler), once the answer is written
// and flushed. An answer whose body broke midway is then aborted
// (answer.abort), before it leaves.
func (a *attempt) done() {
	// The key's stream is given back before the answer's last bytes: a
	// client that has them may open its next stream at once.
	if a.open != nil {
		a.open.Add(-1)
		a.open = nil
	}
	if !a.settleLate {
		a.settle()
	}
	if a.aborted {
		a.w.abort()
	}
}

// settler is an answer whose front settles the request (attempt.settle)
// once the answer is written and flushed to the client rather than in
// the handler, so that the request's bookkeeping does not hold the
// client's bytes back (fasthttp's front: when the connection turns idle
// or closes, front_fast.go).
type settler interface {
	// settleLater takes a, at the start of the request, to settle once
	// its answer is out, exactly once whichever way it ends; false: done
	// settles it.
	settleLater(a *attempt) bool
}

// settle is the bookkeeping of the request's end: the answered leg's end
// if its relay kept it open (relayBody), the stage timings, the latency,
// the admission gate told, the request counted and logged, its trace
// ended and its body's buffer released.
func (a *attempt) settle() {
	if k := &a.kept; k.open {
		k.open = false
		a.closeLeg(&a.later.l, a.later.resp, k.ok, k.outcome)
	}
	a.times.flush(a.s.stages, a.res.pool)
	if a.admitted {
		a.s.metrics.requestLatency(a.res.pool).Observe(ms(a.s.clock.Now().Sub(a.start)))
		a.leave()
	}
	a.served()
}

// served counts the request under its route and closes its trace. The
// body's buffer goes back to its pool: every attempt, retry and resume is
// over.
func (a *attempt) served() {
	if a.code != 0 {
		a.s.metrics.request(a.counted, a.label, a.code)
	}
	a.finish(a.code)
	a.body.recycle(a.req, a.rc)
	a.body.release()
	a.releaseTargets()
}

// releaseTargets gives a wide pool's targetScratch back (sizeTargets).
func (a *attempt) releaseTargets() {
	if a.scratch != nil {
		a.tried, a.loads, a.queued, a.rc.QueuedPrefill = nil, nil, nil, nil
		a.res.pool.scratch.Put(a.scratch)
		a.scratch = nil
	}
}

// accept authenticates, reads, validates and resolves the request and
// reads its prompt; when it refuses the request it has answered it (ok
// false, a.code set). open is the key's open-stream count it took, to give
// back when the request ends.
func (a *attempt) accept() (open *atomic.Int64, ok bool) {
	s, sn, w, r := a.s, a.sn, a.w, a.r
	fail := func(err error, retryAfter time.Duration) { a.code = writeError(w, err, retryAfter) }

	key, err := sn.authenticate(r.bearer())
	if err != nil {
		fail(err, 0)
		return nil, false
	}
	a.key = key
	limit := sn.cfg.Limits.MaxBodyBytes
	if n := r.contentLength(); n > limit {
		w.setHeader("Connection", valueClose)
		fail(fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, n, limit), 0)
		return nil, false
	}
	// A client that trickles its body is cut after [timeouts] read_body.
	t0 := a.start
	body, err := r.readBody(limit, sn.cfg.Timeouts.ReadBody.Duration)
	a.body = body
	t0 = a.stage(stageBodyRead, t0)
	a.obs.bytesIn = int64(len(body.b))
	if err != nil {
		if errors.Is(err, ErrTooLarge) || errors.Is(err, ErrReadTimeout) {
			fail(err, 0)
			return nil, false
		}
		fail(fmt.Errorf("%w: reading body: %v", ErrBadRequest, err), 0)
		return nil, false
	}
	a.reqv, err = body.parse()
	req := a.req
	if err != nil {
		fail(err, 0)
		return nil, false
	}
	t1 := a.s.clock.Now()
	a.obs.parse = t1.Sub(t0)
	a.res, err = sn.resolve(req.model)
	t0 = a.stage(stageResolve, t1)
	if err != nil {
		fail(err, 0)
		return nil, false
	}
	res := a.res
	a.label, a.counted = res.pool.key, res.pool
	if !key.allows(req.model) {
		fail(fmt.Errorf("%w: %q", ErrForbidden, req.model), 0)
		return nil, false
	}
	if !a.keyReaches() {
		fail(fmt.Errorf("%w: key %q may not use any target of %q", ErrNoProvider, key.name, req.model), 0)
		return nil, false
	}
	if req.stream && key != nil && sn.cfg.Limits.MaxStreamsPerKey > 0 {
		v, _ := s.streams.LoadOrStore(key.name, new(atomic.Int64))
		n := v.(*atomic.Int64)
		if n.Add(1) > int64(sn.cfg.Limits.MaxStreamsPerKey) {
			n.Add(-1)
			fail(fmt.Errorf("%w (limit %d)", ErrTooManyStream, sn.cfg.Limits.MaxStreamsPerKey), time.Second)
			return nil, false
		}
		open = n
	}
	if err := fillFromValues(a.rc, r.header(canonTokenIDs), r.header(canonSession), req, res.adapter,
		readsFor(res.pool, s.learn != nil)); err != nil {
		fail(err, 0)
		return open, false
	}
	a.stage(stageParse, t0.Add(-a.obs.parse)) // validation plus prompt extraction
	return open, true
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// attempt is one client request's journey through the targets of its pool.
type attempt struct {
	s     *Server
	sn    *snapshot
	key   *apiKey // nil: the router is open
	w     answer
	r     inbound
	res   resolved
	req   *request
	rc    *strategies.RouteContext
	start time.Time
	// code is the status the client got (0 until known); label and
	// counted are the route it is counted under.
	code    int
	label   string
	counted *pool
	// body is the request body's pooled buffer (bodybuf.go), released when
	// the request is over.
	body *bodyBuf
	// open is the key's open-stream count the request took (nil: none);
	// admitted: the request passed admission and ran (done).
	open     *atomic.Int64
	admitted bool
	// aborted: the answer's body broke midway and is not an SSE stream
	// (a terminal error event ends those), so the connection is cut for
	// the client not to take it as whole.
	aborted bool
	// sse: the answer relayed is an event stream (head; the engine's
	// header is let go once copied).
	sse bool
	// settleLate: the front settles the request once its answer is out
	// (settler).
	settleLate bool
	// trial: the last pick claimed a half-open breaker's probe slot;
	// roomed: admission narrowed the current pick (roomy), room holds it.
	// calm: nothing was parked, unhealthy or open at the current pick's
	// instant (Server.calmAt). (With the flags above, one word.)
	trial, roomed, calm bool
	// later is the answered leg whose body the front copies after the
	// handler returned (statusLater), and the request's deadline; also
	// the leg whose end waits for the request's settle (kept).
	later laterLeg
	// kept: the answered leg's end is left to settle (settleLate).
	kept keptLeg
	// times are the stage durations not yet observed (stages.go).
	times stageTimes

	tried    []bool
	loads    []uint64
	queued   []uint64       // RouteContext.QueuedPrefill of the current pick
	pickNano int64          // the current pick's instant (OK), Unix ns
	scratch  *targetScratch // behind tried, loads and queued over a wide pool (sizeTargets)
	lastErr  error
	// prefill is the attempt's queued prefill, held on prefillAt from its
	// pick until its first byte or its end, whichever comes first.
	prefill   uint64
	prefillAt *strategies.TargetStats
	sp        *splice        // nil unless a broken stream may be resumed (resume.go)
	gate      *poolGate      // nil unless [admission] is on (admission.go)
	admitAs   admission.Band // the band the gate admitted the request under (roomy)
	obs       reqObs         // request id, spans, log line (trace.go)
	// attempts, firstByte and tail feed the route stats (routestats.go).
	attempts  int
	firstByte time.Time
	tail      usageTail

	// Storage behind req, rc, tried and loads for the usual request, and
	// the first attempt's upstream body (upstreamBody).
	bodyv     splicedBody
	reqv      request
	rcv       strategies.RouteContext
	triedBuf  [16]bool
	roomBuf   [16]bool // behind roomy's mask (admission.go)
	loadBuf   [16]uint64
	queuedBuf [16]uint64
}

// run picks, proxies and retries; it returns the status sent to the
// client (499 when the client left first).
func (a *attempt) run() int {
	p := a.res.pool
	if p.lb == nil {
		return writeError(a.w, fmt.Errorf("%w: %q has no targets", ErrNoTarget, p.key), time.Second)
	}
	cfg := a.sn.cfg
	a.sizeTargets()
	a.sp = a.newSplice()

	// The request's deadline bounds every attempt and backoff. Each
	// attempt derives its context from the client's with this deadline
	// directly, rather than from a per-request context: one context and
	// timer fewer per request.
	deadline := time.Now().Add(cfg.Timeouts.Request.Duration)
	ctx := a.r.Context()
	expired := func() bool { return ctx.Err() != nil || !time.Now().Before(deadline) }
	var pending *reply // a failed response kept to relay if no retry happens
	defer func() {
		if pending != nil {
			pending.close()
		}
	}()
	if a.s.learn != nil {
		a.s.learn.Recall(p.key, p.lb, p.bases, a.rc)
		if h, ok := a.s.learn.(PickHold); ok && h.Wait(ctx) != nil {
			return statusClientClosed
		}
	}
	maxAttempts := 1 + cfg.Retry.Attempts
	for n := 1; ; n++ {
		idx, ok := a.pick(n > 1)
		if !ok {
			if pending != nil {
				resp := pending
				pending = nil
				return a.relayFailure(resp)
			}
			if a.lastErr != nil {
				if code, again := a.unanswered(); !again {
					return code
				}
				n = 0
				continue
			}
			return a.noTarget()
		}
		if pending != nil {
			pending.close()
			pending = nil
		}
		resp, status, done := a.try(deadline, idx)
		if done {
			return status
		}
		// The attempt failed before any byte reached the client.
		if expired() {
			if resp != nil {
				resp.close()
			}
			if ctx.Err() != nil {
				return statusClientClosed
			}
			return a.timedOut()
		}
		// A failed half-open probe is retried free of the budget: there is
		// one per provider per open period, however busy the router.
		retry := n < maxAttempts && a.anyEligible() && (a.trial || a.s.budget.Load().spend())
		if !retry {
			if resp != nil {
				return a.relayFailure(resp)
			}
			if code, again := a.unanswered(); !again {
				return code
			}
			n = 0
			continue
		}
		pending = resp
		a.s.metrics.retries.WithLabelValues(p.key).Inc()
		d := backoff(n, cfg.Retry.BackoffBase.Duration, cfg.Retry.BackoffMax.Duration, a.s.rand.Float64)
		if err := a.backoff(deadline, d); err != nil {
			if ctx.Err() != nil {
				return statusClientClosed
			}
			if pending != nil {
				resp := pending
				pending = nil
				return a.relayFailure(resp)
			}
			return a.timedOut()
		}
	}
}

// sizeTargets gives the attempt its per-target state over its pool: the
// inline buffers, or for a wider pool a zeroed targetScratch from the
// pool's, given back when the request is over (served).
func (a *attempt) sizeTargets() {
	p := a.res.pool
	size := len(p.targets)
	if size <= len(a.triedBuf) {
		a.tried, a.loads, a.queued = a.triedBuf[:size], a.loadBuf[:size], a.queuedBuf[:size]
		return
	}
	sc, _ := p.scratch.Get().(*targetScratch)
	if sc == nil || len(sc.tried) != 2*size {
		sc = &targetScratch{tried: make([]bool, 2*size), u: make([]uint64, 2*size)}
	} else {
		clear(sc.tried)
		clear(sc.u)
	}
	a.scratch = sc
	a.tried, a.loads, a.queued = sc.tried[:size:size], sc.u[:size:size], sc.u[size:]
}

// targetScratch is the per-target state of one request over a pool wider
// than the attempt's inline buffers.
type targetScratch struct {
	tried []bool   // tried, then admission's room (attempt.room)
	u     []uint64 // loads, then queued
}

// noTarget answers a request no target can take now.
func (a *attempt) noTarget() int {
	reason, wait := a.noTargetReason()
	return writeError(a.w, fmt.Errorf("%w for %q: %s", ErrNoTarget, a.req.model, reason), wait)
}

// timedOut answers a request whose deadline passed before any answer.
func (a *attempt) timedOut() int {
	return writeError(a.w, fmt.Errorf("%w: request timed out", ErrUpstream), 0)
}

// backoff waits d before a retry, or less when the client leaves or the
// request's deadline comes first.
func (a *attempt) backoff(deadline time.Time, d time.Duration) error {
	ctx, cancel := context.WithDeadline(a.r.Context(), deadline)
	defer cancel()
	return a.s.sleep(ctx, d)
}

// keyReaches reports whether the request's key may use some target of its
// pool (seed 000: eligibility includes "allowed to the key").
func (a *attempt) keyReaches() bool {
	if len(a.res.pool.targets) == 0 {
		return true // run answers that the pool has no targets
	}
	for i := range a.res.pool.targets {
		if a.key.allowsProvider(a.res.pool.targets[i].provider.name) {
			return true
		}
	}
	return false
}

// anyEligible reports whether some untried target could take a retry now.
func (a *attempt) anyEligible() bool {
	now := a.s.clock.Now()
	for i, t := range a.res.pool.targets {
		if !a.tried[i] && a.key.allowsProvider(t.provider.name) && t.unavailable(now, a.res.requested) == "" {
			return true
		}
	}
	return false
}

// pick chooses an eligible, untried target and claims its breaker probe
// slot when half-open. retry tells the balancer the request already had
// an attempt (rotations do not advance on it). The attempt itself is the
// strategy's eligibility mask (OK), read at one instant: the pick's.
//
// The loads and queued prefill of every target are read only for a
// strategy that reads them (strategies.ReadsLoads); for the others only
// the picked target's are, for its leg (QueueDepth).
func (a *attempt) pick(retry bool) (int, bool) {
	p := a.res.pool
	now := a.s.clock.Now()
	a.pickNano = now.UnixNano()
	a.calm = a.s.calmAt(a.sn, a.pickNano)
	pv, _ := a.s.engine.(PrefillView)
	if p.readsLoads {
		a.readLoads(0, len(p.targets), pv)
		a.rc.QueuedPrefill = a.queued
	}
	a.roomy()
	a.rc.Retry = retry
	for range p.targets {
		idx, ok := a.pickTarget(a)
		if !ok || idx < 0 || idx >= len(p.targets) || !a.OK(idx) {
			a.pickDone(now)
			return 0, false
		}
		admitted, trial := p.targets[idx].provider.up.admit(now)
		a.tried[idx] = true // when not admitted: another request holds the half-open probe
		if admitted {
			a.trial = trial
			if !p.readsLoads {
				a.readLoads(idx, idx+1, pv)
			}
			a.pickDone(now)
			return idx, true
		}
		a.rc.Retry = true // picking again is not a new request
	}
	a.pickDone(now)
	return 0, false
}

// readLoads reads the load and queued prefill of targets from ≤ i < to
// into a.loads and a.queued: the router's own, plus the engine's queue and
// the other routers' prefill where the mesh knows them (pv: the engine
// view's PrefillView, nil without).
func (a *attempt) readLoads(from, to int, pv PrefillView) {
	e := a.s.engine
	if k, ok := e.(LoadKnower); ok && !k.KnowsLoads() {
		e = nil
	}
	for i := from; i < to; i++ {
		t := &a.res.pool.targets[i]
		a.loads[i] = t.stats.InFlight()
		a.queued[i] = t.stats.QueuedPrefill()
		if e != nil {
			// The mesh's queue excludes our own in-flight (see
			// EngineView): add the two.
			if q, ok := e.Load(t.provider.apiBase); ok {
				a.loads[i] += q
			}
		}
		if pv != nil {
			a.queued[i] += pv.PeerPrefill(t.provider.apiBase)
		}
	}
}

// OK implements strategies.Eligible for the current pick: target i is
// untried, allowed to the key and available at the pick's instant, and,
// when admission narrowed the pick (roomy), has room.
func (a *attempt) OK(i int) bool {
	if a.roomed { // tried since roomy: a target the pick found not admitting
		return a.room()[i] && !a.tried[i]
	}
	return a.eligibleNow(i)
}

// room is where roomy keeps admission's narrowing of the pick, one flag
// per target: behind the inline buffers, or the second half of a wide
// pool's scratch.
func (a *attempt) room() []bool {
	if a.scratch != nil {
		return a.scratch.tried[len(a.tried):]
	}
	return a.roomBuf[:len(a.tried)]
}

// eligibleNow is OK before admission's narrowing. When the pool is calm
// and the router open (no key), the target's own fields are not read.
func (a *attempt) eligibleNow(i int) bool {
	if a.tried[i] {
		return false
	}
	if a.key == nil && a.calm {
		return true
	}
	t := &a.res.pool.targets[i]
	return a.key.allowsProvider(t.provider.name) && (a.calm || t.unavailableAt(a.pickNano, a.res.requested) == "")
}

// noTargetReason summarises why nothing was eligible and when to retry.
func (a *attempt) noTargetReason() (string, time.Duration) {
	now := a.s.clock.Now()
	counts := map[string]int{}
	wait := time.Duration(0)
	var parked []string
	for i := range a.res.pool.targets {
		t := &a.res.pool.targets[i]
		why := t.unavailable(now, a.res.requested)
		if !a.key.allowsProvider(t.provider.name) {
			why = "not_allowed_to_key"
		}
		if pk := t.parking(a.res.requested, false); pk != nil && why == "parked" {
			if until, reason, ok := pk.state(now); ok {
				parked = append(parked, fmt.Sprintf("%s/%s parked until %s (%s)", t.provider.name,
					t.upstreamModel(a.res.requested), until.UTC().Format(time.RFC3339), reason))
			}
		}
		if why == "" && a.tried[i] {
			why = "already_tried"
		}
		if why == "" {
			why = "not_picked"
		}
		counts[why]++
		if d := t.retryIn(now, a.res.requested); d > 0 && (wait == 0 || d < wait) {
			wait = d
		}
	}
	parts := make([]string, 0, len(counts))
	for k, v := range counts {
		parts = append(parts, fmt.Sprintf("%d %s", v, k))
	}
	sort.Strings(parts)
	if wait == 0 {
		wait = time.Second
	}
	msg := fmt.Sprintf("%d target(s): %s", len(a.res.pool.targets), strings.Join(parts, ", "))
	if len(parked) > 0 {
		msg += "; " + strings.Join(parked, "; ")
	}
	return msg, wait
}

// try runs one upstream attempt on target idx. done is true when the
// response went to the client (status is what it got) or the client left.
// Otherwise the attempt failed before the first byte: resp is the failed
// upstream response (nil after a transport error, see a.lastErr), to be
// relayed if no retry follows.
//
// It is split in send and deliver so that a stream relayed for minutes
// waits under deliver's small frame, not send's: the handler's goroutine
// keeps its stack at 8 KiB only while the waiting stack is under a
// quarter of a 16 KiB one (the runtime's shrink rule).
func (a *attempt) try(deadline time.Time, idx int) (resp *reply, status int, done bool) {
	var l leg
	resp, status, done = a.send(deadline, idx, &l)
	if done || !l.answered {
		return resp, status, done
	}
	return nil, a.deliver(deadline, &l, resp), true
}

// leg is one attempt on one target, from its pick to its end.
type leg struct {
	t        *target
	idx      int
	queue    uint64 // the load the balancer saw for idx at this pick
	begin    time.Time
	inflight prometheus.Gauge
	answered bool // the engine answered with a status to relay
}

// end closes the leg: stats, metrics, route stats and the trace.
func (a *attempt) end(l *leg, success bool, outcome string) {
	s := a.s
	a.releasePrefill()
	now := s.clock.Now()
	l.t.stats.End(strategies.Outcome{Success: success, Latency: now.Sub(l.begin), QueueDepth: l.queue,
		PromptTokens: a.rc.PromptTokens, At: now})
	l.inflight.Dec()
	s.metrics.targetOutcome(l.t, outcome).Inc()
	a.recordStats(l.t, success, l.begin, now)
	a.endAttempt(outcome, now)
}

// send sends the attempt and reads the engine's response header. Unless
// l.answered, the attempt is over: see try for what it returns.
func (a *attempt) send(deadline time.Time, idx int, l *leg) (resp *reply, status int, done bool) {
	s := a.s
	t := &a.res.pool.targets[idx]
	up := t.provider.up
	a.res.pool.lb.Observe(idx, a.rc)
	if s.learn != nil {
		s.learn.Observed(a.res.pool.key, t.provider.apiBase, a.rc)
	}
	model := t.upstreamModel(a.res.requested)
	body := a.upstreamBody(t, model)
	*l = leg{t: t, idx: idx, queue: strategies.QueueDepth(a.loads, idx)}
	t.stats.Begin()
	a.holdPrefill(t, idx)
	l.inflight = s.metrics.targetInFlight(t)
	l.inflight.Inc()
	l.begin = s.clock.Now()

	u, err := endpointURL(t.provider, a.r.path())
	if err != nil {
		a.end(l, false, "error")
		a.lastErr = err
		return nil, 0, false
	}
	// The engine's header is built straight from the client's (no
	// http.Header between them). The first-byte timeout (or the request's
	// deadline, if sooner) bounds the attempt until the engine answers,
	// the deadline its body: both are deadlines of the upstream
	// connection, no timer or context per attempt (client.go).
	req := fasthttp.AcquireRequest()
	req.Header.SetMethod(fasthttp.MethodPost)
	a.r.upstreamHeader(t.provider, &req.Header)
	a.startAttempt(&req.Header, t, model, l.begin)
	firstByte := time.Now().Add(a.sn.cfg.Timeouts.FirstByte.Duration)
	if deadline.Before(firstByte) {
		firstByte = deadline
	}
	resp, err = s.transport.send(&outbound{ctx: a.r.Context(), url: u, req: req, body: body,
		firstByte: firstByte, deadline: deadline})
	a.upstreamAnswered(resp)
	if err != nil {
		if a.r.Context().Err() != nil {
			up.release()
			a.end(l, false, "canceled")
			return nil, statusClientClosed, true
		}
		a.unreachable(l, err)
		return nil, 0, false
	}
	if retryable(resp.StatusCode) {
		a.refused(l, resp)
		return resp, 0, false
	}
	l.answered = true
	return resp, 0, false
}

// unreachable ends a leg whose engine gave no response.
func (a *attempt) unreachable(l *leg, err error) {
	t := l.t
	a.breakerFailure(t.provider.up)
	a.end(l, false, "connect_error")
	// Clients learn which provider failed, not its address.
	a.lastErr = fmt.Errorf("provider %s did not answer", t.provider.name)
	a.s.log.Warn("upstream attempt failed", "provider", t.provider.name, "err", err, "request_id", a.obs.id)
}

// refused ends a leg the engine answered with a retryable status (429
// parks the target for its Retry-After); resp is kept to relay if no
// retry follows.
func (a *attempt) refused(l *leg, resp *reply) {
	s, t := a.s, l.t
	up := t.provider.up
	if resp.StatusCode == http.StatusTooManyRequests {
		up.release()
		if ra, ok := parseRetryAfter(resp.get("Retry-After"), s.clock.Now()); ok {
			c := a.sn.cfg.Retry
			d := min(max(ra, c.ParkMin.Duration), c.ParkMax.Duration)
			reason := "HTTP 429 with Retry-After " + resp.get("Retry-After")
			until := t.parking(a.res.requested, true).park(s.clock.Now(), d, reason)
			s.calm.disturb()
			// A passthrough member's series stays its label: requested
			// models are caller-chosen and must not become labels.
			s.metrics.parkedUntil.WithLabelValues(t.provider.name, t.label).Set(float64(until.UnixNano()) / 1e9)
			s.log.Info("target parked", "provider", t.provider.name, "target", t.label,
				"model", t.upstreamModel(a.res.requested), "for", d, "until", until.UTC(), "reason", reason, "request_id", a.obs.id)
		}
	} else {
		a.breakerFailure(up)
	}
	a.end(l, false, "http_"+strconv.Itoa(resp.StatusCode))
	a.obs.failed = t
	a.lastErr = fmt.Errorf("%s: HTTP %d", t.provider.name, resp.StatusCode)
}

// deliver relays the response of an answered leg to the client and ends
// the leg; a broken stream goes on to resume. It returns the client's
// status, or statusLater when the front copies the body after the
// handler returned (the leg is kept in a.later for copyBody).
func (a *attempt) deliver(deadline time.Time, l *leg, resp *reply) int {
	t := l.t
	if from, changed := t.provider.up.success(); changed {
		a.breakerClosed(t, from)
	}
	if a.sp == nil || !a.sp.begun {
		sse := a.head(resp, t)
		flushHead := sse && !headWaits(resp)
		if lb, ok := a.w.(laterBody); ok && lb.later(a, bodySize(resp, sse), flushHead) {
			a.later = laterLeg{deadline: deadline, l: *l, resp: resp}
			return statusLater
		}
	}
	return a.relayBody(deadline, l, resp)
}

// laterLeg is an answered leg whose body is copied after the handler
// returned.
type laterLeg struct {
	deadline time.Time
	l        leg
	resp     *reply
}

// laterBody is an answer whose server writes the body after the handler
// returned (fasthttp's: the response goes out once the handler is done).
// later is asked once the answer's head is committed: true means it took
// the body to copy with a.copyBody when the head is written (size bytes,
// -1 unknown; flushHead: an event stream whose first event is not here
// yet, so its head goes out at once, before the copy; an event stream
// whose first event came with the engine's head sends its head with that
// event) and to call a.abandon if that never happens; false, the handler
// copies the body now.
type laterBody interface {
	later(a *attempt, size int64, flushHead bool) bool
}

// bodySize is the length of the body the client will get for resp (-1:
// not known before its end; an event stream is always sent chunked).
func bodySize(resp *reply, sse bool) int64 {
	if sse || resp.ContentLength < 0 {
		return -1
	}
	return resp.ContentLength
}

// head commits the status and headers of the first answer relayed to the
// client: the engine's headers minus hop-by-hop ones, the routing
// headers, and for an event stream no Content-Length and no caching.
// sse reports an event stream. A request with a splice whose answer is
// not an event stream is relayed as it is (a.sp is dropped).
func (a *attempt) head(resp *reply, t *target) (sse bool) {
	sse = isEventStream(resp.get("Content-Type"))
	if a.sp != nil && !sse {
		a.sp = nil
	}
	a.w.copyHeader(resp.Header)
	a.relayStart(t)
	if sse {
		a.w.delHeader("Content-Length")
		a.w.setHeader("Cache-Control", valueNoCache)
	}
	a.w.commit(resp.StatusCode)
	if sse && !headWaits(resp) {
		// The client sees the stream begin at once; when its first event
		// came with the engine's head, the two go out together.
		_ = a.w.flush()
	}
	if a.sp != nil {
		a.sp.begun, a.sp.status = true, resp.StatusCode
	} else {
		// Nothing reads the engine's header again: an open stream need
		// not hold it (a resumable one keeps it with its first segment).
		a.sse = sse
		resp.drop()
	}
	return sse
}

// relayBody relays the body of an answered leg whose head is out, ends
// the leg and hands a broken stream to resume; it returns the client's
// status. When the front settles the request after the answer is out
// (settleLate) and no resume can follow, the leg's end is left to settle
// (kept), so that it does not hold back the answer's last bytes.
func (a *attempt) relayBody(deadline time.Time, l *leg, resp *reply) int {
	var status int
	var ok bool
	var outcome string
	if a.sp != nil {
		status, ok, outcome = a.relaySpliced(resp)
	} else {
		status, ok, outcome = a.relay(resp)
		if a.settleLate {
			if l != &a.later.l {
				a.later.l, a.later.resp = *l, resp
			}
			a.kept = keptLeg{open: true, ok: ok, outcome: outcome}
			if outcome == "abort" {
				a.aborted = true
			}
			return status
		}
	}
	a.closeLeg(l, resp, ok, outcome)
	if a.sp != nil && a.sp.broke != "" {
		return a.resume(deadline, l.t, status)
	}
	if outcome == "abort" {
		a.aborted = true
	}
	return status
}

// keptLeg is the relay's result for an answered leg whose end waits for
// the request's settle.
type keptLeg struct {
	open    bool
	ok      bool
	outcome string
}

// closeLeg ends an answered leg whose body was relayed: the engine's
// response closed, the leg's timer and context ended, its outcome
// recorded (stats, metrics, route stats, trace; a broken stream counts
// against the breaker) and, when it served the request, the balancer told.
func (a *attempt) closeLeg(l *leg, resp *reply, ok bool, outcome string) {
	resp.close()
	if ok && resp.StatusCode >= 300 {
		outcome = "http_" + strconv.Itoa(resp.StatusCode)
	}
	if outcome == "stream_error" || outcome == "abort" {
		a.streamFailure(l.t.provider.up)
	}
	served := ok && resp.StatusCode < 300
	a.end(l, served, outcome)
	if c, isC := a.res.pool.lb.(strategies.Completer); isC && served {
		c.Served(l.idx)
	}
}

func (a *attempt) breakerClosed(t *target, from breakerState) {
	a.s.log.Info("circuit breaker closed", "provider", t.provider.name, "was", from.String())
}

// streamFailure counts a stream that broke after its first byte against
// the provider's breaker.
func (a *attempt) streamFailure(up *upstream) {
	if up.failure(a.s.clock.Now(), a.sn.cfg.Breaker.Failures, a.sn.cfg.Breaker.Open.Duration) {
		a.s.calm.disturb()
		a.s.log.Warn("circuit breaker opened", "provider", up.name)
	}
}

// holdPrefill queues this attempt's uncached prompt tokens on target idx
// (see uncachedTokens) until releasePrefill.
func (a *attempt) holdPrefill(t *target, idx int) {
	a.prefill = uncachedTokens(a.rc, a.res.pool.residency, idx)
	a.prefillAt = t.stats
	t.stats.QueuePrefill(a.prefill)
}

// releasePrefill takes the attempt's queued prefill off its target; it is
// called at the first response byte and again at every end of the
// attempt, and acts once.
func (a *attempt) releasePrefill() {
	if a.prefillAt != nil {
		a.prefillAt.PrefillDone(a.prefill)
		a.prefillAt = nil
	}
}

// uncachedTokens estimates the prompt tokens target idx must prefill for
// rc: rc.PromptTokens (exact from token ids when the caller sent them,
// else the text estimate, prompt.go) minus the prefix of rc.BlockKeys the
// pool's residency source (the mesh's KV-event view) reports resident on
// the target. Without token ids, or without an EXACT view of the target,
// nothing is taken as resident: the whole prompt counts. (cache_aware's
// remembered prefixes are not used: they say where a prefix was sent, not
// whether the engine still holds it.)
func uncachedTokens(rc *strategies.RouteContext, res strategies.Residency, idx int) uint64 {
	n := rc.PromptTokens
	if res != nil && len(rc.BlockKeys) > 0 {
		if hit, ok := res.ResidentPrefix(idx, rc.BlockKeys); ok && hit > 0 {
			n -= min(hit, len(rc.BlockKeys)) * blockSize
		}
	}
	return uint64(max(n, 0))
}

func (a *attempt) breakerFailure(up *upstream) {
	c := a.sn.cfg.Breaker
	if up.failure(a.s.clock.Now(), c.Failures, c.Open.Duration) {
		a.s.calm.disturb()
		a.s.log.Warn("circuit breaker opened", "provider", up.name, "for", c.Open.Duration)
	}
}

// relay streams resp to the client, flushing after every read when the
// response is an event stream so each SSE event leaves as it arrives.
// outcome is "success", "canceled", "stream_error" (the upstream broke
// after bytes went out; SSE got a terminal error event) or "abort" (a
// non-SSE body broke midway: the caller aborts the connection so the
// client cannot mistake a truncated body for a whole one).
//
// Its head is out (head); a request with a splice goes to relaySpliced
// instead (relayBody).
func (a *attempt) relay(resp *reply) (status int, ok bool, outcome string) {
	s := a.s
	sse := a.sse // head let the header go
	// A buffer is held only from a read to its flush: an open stream
	// waiting for its next event holds none (the transport's body takes
	// it from the pool once the connection has bytes, client.go
	// readPooled). Events are small, so an event stream reads into a
	// small buffer.
	pool := &copyBufs
	if sse {
		pool = &eventBufs
	}
	pr, _ := resp.Body.(pooledReader)
	lw, _ := a.w.(lastWriter)
	first := true
	for {
		var bufp *[]byte
		var n int
		var err error
		if pr != nil {
			bufp, n, err = pr.readPooled(pool)
		} else {
			bufp = pool.Get().(*[]byte)
			n, err = resp.Body.Read(*bufp)
		}
		left := false // the client
		if n > 0 {
			buf := (*bufp)[:n]
			if first {
				first = false
				a.releasePrefill() // the engine has prefilled the prompt
				a.firstByte = s.clock.Now()
				s.metrics.requestTTFT(a.res.pool).Observe(ms(a.firstByte.Sub(a.start)))
				a.firstToken(a.firstByte)
				a.committed()
			}
			// The body's last bytes go out with its end (the last chunk
			// and the answer's flush follow at once): no flush of their own.
			last := err == io.EOF
			var werr error
			if last && lw != nil {
				werr = lw.writeLast(buf)
			} else {
				_, werr = a.w.Write(buf)
			}
			left = werr != nil
			if !left {
				a.tail.write(buf)
				a.relayed(buf)
				left = sse && !last && a.w.flush() != nil
				if sse {
					// The stream's first event is out: its stages need
					// not wait for its end.
					a.times.flush(s.stages, a.res.pool)
				}
			}
		}
		if bufp != nil {
			pool.Put(bufp)
		}
		if left {
			return statusClientClosed, false, "canceled"
		}
		if err == io.EOF {
			return resp.StatusCode, true, "success"
		}
		if err != nil {
			return a.relayBroke(resp, err, sse)
		}
	}
}

// relayBroke ends a relay whose upstream body failed after bytes went
// to the client.
func (a *attempt) relayBroke(resp *reply, err error, sse bool) (status int, ok bool, outcome string) {
	if a.r.Context().Err() != nil {
		return statusClientClosed, false, "canceled"
	}
	a.s.log.Warn("upstream stream broke after the first byte", "model", a.req.model, "err", err, "request_id", a.obs.id)
	if sse {
		_, _ = a.w.Write(sseError("upstream stream failed: " + err.Error()))
		_ = a.w.flush()
		return resp.StatusCode, false, "stream_error"
	}
	return resp.StatusCode, false, "abort"
}

// committed lets go of what only picking and sending needed, once the
// first byte went to the client: no retry can follow, so the request's
// body (its buffer back to its pool), prompt text, token ids and block
// keys need not live as long as the stream (a 100 000-token prompt is about 1.4 MB of them). A stream
// that may be resumed keeps them (relaySpliced, resume.go: the
// continuation is the body plus the answer so far, and is picked for
// again).
func (a *attempt) committed() {
	if a.sp != nil {
		return
	}
	// Every attempt's upstream body was written from the buffer before
	// its response began: it can serve the next request now.
	a.body.recycle(a.req, a.rc)
	a.body.release()
	a.body = nil
	a.reqv.body, a.reqv.promptIDs = nil, nil
	a.rc.Prompt, a.rc.TokenIDs, a.rc.BlockKeys = "", nil, nil
}

// readableWaiter is a response body that can wait for its next bytes
// without a buffer (client.go's call). waitReadable returns when a Read
// will not block long, or at once when it cannot tell; Read reports any
// error.
type readableWaiter interface{ waitReadable() }

// pooledReader is a response body that reads its next bytes into a
// buffer it takes from the caller's pool once they are there, and
// returns the buffer with them (nil: it holds none) for the caller to put
// back (client.go's call).
type pooledReader interface {
	readPooled(pool *sync.Pool) (bufp *[]byte, n int, err error)
}

// lastWriter is an answer that can take the body's last bytes to go out
// with its end in one write (fasthttp's front: the last chunk follows them
// at once) rather than flushed on their own.
type lastWriter interface {
	writeLast(p []byte) error
}

// bufferedBody is a response body that knows whether its first bytes
// came with the header (client.go's call): the relay's first read will
// not wait, so an event stream's head can go out with its first event.
type bufferedBody interface{ buffered() bool }

// headWaits reports whether an event stream's head can wait for its first
// event: resp's body has it already.
func headWaits(resp *reply) bool {
	b, ok := resp.Body.(bufferedBody)
	return ok && b.buffered()
}

// isEventStream reports whether a Content-Type names an SSE stream
// (parameters such as "; charset=utf-8" allowed).
func isEventStream(ct string) bool {
	const sse = "text/event-stream"
	ct = strings.TrimSpace(ct)
	if len(ct) < len(sse) || !strings.EqualFold(ct[:len(sse)], sse) {
		return false
	}
	rest := strings.TrimSpace(ct[len(sse):])
	return rest == "" || rest[0] == ';'
}

// copyBufs and eventBufs recycle relay buffers across requests: large
// for whole bodies, small for event streams.
var (
	copyBufs  = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
	eventBufs = sync.Pool{New: func() any { b := make([]byte, 4<<10); return &b }}
)
