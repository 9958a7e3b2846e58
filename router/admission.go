package router

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/router/admission"
)

// Admission control (package admission; docs/admission.md). With
// [admission] enabled, a request asks its pool's gate before the first
// pick (attempt.admit) and kicks the gate when it ends: while the pool has
// headroom for its band and nobody of its band or above waits it passes at
// once; otherwise it waits in this router's queue for its band. Either way
// the route's strategy picks its target among the engines with room for
// the band it was admitted under (attempt.roomy). The gate's probe reads
// the other routers' waiters through the mesh (WaitingView), and the
// router publishes its own with its per-api_base loads (admissionWaiting).
// The gates live in the Server (they survive Apply), one per pool key.

// StatusView is an optional capability of an EngineView, checked by type
// assertion: the engine's waiting queue and KV-cache usage as its sidecar
// last reported them (ok false without a fresh report). Same contract as
// Load: in-process state only, no blocking, no allocation.
type StatusView interface {
	EngineStatus(apiBase string) (waiting uint64, kvUsage float64, ok bool)
}

// WaitingView is an optional capability of an EngineView, checked by type
// assertion: the other routers' admission waiters by band for a pool whose
// targets have these api_bases (meshstate.State.PoolWaiting). Same
// contract as Load.
type WaitingView interface {
	PoolWaiting(apiBases []string) [admission.NumBands]uint64
}

// poolGate is one pool's gate and the pool it last saw: the probe reads
// the targets of the pool the latest request resolved to.
type poolGate struct {
	key  string
	gate *admission.Gate
	pool atomic.Pointer[pool]
	cfg  atomic.Pointer[config.Config]    // the config the gate was last set from
	ac   atomic.Pointer[admission.Config] // the gate's config: thresholds and bands' fills
	// waiting is the gate's waiters over every band (Spread's own), kept
	// by gateObserver.
	waiting atomic.Int64
}

// admissionConfig turns the [admission] section into the package's Config.
func admissionConfig(a config.Admission) admission.Config {
	c := admission.Config{
		Thresholds: admission.Thresholds{MaxLoad: a.MaxEngineLoad, MaxWaiting: a.MaxWaiting, MaxKVUsage: a.MaxKVUsage,
			MaxQueuedPrefill: a.MaxQueuedPrefillTokens},
		PromoteAfter: a.PromoteAfter.Duration, PromoteEvery: a.PromoteEvery, Quantum: a.QuantumTokens,
	}
	def := admission.DefaultConfig()
	for i, b := range a.Bands() {
		c.Bands[i] = admission.BandLimits{MaxQueue: b.MaxQueue, TTL: b.TTL.Duration, Fill: b.Fill}
		if b.Fill <= 0 {
			c.Bands[i].Fill = def.Bands[i].Fill
		}
	}
	return c
}

// gateFor returns pool p's gate, set to sn's [admission] config.
func (s *Server) gateFor(p *pool, sn *snapshot) *poolGate {
	v, ok := s.gates.Load(p.key)
	if !ok {
		pg := &poolGate{key: p.key}
		pg.pool.Store(p)
		cfg := admissionConfig(sn.cfg.Admission)
		pg.ac.Store(&cfg)
		pg.cfg.Store(sn.cfg)
		pg.gate = admission.NewGate(cfg, func() admission.Probe { return s.admissionProbe(pg) },
			admission.GateOptions{Now: s.clock.Now, Observer: &gateObserver{pg: pg, changed: s.tracker.Note, next: s.admissionMetrics.observer(p.key)}})
		v, _ = s.gates.LoadOrStore(p.key, pg)
	}
	pg := v.(*poolGate)
	if pg.pool.Load() != p {
		pg.pool.Store(p)
	}
	if pg.cfg.Load() != sn.cfg {
		cfg := admissionConfig(sn.cfg.Admission)
		pg.ac.Store(&cfg)
		pg.cfg.Store(sn.cfg)
		pg.gate.SetConfig(cfg)
	}
	return pg
}

// engineState is what the router knows of target t's engine, its own
// counts scaled by spread (admission.Spread; 1: as they are) where that
// estimates more than the other routers reported.
func (s *Server) engineState(t *target, spread float64) admission.Engine {
	own, prefill := t.stats.InFlight(), t.stats.QueuedPrefill()
	var peers, peerPrefill uint64
	e := admission.Engine{}
	if s.engine != nil {
		// The routers' in-flight counts when the mesh has them (fresh);
		// else the view's fold (the router's own engine polls).
		if iv, ok := s.engine.(InflightView); ok {
			peers = iv.PeerInflight(t.provider.apiBase)
		} else if q, ok := s.engine.Load(t.provider.apiBase); ok {
			peers = q
		}
		if pv, ok := s.engine.(PrefillView); ok {
			peerPrefill = pv.PeerPrefill(t.provider.apiBase)
		}
		if sv, ok := s.engine.(StatusView); ok {
			if w, kv, ok := sv.EngineStatus(t.provider.apiBase); ok {
				e.Waiting, e.WaitingOK, e.KVUsage, e.KVOK = w, true, kv, true
			}
		}
	}
	e.Load = admission.Estimate(own, peers, spread)
	e.QueuedPrefill = admission.Estimate(prefill, peerPrefill, spread)
	return e
}

