package strategies

import (
	"sync"
	"time"
)

// Cache-aware parameters (seed 000, compat.md).
const (
	// CacheThreshold is the matched fraction from which a warm target pins.
	CacheThreshold = 0.5
	// GuardMinLoad and GuardRatio form the load guard: a warm target keeps
	// its affinity until its load exceeds GuardMinLoad and GuardRatio × the
	// least-loaded eligible target's load.
	GuardMinLoad = 2
	GuardRatio   = 1.5
)

// CacheAware routes by session and approximate prefix affinity with a load
// guard.
//
// A request carrying a session key (x-session-id) whose session a target
// served within SessionTTL prefers that target first: when it is eligible
// and passes the load guard below, it wins. Otherwise, for each eligible
// target i, match_i is how many leading bytes of
// RouteContext.Prompt the route's prefix index remembers i serving (a
// bounded per-target trie with LRU eviction, learned in Observe), and the
// score is match_i / len(Prompt). Let w be the best-scoring eligible target
// (least loaded among equals, then random) and m the least load among the
// eligible targets. The load guard holds for a target t unless
// load_t > GuardMinLoad and load_t > GuardRatio·m. If score_w ≥
// CacheThreshold and the guard holds for w, w wins. Otherwise the
// request spreads: the least-loaded eligible target wins, ties going to the
// least-warm one (fewest bytes remembered), then random. Observe pins the
// session (if any) to the target and records its prompt. Inputs:
// SessionKey, Prompt, loads, the eligibility mask, Spec.Rand, Spec.Clock.
// Ineligible targets are neither scored nor counted in m.
type CacheAware struct {
	n        int
	rnd      Rand
	idx      *prefixIndex
	sessions *SessionAffinity
	pool     sync.Pool
}

var _ LoadBalancer = (*CacheAware)(nil)

func newCacheAware(s Spec) (LoadBalancer, error) {
	n := len(s.Targets)
	c := &CacheAware{n: n, rnd: s.Rand, idx: newPrefixIndex(n, s.PrefixCacheBytes),
		sessions: NewSessionAffinity(s.Clock, SessionTTL)}
	c.pool.New = func() any { return newCycle(n) }
	return c, nil
}

// Name implements LoadBalancer.
func (*CacheAware) Name() string { return "cache_aware" }

// Pick implements LoadBalancer.
func (c *CacheAware) Pick(ctx *RouteContext, loads []uint64) (int, bool) {
	return c.PickEligible(ctx, loads, nil)
}

// PickEligible implements LoadBalancer.
func (c *CacheAware) PickEligible(ctx *RouteContext, loads []uint64, eligible Eligible) (int, bool) {
	return c.pick(ctx, loads, eligible, nil)
}

// PickExplained implements Explainer: Mode "session" (the session's pinned
// target), "prefix_match" with the matched
// fraction of the prompt as the one component, or "spread" (least load,
// then the least-remembered target) with the reason as Fallback:
// "no_prompt", "below_threshold" (no target holds half the prompt) or
// "load_guard" (the holder is too far above the least-loaded target).
func (c *CacheAware) PickExplained(ctx *RouteContext, loads []uint64, eligible Eligible, ex *Explanation) (int, bool) {
	return c.pick(ctx, loads, eligible, ex)
}

func (c *CacheAware) pick(ctx *RouteContext, loads []uint64, eligible Eligible, ex *Explanation) (int, bool) {
	cy := c.pool.Get().(*Cycle)
	defer c.pool.Put(cy)
	cand := cy.mask
	cand.fill(c.n, eligible)
	if ex != nil {
		ex.RunnerUp = -1
		for i := range c.n {
			if cand.has(i) {
				ex.Eligible++
			}
		}
	}
	if cand.empty() {
		return 0, false
	}
	var minLoad uint64
	first := true
	for i := range c.n {
		if cand.has(i) {
			if l := loadOf(loads, i); first || l < minLoad {
				minLoad, first = l, false
			}
		}
	}
	guarded := func(t int) bool {
		lt := loadOf(loads, t)
		return !(lt > GuardMinLoad && float64(lt) > GuardRatio*float64(minLoad))
	}
	if ctx != nil && ctx.SessionKey != "" {
		if t, ok := c.sessions.Pinned(ctx.SessionKey); ok && t < c.n && cand.has(t) && guarded(t) {
			if ex != nil {
				ex.Mode = "session"
			}
			return t, true
		}
	}
	prompt := ""
	if ctx != nil {
		prompt = ctx.Prompt
	}
	why := "no_prompt"
	if prompt != "" {
		why = "below_threshold"
		best := c.idx.match(prompt, cand, cy.ints)
		if float64(best) >= CacheThreshold*float64(len(prompt)) && best > 0 {
			w, ties := -1, 0
			for i := range c.n {
				if !cand.has(i) || cy.ints[i] != best {
					continue
				}
				switch l := loadOf(loads, i); {
				case w < 0 || l < loadOf(loads, w):
					w, ties = i, 1
				case l == loadOf(loads, w):
					ties++
					if c.rnd.IntN(ties) == 0 {
						w = i
					}
				}
			}
			if guarded(w) {
				if ex != nil {
					frac := float64(best) / float64(len(prompt))
					ex.Mode, ex.Score = "prefix_match", frac
					ex.Components = []ScoreComponent{{Name: "prefix_match", Weight: 1, Score: frac}}
				}
				return w, true
			}
			why = "load_guard"
		}
	}
	if ex != nil {
		ex.Mode, ex.Fallback = "spread", why
	}
	return c.spread(cand, loads, minLoad), true
}

// spread returns the least-warm target among the eligible ones carrying
// minLoad, ties broken at random.
func (c *CacheAware) spread(cand bitset, loads []uint64, minLoad uint64) int {
	c.idx.mu.RLock()
	defer c.idx.mu.RUnlock()
	best, ties := -1, 0
	for i := range c.n {
		if !cand.has(i) || loadOf(loads, i) != minLoad {
			continue
		}
		switch {
		case best < 0 || c.idx.size[i] < c.idx.size[best]:
			best, ties = i, 1
		case c.idx.size[i] == c.idx.size[best]:
			ties++
			if c.rnd.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// Observe implements LoadBalancer: target now holds ctx.Prompt's prefix
// and, when ctx has a session key, the session.
func (c *CacheAware) Observe(target int, ctx *RouteContext) {
	if ctx != nil && target >= 0 && target < c.n {
		c.idx.insert(target, ctx.Prompt)
		c.sessions.Observe(target, ctx)
	}
}

// PinSession imports a session pin made by another router of the mesh:
// session key was last served by target at time at (see
// Pipeline.PinSession). Safe for concurrent use.
func (c *CacheAware) PinSession(key string, target int, at time.Time) {
	if target >= 0 && target < c.n {
		c.sessions.pin(key, target, at)
	}
}

// ObservePrefixRemote imports a prefix observation made by another router
// of the mesh: target served a prompt beginning with prefix. It updates the
// same index a local Observe does (and counts against the same per-target
// budget), so the routers' affinity maps converge instead of fragmenting.
// Safe for concurrent use.
func (c *CacheAware) ObservePrefixRemote(target int, prefix string) {
	c.idx.insert(target, prefix)
}
