package strategies

import "sync/atomic"

// RoundRobin rotates through the targets in order: the n-th request's pick
// is target n mod len(targets), skipping ineligible ones. Inputs: none but the
// eligibility mask; loads are ignored.
type RoundRobin struct {
	n    int
	next atomic.Uint64
}

var _ LoadBalancer = (*RoundRobin)(nil)

func newRoundRobin(s Spec) (LoadBalancer, error) { return &RoundRobin{n: len(s.Targets)}, nil }

// Name implements LoadBalancer.
func (*RoundRobin) Name() string { return "round_robin" }

// Pick implements LoadBalancer.
func (r *RoundRobin) Pick(ctx *RouteContext, loads []uint64) (int, bool) {
	return r.PickEligible(ctx, loads, nil)
}

// PickEligible implements LoadBalancer: the rotation advances by one per
// request and the first eligible target at or after the rotation point
// wins. A retry (ctx.Retry) starts at the next rotation point without
// advancing, so it takes the target after the failed one and the next
// request starts there too: with one of two targets failing, every other
// request (not every one) pays a failed attempt.
func (r *RoundRobin) PickEligible(ctx *RouteContext, _ []uint64, eligible Eligible) (int, bool) {
	var start int
	if ctx != nil && ctx.Retry {
		start = int(r.next.Load() % uint64(r.n))
	} else {
		start = int((r.next.Add(1) - 1) % uint64(r.n))
	}
	for k := 0; k < r.n; k++ {
		i := (start + k) % r.n
		if isEligible(eligible, i) {
			return i, true
		}
	}
	return 0, false
}

// Observe implements LoadBalancer; round_robin learns nothing.
func (*RoundRobin) Observe(int, *RouteContext) {}
