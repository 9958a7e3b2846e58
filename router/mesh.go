package router

import (
	"context"

	"github.com/rolter/rolter/strategies"
)

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

// LoadKnower is an optional capability of an EngineView, checked by type
// assertion: KnowsLoads false means Load answers ok = false for every
// api_base now (nothing scraped, nothing heard), so a pick need not ask it
// target by target. Same contract as Load.
type LoadKnower interface {
	KnowsLoads() bool
}

// PrefillView is an optional capability of an EngineView, checked by type
// assertion: the prompt tokens the other routers last reported as queued
// for prefill on the engine at apiBase (their in-flight requests without
// a first token, each counted as its prompt minus the prefix resident when
// it was picked). The router adds its own sum for
// RouteContext.QueuedPrefill. Same contract as Load: hot path, in-process
// state only, no blocking, no allocation; 0 when unknown.
type PrefillView interface {
	PeerPrefill(apiBase string) uint64
}

// MeshRank is an optional capability of an EngineView, checked by type
// assertion: how many routers the mesh has, this one included, and this
// router's rank among them (admission spreads the pool's waiters over the
// live count; the order of same-instant picks by rank is
// router/meshstate's, behind PickHold). Same contract as Load: hot path,
// in-process state only, no blocking, no allocation.
type MeshRank interface {
	Routers() (live, rank int)
}

// InflightView is an optional capability of an EngineView, checked by
// type assertion: Σ over the other routers of their last gossiped
// in-flight requests on the engine at apiBase (0 when unknown). Admission
// counts an engine's load as this plus the router's own in-flight: unlike
// Load's fold, it does not wait for the engine's next status report to
// see a slot free. Same contract as Load.
type InflightView interface {
	PeerInflight(apiBase string) uint64
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

// PickHold is an optional capability of a Learner, checked by type
// assertion: Wait holds a request before its first pick while the other
// routers' picks of the same instant are still on their way
// (router/meshstate's Hold: at most a few milliseconds, and only when
// this router picked just before and has heard nothing since); the
// Learner's Observed marks each pick. Wait returns ctx's error when the
// client leaves first, and the request ends at once.
type PickHold interface {
	Wait(ctx context.Context) error
}

// BaseLoad is this router's own load on one provider api_base.
type BaseLoad struct {
	Inflight uint64 // attempts in flight
	Prefill  uint64 // their prompt tokens still waiting for a first token
	// Waiting is the admission waiters by band for the pools the api_base
	// serves (admission.go, admissionWaiting).
	Waiting [3]uint64
}

// LoadsByBase returns this router's in-flight attempts and queued prefill
// per provider api_base, summed over the running snapshot's targets (a
// target shared by several pools counts once). The mesh gossips them to
// the other routers. It rearms LoadChanges.
func (s *Server) LoadsByBase() map[string]BaseLoad {
	s.tracker.Rearm()
	out := map[string]BaseLoad{}
	s.eachTarget(func(t *target) {
		l := out[t.provider.apiBase]
		l.Inflight += t.stats.InFlight()
		l.Prefill += t.stats.QueuedPrefill()
		out[t.provider.apiBase] = l
	})
	s.admissionWaiting(out)
	return out
}

// LoadChanges returns a channel that receives after this router's
// in-flight attempts or queued prefill changed on some target (a pick, a
// first token, an end) since LoadsByBase last read them: the mesh
// publishes on it (strategies.Tracker.Changes). One goroutine should
// receive, and call LoadsByBase after each receive.
func (s *Server) LoadChanges() <-chan struct{} { return s.tracker.Changes() }

// InflightByBase returns LoadsByBase's in-flight counts alone (what the
// router's own engine polls subtract from an engine's queue).
func (s *Server) InflightByBase() map[string]uint64 {
	out := map[string]uint64{}
	s.eachTarget(func(t *target) { out[t.provider.apiBase] += t.stats.InFlight() })
	return out
}

// QueuedPrefill returns, per target label, the queued-prefill estimate the
// router's strategies see: its own attempts' plus the other routers'.
func (s *Server) QueuedPrefill() map[string]uint64 {
	out := map[string]uint64{}
	pv, _ := s.engine.(PrefillView)
	s.eachTarget(func(t *target) {
		n := t.stats.QueuedPrefill()
		if pv != nil {
			n += pv.PeerPrefill(t.provider.apiBase)
		}
		out[t.label] = n
	})
	return out
}

// eachTarget calls f once per distinct target (by stats) of the running
// snapshot.
func (s *Server) eachTarget(f func(t *target)) {
	sn := s.snap.Load()
	if sn == nil {
		return
	}
	seen := map[*strategies.TargetStats]bool{}
	add := func(pools map[string]*pool) {
		for _, p := range pools {
			for i := range p.targets {
				t := &p.targets[i]
				if seen[t.stats] {
					continue
				}
				seen[t.stats] = true
				f(t)
			}
		}
	}
	add(sn.routes)
	add(sn.groups)
	add(sn.pins)
}
