package strategies

import (
	"math"
	"strings"
	"sync"
	"time"
)

// SessionTTL is how long pipeline's session affinity remembers the target
// that last served a session (compat.md).
const SessionTTL = 300 * time.Second

// maxSessionPins bounds the session pin table; when it is full, expired
// pins are swept and, if that is not enough, arbitrary pins are dropped.
const maxSessionPins = 1 << 16

// SessionAffinity scores 1 for the target that last served the request's
// session key (x-session-id) within SessionTTL, 0 for every other target
// and for requests without a key. Inputs: RouteContext.SessionKey, Clock.
type SessionAffinity struct {
	clock Clock
	ttl   time.Duration
	mu    sync.RWMutex
	pins  map[string]sessionPin
}

type sessionPin struct {
	target  int
	expires int64 // unix nanos
}

// NewSessionAffinity returns a session-affinity scorer with the given TTL.
func NewSessionAffinity(clock Clock, ttl time.Duration) *SessionAffinity {
	return &SessionAffinity{clock: clock, ttl: ttl, pins: make(map[string]sessionPin)}
}

// Score implements Scorer.
func (s *SessionAffinity) Score(c *Cycle, cands []int, out []float64) {
	key := c.Ctx.SessionKey
	if key == "" {
		return
	}
	s.mu.RLock()
	p, ok := s.pins[key]
	s.mu.RUnlock()
	if !ok || s.clock.Now().UnixNano() >= p.expires {
		return
	}
	for k, t := range cands {
		if t == p.target {
			out[k] = 1
		}
	}
}

// Observe pins the session to target.
func (s *SessionAffinity) Observe(target int, ctx *RouteContext) {
	if ctx.SessionKey != "" {
		s.pin(ctx.SessionKey, target, s.clock.Now())
	}
}

// Pinned returns the target key is pinned to, if the pin is live.
func (s *SessionAffinity) Pinned(key string) (int, bool) {
	s.mu.RLock()
	p, ok := s.pins[key]
	s.mu.RUnlock()
	if !ok || s.clock.Now().UnixNano() >= p.expires {
		return 0, false
	}
	return p.target, true
}

func (s *SessionAffinity) pin(key string, target int, at time.Time) {
	exp := at.Add(s.ttl).UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pins[key]; ok {
		if exp >= p.expires { // an older remote pin never overrides a newer one
			s.pins[key] = sessionPin{target, exp}
		}
		return
	}
	if len(s.pins) >= maxSessionPins {
		now := s.clock.Now().UnixNano()
		for k, p := range s.pins {
			if now >= p.expires {
				delete(s.pins, k)
			}
		}
		for k := range s.pins {
			if len(s.pins) < maxSessionPins*7/8 {
				break
			}
			delete(s.pins, k)
		}
	}
	s.pins[strings.Clone(key)] = sessionPin{target, exp}
}

// StaticWeight scores weight_i / max weight over the candidates. Inputs:
// Target.Weight.
type StaticWeight struct{ weights []float64 }

// Score implements Scorer.
func (s StaticWeight) Score(_ *Cycle, cands []int, out []float64) {
	mx := 0.0
	for _, t := range cands {
		mx = max(mx, s.weights[t])
	}
	if mx <= 0 {
		return
	}
	for k, t := range cands {
		out[k] = s.weights[t] / mx
	}
}

// LeastLoad scores 1 − load_i / max load over the candidates (1 for every
// candidate when all are idle). Inputs: loads.
type LeastLoad struct{}

// Score implements Scorer.
func (LeastLoad) Score(c *Cycle, cands []int, out []float64) {
	var mx uint64
	for _, t := range cands {
		mx = max(mx, c.Load(t))
	}
	for k, t := range cands {
		if mx == 0 {
			out[k] = 1
		} else {
			out[k] = 1 - float64(c.Load(t))/float64(mx)
		}
	}
}

