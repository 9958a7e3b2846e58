package strategies

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rolter/rolter/adaptive"
)

// WarmupBudget is how many picks adaptive's warm-up steers to each target
// that has no latency sample yet (seed 000, "Warm-up").
const WarmupBudget = 8

// Decision modes of adaptive, as in rolter_adaptive_routing_decisions_total.
const (
	ModeBlend       = "blend"
	ModeExploration = "exploration"
	ModeFallback    = "fallback"
)

const (
	decBlend = iota
	decExploration
	decFallback
)

// Adaptive blends observed latency, catalog cost and load under the
// deployment-wide policy (Spec.Policy, read on every pick).
//
// The blend engages only when all three hold: the policy is enabled; at
// least one weight is non-zero; and the route has evidence — it has served
// at least MinSamples requests (successful completions on this route,
// reported through Served; retries and other pools sharing a target do not
// count) and, while LatencyWeight is above zero, at least two of its
// targets have a latency sample.
// Engaged, a pick is uniform random over the eligible targets with
// probability ExplorationRatio (exploration), and otherwise the argmax,
// random ties, of
//
//	score_i = (wL·lat_i + wC·cost_i + wD·load_i) / (wL + wC + wD)
//	lat_i  = min EWMA / EWMA_i (0 without a sample)
//	cost_i = min price / price_i (1 when free)
//	load_i = 1 − load_i / max load (1 when all idle)
//
// over the eligible targets (blend). Disengaged, every pick goes to the
// pipeline stack (DefaultPipeline: fallback), except that while the policy
// is enabled and only the evidence is missing, picks are first steered to
// eligible targets without a latency sample, at most WarmupBudget each per
// balancer, counted as exploration; a policy with LatencyWeight zero needs
// no latency evidence and steers nothing. The kill switch probes nothing. The
// fallback stack learns from every Observe, engaged or not, so
// disengaging lands on warm session and prefix state.
//
// Inputs: Spec.Policy, Spec.Stats (EWMA, samples, picks), catalog prices,
// Target.Weight (fallback stack only), loads, the eligibility mask,
// Spec.Rand, Spec.Clock (telemetry ages).
//
// Telemetry costs two relaxed atomic adds and one store per pick (the
// decision counter, the chosen target's pick counter and the time of its
// last pick); scores are recomputed only when Telemetry is called.
type Adaptive struct {
	n        int
	targets  []Target
	stats    []*TargetStats
	costs    CostScore
	policy   *PolicyHolder
	rnd      Rand
	clock    Clock
	fallback *Pipeline

	warmup    []atomic.Uint32
	picks     []atomic.Uint64
	served    []atomic.Uint64 // successful completions on this route
	lastPick  []atomic.Int64  // unix nanos of the target's last pick; 0: none
	decisions [3]atomic.Uint64
	pool      sync.Pool
}

var _ LoadBalancer = (*Adaptive)(nil)

func newAdaptive(s Spec) (LoadBalancer, error) {
	n := len(s.Targets)
	a := &Adaptive{
		n: n, targets: s.Targets, stats: s.Stats, costs: newCostScore(s.Targets),
		policy: s.Policy, rnd: s.Rand, clock: s.Clock,
		fallback: DefaultPipeline("adaptive", s),
		warmup:   make([]atomic.Uint32, n),
		picks:    make([]atomic.Uint64, n),
		served:   make([]atomic.Uint64, n),
		lastPick: make([]atomic.Int64, n),
	}
	a.pool.New = func() any { return newCycle(n) }
	return a, nil
}

// Name implements LoadBalancer.
func (*Adaptive) Name() string { return "adaptive" }

// Pick implements LoadBalancer.
func (a *Adaptive) Pick(ctx *RouteContext, loads []uint64) (int, bool) {
	return a.PickEligible(ctx, loads, nil)
}

// Fallback returns the pipeline stack adaptive falls back to (for the
// mesh hooks ObservePrefixRemote and PinSession).
func (a *Adaptive) Fallback() *Pipeline { return a.fallback }

// evidence returns the requests the route has served and how many of its
// targets have a latency sample.
func (a *Adaptive) evidence() (served uint64, sampled int) {
	for i, s := range a.stats {
		served += a.served[i].Load()
		if s.Samples() > 0 {
			sampled++
		}
	}
	return served, sampled
}

// Served implements Completer: the route served a request on target.
func (a *Adaptive) Served(target int) {
	if target >= 0 && target < a.n {
		a.served[target].Add(1)
	}
}

func blendable(p adaptive.Policy) bool {
	return p.Enabled && (p.LatencyWeight > 0 || p.CostWeight > 0 || p.LoadWeight > 0)
}

