package strategies

// The interfaces below are how out-of-band engine state reaches a strategy.
// The router's cluster view implements them over gossiped sidecar summaries;
// tests use fakes. Target indices are the route's. Every method is called on
// the hot path: it must read in-process state only, never block, and never
// allocate. "Unknown" (ok=false) covers missing, stale, degraded and
// malformed state; strategies treat it as neutral and let load decide.

// Residency answers precise_cache_aware's question: how many of the leading
// block keys of this request are resident on target t.
type Residency interface {
	// ResidentPrefix returns how many of keys, from the first, are resident
	// on target t. ok is false when t's residency view is not EXACT.
	ResidentPrefix(t int, keys []uint64) (n int, ok bool)
}

// CacheSignal is lmcache_aware's input: the LMCache CPU tier of target t.
type CacheSignal interface {
	// Occupancy returns occupancy in [0,1] and whether the cache accepts
	// entries. ok is false for a missing, failed or stale signal.
	Occupancy(t int) (occupancy float64, available bool, ok bool)
}

// AdapterResidency is what the mesh knows of the LoRA adapters resident on
// target t (from the engine's lora metrics), when it knows.
type AdapterResidency interface {
	// AdapterResident reports whether adapter is loaded on t; known is false
	// when the mesh has no fresh adapter information for t.
	AdapterResident(t int, adapter string) (resident, known bool)
}

// ResidencyBatch is an optional capability of a Residency, checked by type
// assertion: one call answers for every target, which lets an index keyed
// by block (key → set of targets holding it) walk the keys once instead of
// once per target. precise_cache_aware uses it when present.
type ResidencyBatch interface {
	// ResidentPrefixes sets out[t], for every target t < len(out), to how
	// many of keys, from the first, are resident on t, or to -1 when t's
	// residency view is not EXACT.
	ResidentPrefixes(keys []uint64, out []int)
}
