package strategies

import "sync"

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

// CacheAware routes by approximate prefix affinity with a load guard.
//
// For each eligible target i, match_i is how many leading bytes of
// RouteContext.Prompt the route's prefix index remembers i serving (a
// bounded per-target trie with LRU eviction, learned in Observe), and the
// score is match_i / len(Prompt). Let w be the best-scoring eligible target
// (least loaded among equals, then random) and m the least load among the
// eligible targets. If score_w ≥ CacheThreshold and not
// (load_w > GuardMinLoad and load_w > GuardRatio·m), w wins. Otherwise the
// request spreads: the least-loaded eligible target wins, ties going to the
// least-warm one (fewest bytes remembered), then random. Inputs: Prompt,
// loads, the eligibility mask, Spec.Rand. Ineligible targets are neither
// scored nor counted in m.
type CacheAware struct {
	n    int
	rnd  Rand
	idx  *prefixIndex
	pool sync.Pool
}

var _ LoadBalancer = (*CacheAware)(nil)

func newCacheAware(s Spec) (LoadBalancer, error) {
	n := len(s.Targets)
	c := &CacheAware{n: n, rnd: s.Rand, idx: newPrefixIndex(n, s.PrefixCacheBytes)}
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
	cy := c.pool.Get().(*Cycle)
	defer c.pool.Put(cy)
	cand := cy.mask
	cand.fill(c.n, eligible)
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
	prompt := ""
	if ctx != nil {
		prompt = ctx.Prompt
	}
	if prompt != "" {
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
			if lw := loadOf(loads, w); !(lw > GuardMinLoad && float64(lw) > GuardRatio*float64(minLoad)) {
				return w, true
			}
		}
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

// Observe implements LoadBalancer: target now holds ctx.Prompt's prefix.
func (c *CacheAware) Observe(target int, ctx *RouteContext) {
	if ctx != nil {
		c.idx.insert(target, ctx.Prompt)
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
