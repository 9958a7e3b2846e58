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
// must not allocate on the hot path (BenchmarkPick proves 0 allocs/op for
// every strategy; Observe allocates only to remember prompt bytes, session
// keys or adapter names it has not seen before).
//
// The strategies, each documented on its type or constructor with its
// formula and inputs (load_i is loads[i]; "least load" is 1 − load_i / max
// load over the eligible targets):
//
//	round_robin          n-th pick → n mod N, skipping ineligible targets
//	random               uniform over eligible targets
//	power_of_two         two distinct uniform draws, the less loaded wins
//	consistent_hash      100 points per target, 8-probe lookup of SessionKey → PromptDigest → Prompt
//	cache_aware          prefix-trie match ≥ 0.5 pins unless load > 2 and > 1.5 × least; else least load, least warm
//	weighted             nginx smooth weighted round-robin
//	pipeline             1·session + 1·weight/max + 1·least load + 1·prefix fraction, argmax, random ties
//	cheapest             1·min price/price + 0.25·least load
//	fastest              1·min EWMA/EWMA + 0.25·least load
//	precise_cache_aware  1·resident leading blocks/blocks + 0.25·least load
//	lmcache_aware        1·(1 − occupancy) + 0.25·least load
//	adaptive             policy blend of latency, cost and load; warm-up, exploration, pipeline fallback
//	lora_aware           3·adapter resident + 1·prefix fraction + 1·least load
//	predicted_latency    1·min prediction/prediction (NLMS, ≥ 8 successes) + 0.25·least load
//
// Every strategy restricts itself to the eligible targets before it
// compares anything, so an ineligible target neither wins nor shifts a
// normalisation, a tie or a load guard.
//
// Mesh hooks: cache_aware and the pipeline stacks (pipeline, lora_aware,
// adaptive's fallback) expose ObservePrefixRemote(target, prefix), and the
// stacks with session affinity expose PinSession(key, target, at), so the
// cluster layer can import what other routers observed; a consumer
// declares the one-method interface it needs and type-asserts.
package strategies