func (a *Adaptive) engaged(p adaptive.Policy) (engaged, thin bool) {
	if !blendable(p) {
		return false, false
	}
	served, sampled := a.evidence()
	needLatency := p.LatencyWeight > 0
	ok := served >= uint64(p.MinSamples) && (!needLatency || sampled >= 2)
	return ok, !ok && needLatency
}

// PickEligible implements LoadBalancer.
func (a *Adaptive) PickEligible(ctx *RouteContext, loads []uint64, eligible Eligible) (int, bool) {
	return a.pick(ctx, loads, eligible, nil)
}

// PickExplained implements Explainer: Mode is the decision (blend,
// exploration, warmup, fallback); Fallback says why the blend did not
// decide (kill_switch, no_weights, cold).
func (a *Adaptive) PickExplained(ctx *RouteContext, loads []uint64, eligible Eligible, ex *Explanation) (int, bool) {
	return a.pick(ctx, loads, eligible, ex)
}

func (a *Adaptive) pick(ctx *RouteContext, loads []uint64, eligible Eligible, ex *Explanation) (int, bool) {
	p := a.policy.Load()
	engaged, thin := a.engaged(p)
	var t, mode int
	ok := false
	label := ""
	switch {
	case engaged:
		if p.ExplorationRatio > 0 && a.rnd.Float64() < p.ExplorationRatio {
			t, ok = pickUniform(a.rnd, a.n, eligible, -1)
			mode, label = decExploration, "exploration"
		} else {
			t, ok = a.blend(p, loads, eligible, ex)
			mode, label = decBlend, "blend"
		}
	case thin:
		if t, ok = a.warmupPick(eligible); ok {
			mode, label = decExploration, "warmup"
			break
		}
		fallthrough
	default:
		if ex != nil {
			t, ok = a.fallback.PickExplained(ctx, loads, eligible, ex)
		} else {
			t, ok = a.fallback.PickEligible(ctx, loads, eligible)
		}
		mode, label = decFallback, "fallback"
	}
	if ex != nil {
		a.explainDecision(ex, p, thin, label, eligible)
	}
	if ok {
		a.decisions[mode].Add(1)
		a.picks[t].Add(1)
		a.lastPick[t].Store(a.clock.Now().UnixNano())
	}
	return t, ok
}

// explainDecision completes ex with the decision's label and the reason
// the blend did not decide.
func (a *Adaptive) explainDecision(ex *Explanation, p adaptive.Policy, thin bool, label string, eligible Eligible) {
	if label == "exploration" || label == "warmup" {
		*ex = Explanation{RunnerUp: -1}
		for i := range a.n {
			if isEligible(eligible, i) {
				ex.Eligible++
			}
		}
	}
	ex.Mode = label
	switch {
	case label == "blend" || label == "exploration":
	case !p.Enabled:
		ex.Fallback = "kill_switch"
	case thin:
		ex.Fallback = "cold"
	case !blendable(p):
		ex.Fallback = "no_weights"
	}
}

// warmupPick steers to a random eligible target that has no latency sample
// and has taken fewer than WarmupBudget warm-up picks, spending one unit of
// its budget.
func (a *Adaptive) warmupPick(eligible Eligible) (int, bool) {
	for range 4 { // retry only when a concurrent pick spent the budget first
		best, seen := -1, 0
		for i := range a.n {
			if isEligible(eligible, i) && a.stats[i].Samples() == 0 && a.warmup[i].Load() < WarmupBudget {
				seen++
				if a.rnd.IntN(seen) == 0 {
					best = i
				}
			}
		}
		if best < 0 {
			return 0, false
		}
		if v := a.warmup[best].Load(); v < WarmupBudget && a.warmup[best].CompareAndSwap(v, v+1) {
			return best, true
		}
	}
	return 0, false
}

// components returns target i's latency, cost and load scores, each in
// [0, 1], against the minima and maximum of the candidates.
func (a *Adaptive) components(i int, minLat, minCost float64, load, maxLoad uint64) (lat, cost, ld float64) {
	if ms, ok := a.stats[i].LatencyEWMA(); ok && ms > 0 {
		lat = minLat / ms
	}
	if c := a.costs.costs[i]; c > 0 {
		cost = minCost / c
	} else {
		cost = 1
	}
	ld = 1
	if maxLoad > 0 {
		ld = 1 - float64(load)/float64(maxLoad)
	}
	return lat, cost, ld
}

