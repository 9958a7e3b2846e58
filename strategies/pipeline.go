package strategies

import (
	"sync"
	"time"
)

// The pipeline framework, after llm-d's scheduler: a pick runs every
// Filter over the candidate list, then every Scorer, sums the scores as
// Σ weight_s · clamp(score_s, 0, 1), and lets the Picker choose among the
// candidates by total. The framework, not the plugins, clamps and weighs.
// Plugins are called concurrently from request goroutines; they must not
// block or allocate, and must write scores only for the candidates given.

// Cycle is the state of one pick, handed to every plugin. It and its
// scratch space come from a per-balancer pool, so a pick allocates nothing.
type Cycle struct {
	// Ctx is the request being routed.
	Ctx *RouteContext
	// Loads is the router's load snapshot, indexed by target.
	Loads []uint64
	// Eligible is the router's eligibility mask (nil: all eligible).
	Eligible Eligible

	n      int
	cands  []int
	totals []float64
	tmp    []float64
	ints   []int  // per-target scratch, valid within one Score call or the Pick
	mask   bitset // per-target scratch, valid within one Score call
}

func newCycle(n int) *Cycle {
	return &Cycle{
		n:      n,
		cands:  make([]int, 0, n),
		totals: make([]float64, n),
		tmp:    make([]float64, n),
		ints:   make([]int, n),
		mask:   newBitset(n),
	}
}

// Load returns the load of target i.
func (c *Cycle) Load(i int) uint64 { return loadOf(c.Loads, i) }

// candidateMask returns the per-target scratch bitset set to cands.
func (c *Cycle) candidateMask(cands []int) bitset {
	clear(c.mask)
	for _, i := range cands {
		c.mask.set(i)
	}
	return c.mask
}

// Filter removes candidates that must not take the request. It returns the
// kept candidates, reusing cands' storage.
type Filter interface {
	Filter(c *Cycle, cands []int) []int
}

// Scorer rates each candidate: out[k] is the score of target cands[k],
// nominally in [0, 1] (the framework clamps). out arrives zeroed.
type Scorer interface {
	Score(c *Cycle, cands []int, out []float64)
}

// Picker chooses the winning position k in cands from the weighted totals.
type Picker interface {
	Pick(c *Cycle, cands []int, totals []float64) int
}

// abstainer is a Scorer that can tell, before scoring, that it scores
// every candidate 0 in cycle c: the pipeline then skips it, as its term
// would add nothing to any total.
type abstainer interface {
	abstains(c *Cycle) bool
}

// observer is a plugin that learns from what a target served.
type observer interface {
	Observe(target int, ctx *RouteContext)
}

// WeightedScorer is a Scorer with its weight in the sum.
type WeightedScorer struct {
	Scorer Scorer
	Weight float64
}

// Pipeline is a LoadBalancer assembled from filters, weighted scorers and
// a picker. The first filter is always eligibility: an ineligible target
// is never a candidate, so it can neither win nor shape a normalisation.
type Pipeline struct {
	name    string
	n       int
	filters []Filter
	scorers []WeightedScorer
	picker  Picker
	pool    sync.Pool
}

var _ LoadBalancer = (*Pipeline)(nil)

// NewPipeline assembles a pipeline balancer over n targets. name is what
// Name returns.
func NewPipeline(name string, n int, filters []Filter, scorers []WeightedScorer, picker Picker) *Pipeline {
	p := &Pipeline{name: name, n: n, filters: filters, scorers: scorers, picker: picker}
	p.pool.New = func() any { return newCycle(n) }
	return p
}

// Name implements LoadBalancer.
func (p *Pipeline) Name() string { return p.name }

// Pick implements LoadBalancer.
func (p *Pipeline) Pick(ctx *RouteContext, loads []uint64) (int, bool) {
	return p.PickEligible(ctx, loads, nil)
}

// PickEligible implements LoadBalancer.
func (p *Pipeline) PickEligible(ctx *RouteContext, loads []uint64, eligible Eligible) (int, bool) {
	if ctx == nil {
		ctx = &noContext
	}
	c := p.pool.Get().(*Cycle)
	defer p.pool.Put(c)
	c.Ctx, c.Loads, c.Eligible = ctx, loads, eligible
	t, ok := p.run(c, nil)
	c.Ctx, c.Loads, c.Eligible = nil, nil, nil
	return t, ok
}

// PickExplained implements Explainer: the pick PickEligible makes, with
// every scorer's term for the chosen target and the runner-up's total.
func (p *Pipeline) PickExplained(ctx *RouteContext, loads []uint64, eligible Eligible, ex *Explanation) (int, bool) {
	if ctx == nil {
		ctx = &noContext
	}
	c := p.pool.Get().(*Cycle)
	defer p.pool.Put(c)
	c.Ctx, c.Loads, c.Eligible = ctx, loads, eligible
	t, ok := p.run(c, ex)
	c.Ctx, c.Loads, c.Eligible = nil, nil, nil
	return t, ok
}

