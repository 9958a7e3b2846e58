package router

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A request's path through the router, stage by stage; each stage's
// duration goes to rolter_router_stage_seconds{stage}, so the router's own
// overhead is visible in production and not only in benchmarks.
const (
	stageBodyRead        = iota // reading the client's body
	stageParse                  // validating it and extracting the prompt
	stageResolve                // the model → route, group or pin lookup
	stagePick                   // eligibility, loads and the strategy's pick
	stageUpstreamConnect        // dialling a new upstream connection (pooled ones skip it)
	stageTTFB                   // upstream request sent → response headers
	stageRelay                  // response headers → last byte relayed
	numStages
)

var stageNames = [numStages]string{"body_read", "parse", "route_resolve", "pick", "upstream_connect", "ttfb", "relay"}

// stageBuckets span a microsecond (a resolve) to a minute (a long relay).
var stageBuckets = []float64{1e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3,
	0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// stageMetrics are the per-stage and per-strategy timing histograms. The
// stage children are resolved once, so observing one costs no lookup.
type stageMetrics struct {
	stages [numStages]prometheus.Observer
	pick   *prometheus.HistogramVec // strategy
}

func newStageMetrics(reg prometheus.Registerer) *stageMetrics {
	vec := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "rolter_router_stage_seconds", Help: "Time a request spends in each stage of the router.",
		Buckets: stageBuckets,
	}, []string{"stage"})
	m := &stageMetrics{pick: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "rolter_router_pick_seconds", Help: "Time a strategy takes to pick a target, by strategy.",
		Buckets: stageBuckets,
	}, []string{"strategy"})}
	for i, n := range stageNames {
		m.stages[i] = vec.WithLabelValues(n)
	}
	reg.MustRegister(vec, m.pick)
	return m
}

// observe records stage st as having taken since → now and returns now,
// so consecutive stages chain. The request path times its stages with
// the Server's clock instead (attempt.stage, attempt.stageTo), each read
// of it ending one stage and starting the next.
func (m *stageMetrics) observe(st int, since time.Time) time.Time {
	now := time.Now()
	m.observed(st, since, now)
	return now
}

// observed records stage st as having taken since → now.
func (m *stageMetrics) observed(st int, since, now time.Time) {
	m.stages[st].Observe(now.Sub(since).Seconds())
}

// stageTimes holds a request's stage durations until they are observed
// (flush): when the request is settled, after its answer left (or, for
// an event stream, once its first event is out). An Observe is a
// fraction of a microsecond, and a request makes six of them before its
// first byte; they need not stand between the client's request and its
// answer. A stage met again (a retry's pick, its time to first byte)
// observes the one before it first.
type stageTimes struct {
	d    [numStages]float32 // seconds
	pick float32            // the strategy's pick, seconds
	set  uint8              // bit st: d[st] is held; bit numStages: pick
}

const pickBit = 1 << numStages

// put holds stage st's duration.
func (t *stageTimes) put(m *stageMetrics, st int, d time.Duration) {
	if t.set&(1<<st) != 0 {
		m.stages[st].Observe(float64(t.d[st]))
	}
	t.d[st] = float32(d.Seconds())
	t.set |= 1 << st
}

// putPick holds the duration of a pick of p's strategy.
func (t *stageTimes) putPick(m *stageMetrics, p *pool, d time.Duration) {
	if t.set&pickBit != 0 {
		m.pickTime(p).Observe(float64(t.pick))
	}
	t.pick = float32(d.Seconds())
	t.set |= pickBit
}

// flush observes what t holds (the picks as p's strategy's) and empties it.
func (t *stageTimes) flush(m *stageMetrics, p *pool) {
	if t.set == 0 {
		return
	}
	for st := range numStages {
		if t.set&(1<<st) != 0 {
			m.stages[st].Observe(float64(t.d[st]))
		}
	}
	if t.set&pickBit != 0 && p != nil {
		m.pickTime(p).Observe(float64(t.pick))
	}
	t.set = 0
}

// pickTime is p's strategy's pick-time histogram child.
func (m *stageMetrics) pickTime(p *pool) prometheus.Observer {
	mk := func() prometheus.Observer { return m.pick.WithLabelValues(p.lb.Name()) }
	if p.series == nil {
		return mk()
	}
	return p.series.pickTime.get(mk)
}