// blend returns the argmax of the blended score over the eligible targets;
// a non-nil ex gets the chosen target's terms and the runner-up.
func (a *Adaptive) blend(p adaptive.Policy, loads []uint64, eligible Eligible, ex *Explanation) (int, bool) {
	c := a.pool.Get().(*Cycle)
	defer a.pool.Put(c)
	cands := c.cands[:0]
	minLat, minCost := math.Inf(1), math.Inf(1)
	var maxLoad uint64
	for i := range a.n {
		if !isEligible(eligible, i) {
			continue
		}
		cands = append(cands, i)
		if ms, ok := a.stats[i].LatencyEWMA(); ok {
			minLat = min(minLat, ms)
		}
		minCost = min(minCost, a.costs.costs[i])
		maxLoad = max(maxLoad, loadOf(loads, i))
	}
	if ex != nil {
		ex.Eligible = len(cands)
	}
	if len(cands) == 0 {
		return 0, false
	}
	sum := p.LatencyWeight + p.CostWeight + p.LoadWeight
	totals := c.totals[:len(cands)]
	for k, i := range cands {
		lat, cost, ld := a.components(i, minLat, minCost, loadOf(loads, i), maxLoad)
		totals[k] = (p.LatencyWeight*lat + p.CostWeight*cost + p.LoadWeight*ld) / sum
	}
	k := MaxScorePicker{a.rnd}.Pick(c, cands, totals)
	if ex != nil {
		explainTotals(ex, cands, totals, k)
		lat, cost, ld := a.components(cands[k], minLat, minCost, loadOf(loads, cands[k]), maxLoad)
		ex.Components = []ScoreComponent{
			{Name: "latency", Weight: p.LatencyWeight / sum, Score: lat},
			{Name: "cost", Weight: p.CostWeight / sum, Score: cost},
			{Name: "load", Weight: p.LoadWeight / sum, Score: ld},
		}
	}
	return cands[k], true
}

// Observe implements LoadBalancer: the fallback stack always learns.
func (a *Adaptive) Observe(target int, ctx *RouteContext) { a.fallback.Observe(target, ctx) }

// Telemetry computes the balancer's current scores, using each target's
// in-flight count (TargetStats.InFlight) as its load.
func (a *Adaptive) Telemetry() adaptive.Telemetry {
	p := a.policy.Load()
	engaged, _ := a.engaged(p)
	served, _ := a.evidence()
	out := adaptive.Telemetry{
		Engaged: engaged, Observed: served, Policy: p,
		Decisions: adaptive.Decisions{
			Blend:       a.decisions[decBlend].Load(),
			Exploration: a.decisions[decExploration].Load(),
			Fallback:    a.decisions[decFallback].Load(),
		},
		Targets: make([]adaptive.TargetTelemetry, a.n),
	}
	minLat, minCost := math.Inf(1), math.Inf(1)
	var maxLoad uint64
	for i, s := range a.stats {
		if ms, ok := s.LatencyEWMA(); ok {
			minLat = min(minLat, ms)
		}
		minCost = min(minCost, a.costs.costs[i])
		maxLoad = max(maxLoad, s.InFlight())
	}
	sum := p.LatencyWeight + p.CostWeight + p.LoadWeight
	now := a.clock.Now()
	for i, s := range a.stats {
		tg := a.targets[i]
		lat, cost, ld := a.components(i, minLat, minCost, s.InFlight(), maxLoad)
		row := adaptive.TargetTelemetry{
			Target: tg.ID, Provider: tg.Provider, UpstreamModel: tg.UpstreamModel,
			CostPerMtok: a.costs.costs[i], InFlight: s.InFlight(), Samples: a.picks[i].Load(),
		}
		if sum > 0 {
			row.LatencyScore = p.LatencyWeight * lat / sum
			row.CostScore = p.CostWeight * cost / sum
			row.LoadScore = p.LoadWeight * ld / sum
			row.Score = row.LatencyScore + row.CostScore + row.LoadScore
		}
		if ms, ok := s.LatencyEWMA(); ok {
			row.LatencyMs = &ms
		}
		if last := a.lastPick[i].Load(); last != 0 {
			age := max(0, now.Sub(time.Unix(0, last)).Milliseconds())
			row.LastSampleAgeMs = &age
		}
		out.Targets[i] = row
	}
	return out
}

// ObservePrefixRemote imports another router's prefix observation into the
// fallback stack (see Pipeline.ObservePrefixRemote).
func (a *Adaptive) ObservePrefixRemote(target int, prefix string) {
	a.fallback.ObservePrefixRemote(target, prefix)
}

// PinSession imports another router's session pin into the fallback stack
// (see Pipeline.PinSession).
func (a *Adaptive) PinSession(key string, target int, at time.Time) {
	a.fallback.PinSession(key, target, at)
}
