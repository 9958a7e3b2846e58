package strategies

// Random picks a target uniformly at random: P(i) = 1/|eligible| for every
// eligible target i. Inputs: the eligibility mask and Spec.Rand; loads are
// ignored.
type Random struct {
	n   int
	rnd Rand
}

var _ LoadBalancer = (*Random)(nil)

func newRandom(s Spec) (LoadBalancer, error) { return &Random{n: len(s.Targets), rnd: s.Rand}, nil }

// Name implements LoadBalancer.
func (*Random) Name() string { return "random" }

// Pick implements LoadBalancer.
func (r *Random) Pick(ctx *RouteContext, loads []uint64) (int, bool) {
	return r.PickEligible(ctx, loads, nil)
}

// PickEligible implements LoadBalancer.
func (r *Random) PickEligible(_ *RouteContext, _ []uint64, eligible Eligible) (int, bool) {
	return pickUniform(r.rnd, r.n, eligible, -1)
}

// Observe implements LoadBalancer; random learns nothing.
func (*Random) Observe(int, *RouteContext) {}

// PowerOfTwo draws two distinct eligible targets uniformly at random and
// returns the less loaded one. Load is first the prefill work queued on
// each (RouteContext.QueuedPrefill, when the router supplies it): the
// prompt tokens waiting for a first token there, which is what a new
// request's first token waits behind, so one 30k-token prompt weighs as
// much as thirty 1k-token ones. Between equal queues (both idle, or no
// signal) the request load decides, and on equal loads the first draw
// wins. With a single eligible target it returns that one. Inputs:
// QueuedPrefill, loads (the router's in-flight count folded with engine
// queue depth), the eligibility mask and Spec.Rand. Ineligible targets
// are never drawn, so they never take part in the comparison.
type PowerOfTwo struct {
	n   int
	rnd Rand
}

var _ LoadBalancer = (*PowerOfTwo)(nil)

func newPowerOfTwo(s Spec) (LoadBalancer, error) {
	return &PowerOfTwo{n: len(s.Targets), rnd: s.Rand}, nil
}

// Name implements LoadBalancer.
func (*PowerOfTwo) Name() string { return "power_of_two" }

// Pick implements LoadBalancer.
func (p *PowerOfTwo) Pick(ctx *RouteContext, loads []uint64) (int, bool) {
	return p.PickEligible(ctx, loads, nil)
}

// PickEligible implements LoadBalancer.
func (p *PowerOfTwo) PickEligible(ctx *RouteContext, loads []uint64, eligible Eligible) (int, bool) {
	a, ok := pickUniform(p.rnd, p.n, eligible, -1)
	if !ok {
		return 0, false
	}
	b, ok := pickUniform(p.rnd, p.n, eligible, a)
	if !ok {
		return a, true
	}
	if ctx != nil && len(ctx.QueuedPrefill) >= p.n {
		if qa, qb := ctx.QueuedPrefill[a], ctx.QueuedPrefill[b]; qa != qb {
			if qb < qa {
				return b, true
			}
			return a, true
		}
	}
	if loadOf(loads, b) < loadOf(loads, a) {
		return b, true
	}
	return a, true
}

// Observe implements LoadBalancer; power_of_two learns nothing.
func (*PowerOfTwo) Observe(int, *RouteContext) {}
