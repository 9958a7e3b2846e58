// Package strategies owns the load-balancing strategies of rolter: the
// LoadBalancer interface every strategy implements, the RouteContext a pick
// reads, the per-target learned state (Tracker) that survives config reloads,
// the small interfaces through which out-of-band engine state (KV residency,
// LMCache occupancy, resident adapters) reaches a strategy, and the explicit
// registry that builds a balancer by name.
//
// The package imports the standard library only (plus kvblock for block
// keys). Nothing here does network I/O: external state is read from
// in-process views that background loops keep current.
//
// Concurrency: a balancer is built once per route (and per provider group)
// per config snapshot and is called concurrently by every request on that
// route. Pick, PickEligible and Observe must be safe for concurrent use and
// must not allocate on the hot path.
package strategies