// peers returns the other routers' waiters for pg's pool by band, when
// the mesh carries them, and the Spread factor they give this router.
func (s *Server) peers(pg *poolGate) (w [admission.NumBands]int, spread float64) {
	wv, ok := s.engine.(WaitingView)
	if !ok {
		return w, 1
	}
	total := 0
	for b, n := range wv.PoolWaiting(pg.pool.Load().bases) {
		w[b] = int(min(n, 1<<30))
		total += w[b]
	}
	routers := 1
	if mr, ok := s.engine.(MeshRank); ok {
		routers, _ = mr.Routers()
	}
	return w, admission.Spread(int(pg.waiting.Load()), total, routers)
}

// admissionProbe sums, per band, the headroom of pg's eligible targets
// (healthy, breaker not open, not parked) under the band's thresholds: 0
// when every one is saturated for the band or none is live. Peers are the
// other routers' waiters for the pool, when the mesh carries them.
func (s *Server) admissionProbe(pg *poolGate) admission.Probe {
	p, ac := pg.pool.Load(), pg.ac.Load()
	now := s.clock.Now()
	var pr admission.Probe
	var spread float64
	pr.Peers, spread = s.peers(pg)
	for i := range p.targets {
		t := &p.targets[i]
		if t.unavailable(now, "") != "" {
			continue
		}
		e := s.engineState(t, spread)
		for b := range pr.Headroom {
			pr.Headroom[b] += ac.For(admission.Band(b)).Headroom(e)
		}
	}
	return pr
}

// roomy narrows a pick's eligibility to the targets with room for the
// band the gate admitted the request under (admission.Config.Room), so a
// released request goes to an engine that freed rather than to one the
// strategy favours that is still full. When no eligible target has room
// (the room went between release and pick) it leaves eligibility as it
// is. The narrowed mask is attempt.room, which attempt.OK reads.
func (a *attempt) roomy() {
	a.roomed = false
	if a.gate == nil {
		return
	}
	p, ac := a.res.pool, a.gate.ac.Load()
	_, spread := a.s.peers(a.gate)
	room := a.room()
	some := false
	for i := range p.targets {
		ok := a.eligibleNow(i) && ac.Room(a.admitAs, a.s.engineState(&p.targets[i], spread))
		room[i] = ok
		some = some || ok
	}
	a.roomed = some
}

// poolSaturation is the pool's mean engine utilization over its live
// targets (1 = at a threshold; see Thresholds.Utilization) and whether
// the pool is saturated (no live target has headroom).
func (s *Server) poolSaturation(pg *poolGate) (util float64, saturated bool) {
	p, th := pg.pool.Load(), pg.ac.Load().Thresholds
	now := s.clock.Now()
	live, room := 0, 0
	for i := range p.targets {
		t := &p.targets[i]
		if t.unavailable(now, "") != "" {
			continue
		}
		e := s.engineState(t, 1)
		util += th.Utilization(e)
		room += th.Headroom(e)
		live++
	}
	if live == 0 {
		return 1, true // nothing can take a request: as saturated as it gets
	}
	return util / float64(live), room == 0
}

// admit runs the request through its pool's gate when [admission] is on.
// It returns 0 when the request may proceed, else the status it got (429
// queue full, 503 waited the TTL, 499 client left while queued).
func (a *attempt) admit() int {
	ac := &a.sn.cfg.Admission
	if !ac.Enabled || a.res.pool.lb == nil {
		return 0
	}
	pg := a.s.gateFor(a.res.pool, a.sn)
	a.gate = pg
	band, flow := a.band()
	o, waited, as := pg.gate.Admit(a.r.Context(), band, flow, a.rc.PromptTokens)
	a.admitAs = as
	switch o {
	case admission.Admitted:
		return 0
	case admission.RejectedFull:
		return writeError(a.w, fmt.Errorf("%w (%s band of %q)", ErrQueueFull, band, a.res.pool.key), ac.RetryAfter.Duration)
	case admission.Expired:
		return writeError(a.w, fmt.Errorf("%w (%s band of %q, waited %s)", ErrQueueTimeout, band, a.res.pool.key,
			waited.Round(time.Millisecond)), ac.RetryAfter.Duration)
	}
	return statusClientClosed
}