// PrefixAffinity scores the fraction of the request's leading prompt bytes
// that a target is remembered to have served: matched_i / len(Prompt),
// from the route's prefix index (a bounded per-target trie with LRU
// eviction). Inputs: RouteContext.Prompt; learns in Observe.
type PrefixAffinity struct{ idx *prefixIndex }

// NewPrefixAffinity returns a prefix scorer over n targets remembering up
// to budget bytes per target (≤ 0: DefaultPrefixBytes).
func NewPrefixAffinity(n, budget int) *PrefixAffinity {
	return &PrefixAffinity{idx: newPrefixIndex(n, budget)}
}

// Score implements Scorer.
func (s *PrefixAffinity) Score(c *Cycle, cands []int, out []float64) {
	p := c.Ctx.Prompt
	if p == "" {
		return
	}
	if s.idx.match(p, c.candidateMask(cands), c.ints) == 0 {
		return
	}
	for k, t := range cands {
		out[k] = float64(c.ints[t]) / float64(len(p))
	}
}

// Observe records the prompt target served.
func (s *PrefixAffinity) Observe(target int, ctx *RouteContext) { s.idx.insert(target, ctx.Prompt) }

// CostScore scores min cost / cost_i over the candidates, where cost_i is
// the target's catalog price in + out per million tokens; a free target
// scores 1, and so does every target when none is priced. Inputs:
// Target.CostInPerMtok, Target.CostOutPerMtok.
type CostScore struct{ costs []float64 }

func newCostScore(ts []Target) CostScore {
	c := CostScore{costs: make([]float64, len(ts))}
	for i, t := range ts {
		c.costs[i] = max(0, t.CostInPerMtok) + max(0, t.CostOutPerMtok)
	}
	return c
}

// Score implements Scorer.
func (s CostScore) Score(_ *Cycle, cands []int, out []float64) {
	mn := math.Inf(1)
	for _, t := range cands {
		mn = min(mn, s.costs[t])
	}
	for k, t := range cands {
		if s.costs[t] <= 0 {
			out[k] = 1
		} else {
			out[k] = mn / s.costs[t]
		}
	}
}

// LatencyScore scores min cost / cost_i over the candidates with a latency
// sample, where cost_i = EWMA_i · (1 + inflight_i): the target's latency
// EWMA (TargetStats.LatencyEWMA: alpha 0.3, successes only) times the
// requests this router already has outstanding there, counting the new
// one (Finagle's "peak EWMA" load). The EWMA learns only when a request
// completes, which on an LLM engine is seconds to minutes after it was
// sent; scored alone it sends every request in the meantime to whichever
// target last looked fastest, and that target's queue is what they join.
// The in-flight factor is known the moment a request is sent, so the
// comparison turns against a target as soon as this router piles onto it;
// between idle targets it is the plain EWMA ratio. A target with no
// sample yet scores 1, optimistically, so it earns one; on a cold route
// every target scores 1 and load decides. Inputs: Spec.Stats
// (LatencyEWMA, InFlight).
type LatencyScore struct{ stats []*TargetStats }

// latencyCost is target t's EWMA times its in-flight count plus one, or
// ok=false before its first sample.
func (s LatencyScore) latencyCost(t int) (float64, bool) {
	ms, ok := s.stats[t].LatencyEWMA()
	if !ok {
		return 0, false
	}
	return ms * float64(1+s.stats[t].InFlight()), true
}

// Score implements Scorer.
func (s LatencyScore) Score(_ *Cycle, cands []int, out []float64) {
	mn := math.Inf(1)
	for _, t := range cands {
		if c, ok := s.latencyCost(t); ok {
			mn = min(mn, c)
		}
	}
	for k, t := range cands {
		c, ok := s.latencyCost(t)
		switch {
		case !ok:
			out[k] = 1
		case c <= 0:
			out[k] = 1
		default:
			out[k] = mn / c
		}
	}
}
