package strategies

// LoadBalancer picks one of a route's targets for a request.
//
// Every method is called concurrently from request goroutines and must not
// block on I/O. Indices are positions in the route's target list as given to
// Build; loads[i] is the load the router currently attributes to target i
// (its own in-flight requests folded with the engine queue depth and the
// other routers' in-flight counts when the mesh knows them).
type LoadBalancer interface {
	// Name is the strategy's registered name, e.g. "round_robin".
	Name() string
	// Pick returns the chosen target, or ok=false when there is none.
	Pick(ctx *RouteContext, loads []uint64) (target int, ok bool)
	// PickEligible is Pick restricted to the targets for which eligible
	// returns true (not tried, not parked, healthy, breaker not open,
	// allowed to the key). An ineligible target is never returned and never
	// shapes the comparison. A nil eligible means every target is eligible.
	// Strategies without their own notion of eligibility get the seed's
	// default behaviour through DefaultPickEligible.
	PickEligible(ctx *RouteContext, loads []uint64, eligible Eligible) (target int, ok bool)
	// Observe records that target served ctx (learning strategies such as
	// cache_aware update their affinity state here). It is called once the
	// target has been chosen for an attempt.
	Observe(target int, ctx *RouteContext)
}

// Eligible is the router's eligibility mask for the current attempt: OK
// reports whether target i may take it. A nil Eligible admits every
// target. It is an interface, not a func, so that the router's request
// state can be the mask itself: a func value closing over it would be a
// heap allocation per pick (it escapes into PickEligible). OK is called
// from the picking goroutine only, during PickEligible, and must not block.
type Eligible interface {
	OK(i int) bool
}

// EligibleFunc is an Eligible from a func; a nil EligibleFunc admits every
// target.
type EligibleFunc func(i int) bool

// OK implements Eligible.
func (f EligibleFunc) OK(i int) bool { return f == nil || f(i) }

// isEligible reports whether target i is eligible under e (nil: all are).
func isEligible(e Eligible, i int) bool { return e == nil || e.OK(i) }

// DefaultPickEligible is the seed's default PickEligible: it calls Pick and
// returns the result only when that target is eligible; otherwise it falls
// back to the first eligible target in index order, so a caller never
// receives an ineligible index. Strategies in this package override it with
// an eligibility-aware pick; it exists for external LoadBalancers.
func DefaultPickEligible(lb LoadBalancer, ctx *RouteContext, loads []uint64, eligible Eligible) (int, bool) {
	if t, ok := lb.Pick(ctx, loads); ok && isEligible(eligible, t) {
		return t, true
	}
	for i := range loads {
		if isEligible(eligible, i) {
			return i, true
		}
	}
	return 0, false
}

// Completer is an optional LoadBalancer capability: the router calls
// Served once per request the pool served successfully, with the target
// that served it (after the response ended; retries that failed are not
// reported). adaptive counts its evidence this way, per route, rather than
// from target-wide counters other pools share. It must be cheap and must
// not block.
type Completer interface {
	Served(target int)
}