// unanswered ends run when no target answered at all (connection refused,
// no response before the first-byte timeout): with admission on and the
// band's TTL not passed since the request arrived, the request waits in
// the queue again and again is true (every target may be tried anew; the
// failures count toward the breakers, so targets that keep refusing leave
// the pool's headroom and the request waits until one answers a health
// probe). Otherwise it writes the 502, or the 503 when the wait ran out.
func (a *attempt) unanswered() (code int, again bool) {
	upstreamErr := fmt.Errorf("%w: %v", ErrUpstream, a.lastErr)
	if a.gate == nil || a.r.Context().Err() != nil {
		return writeError(a.w, upstreamErr, 0), false
	}
	ac := &a.sn.cfg.Admission
	band, flow := a.band()
	left := a.start.Add(ac.Bands()[band].TTL.Duration).Sub(a.s.clock.Now())
	if left <= 0 {
		return writeError(a.w, upstreamErr, 0), false
	}
	ctx, cancel := context.WithTimeout(a.r.Context(), left)
	defer cancel()
	switch o, waited, as := a.gate.gate.Admit(ctx, band, flow, a.rc.PromptTokens); {
	case o == admission.Admitted:
		a.admitAs = as
		clear(a.tried)
		a.lastErr = nil
		return 0, true
	case a.r.Context().Err() != nil:
		return statusClientClosed, false
	case o == admission.RejectedFull:
		return writeError(a.w, upstreamErr, 0), false
	default:
		return writeError(a.w, fmt.Errorf("%w (%s band of %q, waited %s; last: %v)", ErrQueueTimeout, band, a.res.pool.key,
			waited.Round(time.Millisecond), a.lastErr), ac.RetryAfter.Duration), false
	}
}

// leave tells the gate the request ended: capacity may have freed.
func (a *attempt) leave() {
	if a.gate != nil {
		a.gate.gate.Kick()
	}
}

// band is the request's band (x-rolter-priority, default standard, capped
// by its key's max_priority; no cap on an open router) and its fairness
// flow (the key's name, or x-rolter-fairness-id when the key allows it or
// the router is open).
func (a *attempt) band() (admission.Band, string) {
	b := admission.Standard
	if v := a.r.header(admission.Header); v != "" {
		if pb, ok := admission.ParseBand(v); ok {
			b = pb
		}
	}
	if a.key == nil {
		return b, a.r.header(admission.FairnessHeader)
	}
	flow := a.key.name
	if a.key.fairness {
		if f := a.r.header(admission.FairnessHeader); f != "" {
			flow = a.key.name + "/" + f
		}
	}
	return b.Cap(a.key.maxBand), flow
}

// admissionMetrics are the queue's series: depth and wait per pool and
// band, outcomes, and the saturation gauges read at scrape time.
type admissionMetrics struct {
	s       *Server
	depth   *prometheus.GaugeVec     // model, band
	wait    *prometheus.HistogramVec // model, band
	outcome *prometheus.CounterVec   // model, band, outcome
}

var (
	poolSaturationDesc = prometheus.NewDesc("rolter_pool_saturation",
		"Mean utilization of the pool's live engines against the [admission] thresholds as this router sees them "+
			"(1: at a threshold); 1 when no engine is live. For autoscalers (KEDA, HPA).",
		[]string{"model"}, nil)
	poolSaturatedDesc = prometheus.NewDesc("rolter_pool_saturated",
		"1 while every live engine of the pool is saturated (requests queue), else 0.", []string{"model"}, nil)
	engineSaturationDesc = prometheus.NewDesc("rolter_engine_saturation",
		"An engine's utilization against the [admission] thresholds as this router sees it (1: saturated).",
		[]string{"target"}, nil)
)

func newAdmissionMetrics(s *Server, reg prometheus.Registerer) *admissionMetrics {
	m := &admissionMetrics{s: s,
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rolter_queue_depth",
			Help: "Requests waiting in this router's admission queue, per pool and band."}, []string{"model", "band"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rolter_queue_wait_seconds",
			Help:    "Time requests spent in the admission queue before they left it (any outcome; 0 when not queued).",
			Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30}}, []string{"model", "band"}),
		outcome: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rolter_admission_total",
			Help: "Requests through admission by outcome: admitted, rejected_full (429), expired (503), cancelled (client left)."},
			[]string{"model", "band", "outcome"}),
	}
	reg.MustRegister(m.depth, m.wait, m.outcome, m)
	return m
}

// Describe implements prometheus.Collector (the saturation gauges).
func (m *admissionMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolSaturationDesc
	ch <- poolSaturatedDesc
	ch <- engineSaturationDesc
}

