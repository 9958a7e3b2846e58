package router

import "github.com/rolter/rolter/strategies"

// EngineView is the router's window on mesh-wide engine load. The cluster
// package implements it over gossiped sidecar summaries.
//
// Load is called on the request hot path, concurrently, once per target of
// the addressed pool per attempt: it must read in-process state only, never
// block and never allocate. queue is the engine's running + waiting
// requests as last reported; ok is false when the mesh has no fresh
// summary for apiBase (missing, stale or degraded), in which case the
// router uses its own in-flight count alone. The load a strategy sees for
// a target is max(own in-flight, engine queue): the engine's queue already
// counts this router's requests, so adding the two would count them twice,
// while the maximum still shows other routers' traffic as soon as the
// summary carries it and our own fresh requests before it does.
type EngineView interface {
	Load(apiBase string) (queue uint64, ok bool)
}

// SourceFactory hands a pool's strategies the out-of-band engine state they
// read (KV residency, LMCache occupancy, resident adapters). Apply calls
// Sources once per pool (each route, each provider group, each provider
// pin) while building a snapshot, never per request; apiBases is the pool's
// target list in target order, and the returned views answer by that index.
// Any return value may be nil (signal unavailable: the strategy stays
// neutral). Implementations must not block for long: Apply runs it inline.
type SourceFactory interface {
	Sources(apiBases []string) (strategies.Residency, strategies.CacheSignal, strategies.AdapterResidency)
}
