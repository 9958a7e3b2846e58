package router

import "github.com/rolter/rolter/strategies"

// EngineView is the router's window on mesh-wide engine load. The cluster
// package implements it over gossiped sidecar summaries.
//
// Load is called on the request hot path, concurrently, once per target of
// the addressed pool per attempt: it must read in-process state only, never
// block and never allocate. queue is the load on the engine beyond this
// router's own in-flight requests; ok is false when the mesh knows nothing
// fresh for apiBase (no live sidecar and no other router's count), in
// which case the router uses its own in-flight count alone. The load a
// strategy sees for a target is own in-flight + queue. The mesh computes
// queue as max(engine running + waiting − our published in-flight, Σ other
// routers' gossiped in-flight): the engine's queue and the routers'
// in-flight counts are two estimates of the same requests, so adding them
// would count every other router's requests twice.
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

// Learner carries what the pools' balancers learn between routers: prefix
// observations and session pins (see the mesh hooks in package
// strategies). Recall runs once per request before the first pick, so the
// balancer can import what other routers learned about this request's
// prompt or session; Observed runs after the balancer observed a pick of
// the target at apiBase. Both run on the request path: they must not block
// on the network.
type Learner interface {
	Recall(pool string, lb strategies.LoadBalancer, apiBases []string, rc *strategies.RouteContext)
	Observed(pool string, apiBase string, rc *strategies.RouteContext)
}

// InflightByBase returns this router's in-flight requests per provider
// api_base, summed over the running snapshot's targets (a target shared by
// several pools counts once). The mesh gossips it to the other routers.
func (s *Server) InflightByBase() map[string]uint64 {
	sn := s.snap.Load()
	out := map[string]uint64{}
	if sn == nil {
		return out
	}
	seen := map[*strategies.TargetStats]bool{}
	add := func(pools map[string]*pool) {
		for _, p := range pools {
			for _, t := range p.targets {
				if seen[t.stats] {
					continue
				}
				seen[t.stats] = true
				out[t.provider.apiBase] += t.stats.InFlight()
			}
		}
	}
	add(sn.routes)
	add(sn.groups)
	add(sn.pins)
	return out
}