// Collect implements prometheus.Collector: the saturation of every pool
// that has a gate, and of its engines.
func (m *admissionMetrics) Collect(ch chan<- prometheus.Metric) {
	seen := map[string]bool{}
	m.s.gates.Range(func(_, v any) bool {
		pg := v.(*poolGate)
		if !pg.cfg.Load().Admission.Enabled {
			return true
		}
		util, sat := m.s.poolSaturation(pg)
		ch <- prometheus.MustNewConstMetric(poolSaturationDesc, prometheus.GaugeValue, util, pg.key)
		ch <- prometheus.MustNewConstMetric(poolSaturatedDesc, prometheus.GaugeValue, b2f(sat), pg.key)
		th := pg.ac.Load().Thresholds
		p := pg.pool.Load()
		for i := range p.targets {
			t := &p.targets[i]
			if seen[t.label] {
				continue
			}
			seen[t.label] = true
			ch <- prometheus.MustNewConstMetric(engineSaturationDesc, prometheus.GaugeValue, th.Utilization(m.s.engineState(t, 1)), t.label)
		}
		return true
	})
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// observer returns the admission.Observer feeding pool key's series.
func (m *admissionMetrics) observer(key string) admission.Observer {
	o := &poolObserver{}
	for b := range admission.Band(admission.NumBands) {
		o.depth[b] = m.depth.WithLabelValues(key, b.String())
		o.wait[b] = m.wait.WithLabelValues(key, b.String())
		for out := range o.outcome[b] {
			o.outcome[b][out] = m.outcome.WithLabelValues(key, b.String(), admission.Outcome(out).String())
		}
	}
	return o
}

// gateObserver keeps a pool gate's waiter count and forwards to its
// metrics.
type gateObserver struct {
	pg    *poolGate
	depth [admission.NumBands]int // under the gate's lock
	// changed tells the mesh publisher the waiters changed: the other
	// routers read them with this router's loads (meshstate.PoolWaiting).
	changed func()
	next    admission.Observer
}

// Left implements admission.Observer.
func (o *gateObserver) Left(b admission.Band, out admission.Outcome, waited time.Duration) {
	o.next.Left(b, out, waited)
}

// Depth implements admission.Observer.
func (o *gateObserver) Depth(b admission.Band, n int) {
	o.depth[b] = n
	total := 0
	for _, d := range o.depth {
		total += d
	}
	o.pg.waiting.Store(int64(total))
	o.changed()
	o.next.Depth(b, n)
}

// poolObserver holds one pool's series children, resolved once.
type poolObserver struct {
	depth   [admission.NumBands]prometheus.Gauge
	wait    [admission.NumBands]prometheus.Observer
	outcome [admission.NumBands][4]prometheus.Counter
}

// Left implements admission.Observer.
func (o *poolObserver) Left(b admission.Band, out admission.Outcome, waited time.Duration) {
	o.outcome[b][out].Inc()
	o.wait[b].Observe(waited.Seconds())
}

// Depth implements admission.Observer.
func (o *poolObserver) Depth(b admission.Band, n int) { o.depth[b].Set(float64(n)) }

// admissionWaiting adds to loads, for every api_base of a pool with a
// gate, the pool's waiters by band: what the other routers' releases
// yield to (WaitingView). A base that serves several pools carries their
// sum.
func (s *Server) admissionWaiting(loads map[string]BaseLoad) {
	s.gates.Range(func(_, v any) bool {
		pg := v.(*poolGate)
		var d [admission.NumBands]uint64
		some := false
		for b := range admission.Band(admission.NumBands) {
			d[b] = uint64(pg.gate.Depth(b))
			some = some || d[b] > 0
		}
		if !some {
			return true
		}
		for _, base := range pg.pool.Load().bases {
			l := loads[base]
			for b, n := range d {
				l.Waiting[b] += n
			}
			loads[base] = l
		}
		return true
	})
}

// AdmissionState returns this router's admission queue depth per pool
// and band and each engine's saturation (by target label) for the pools
// with admission on; on is false when no pool has it (the dashboard's
// Mesh page, via the admin API's telemetry).
func (s *Server) AdmissionState() (queues map[string][admission.NumBands]int, saturation map[string]float64, on bool) {
	sn := s.snap.Load()
	if sn == nil || !sn.cfg.Admission.Enabled {
		return nil, nil, false
	}
	queues, saturation = map[string][admission.NumBands]int{}, map[string]float64{}
	s.gates.Range(func(k, v any) bool {
		pg := v.(*poolGate)
		var d [admission.NumBands]int
		for b := range admission.Band(admission.NumBands) {
			d[b] = pg.gate.Depth(b)
		}
		queues[k.(string)] = d
		th := pg.ac.Load().Thresholds
		p := pg.pool.Load()
		for i := range p.targets {
			t := &p.targets[i]
			saturation[t.label] = th.Utilization(s.engineState(t, 1))
		}
		return true
	})
	return queues, saturation, true
}