// run filters, scores and picks within c; a non-nil ex is filled with
// why (the only allocations a pick makes, and only then).
func (p *Pipeline) run(c *Cycle, ex *Explanation) (int, bool) {
	cands, m := c.cands[:p.n], 0
	for i := range cands {
		if isEligible(c.Eligible, i) {
			cands[m] = i
			m++
		}
	}
	cands = cands[:m]
	if ex != nil {
		ex.Eligible = len(cands)
	}
	for _, f := range p.filters {
		cands = f.Filter(c, cands)
	}
	if len(cands) == 0 {
		return 0, false
	}
	if len(cands) == 1 {
		if ex != nil {
			ex.Mode, ex.RunnerUp = "single", -1
		}
		return cands[0], true
	}
	totals := c.totals[:len(cands)]
	clear(totals)
	tmp := c.tmp[:len(cands)]
	var terms [][]float64 // per scorer, per candidate; only when explaining
	if ex != nil {
		terms = make([][]float64, len(p.scorers))
	}
	for si, ws := range p.scorers {
		if ws.Weight == 0 {
			continue
		}
		if a, ok := ws.Scorer.(abstainer); ok && a.abstains(c) {
			if terms != nil {
				terms[si] = make([]float64, len(tmp))
			}
			continue
		}
		clear(tmp)
		ws.Scorer.Score(c, cands, tmp)
		for k, s := range tmp {
			totals[k] += ws.Weight * clamp01(s)
		}
		if terms != nil {
			terms[si] = make([]float64, len(tmp))
			for k, s := range tmp {
				terms[si][k] = clamp01(s)
			}
		}
	}
	k := p.picker.Pick(c, cands, totals)
	if ex != nil {
		explainTotals(ex, cands, totals, k)
		for si, ws := range p.scorers {
			if terms[si] != nil {
				ex.Components = append(ex.Components, ScoreComponent{Name: scorerName(ws.Scorer), Weight: ws.Weight, Score: terms[si][k]})
			}
		}
	}
	return cands[k], true
}

// noContext stands in for a nil RouteContext; plugins only read it.
var noContext RouteContext

// Observe implements LoadBalancer: every plugin that learns (session
// affinity, prefix affinity, adapter residency) records what target served.
func (p *Pipeline) Observe(target int, ctx *RouteContext) {
	if target < 0 || target >= p.n || ctx == nil {
		return
	}
	for _, ws := range p.scorers {
		if o, ok := ws.Scorer.(observer); ok {
			o.Observe(target, ctx)
		}
	}
}

// ObservePrefixRemote imports a prefix observation made by another router
// of the mesh: target served a prompt beginning with prefix. It feeds every
// prefix scorer of the pipeline exactly as a local Observe would, so
// affinity does not fragment across routers. Safe for concurrent use.
func (p *Pipeline) ObservePrefixRemote(target int, prefix string) {
	for _, ws := range p.scorers {
		if s, ok := ws.Scorer.(*PrefixAffinity); ok {
			s.idx.insert(target, prefix)
		}
	}
}

// PinSession imports a session pin made by another router of the mesh:
// session key was last served by target at time at. The pin expires a TTL
// after at, as a local one would. Safe for concurrent use.
func (p *Pipeline) PinSession(key string, target int, at time.Time) {
	for _, ws := range p.scorers {
		if s, ok := ws.Scorer.(*SessionAffinity); ok {
			s.pin(key, target, at)
		}
	}
}

func clamp01(v float64) float64 {
	if !(v > 0) { // also NaN
		return 0
	}
	return min(v, 1)
}

// MaxScorePicker picks the candidate with the highest total; candidates
// within 1e-9 of the highest tie, and one of them is drawn uniformly with
// a single Rand.IntN call.
type MaxScorePicker struct{ Rand Rand }

// Pick implements Picker. The tied positions are gathered in the cycle's
// per-target scratch (scoring is over), so a draw among them costs no
// third pass over the totals.
func (m MaxScorePicker) Pick(c *Cycle, _ []int, totals []float64) int {
	const eps = 1e-9
	best, hi := 0, totals[0]
	for k, v := range totals {
		if v > hi {
			best, hi = k, v
		}
	}
	var tied []int
	if c != nil && len(c.ints) >= len(totals) {
		tied = c.ints[:len(totals)]
	} else { // a caller without the pipeline's cycle
		tied = make([]int, len(totals))
	}
	top, ties := hi-eps, 0
	for k, v := range totals {
		if v >= top {
			tied[ties] = k
			ties++
		}
	}
	if ties == 1 {
		return best
	}
	return tied[m.Rand.IntN(ties)]
}
