package router

import "github.com/rolter/rolter/strategies"

// Two sources of engine state can feed one router: the mesh (sidecars
// beside the engines, gossiped) and the router's own background polls of
// the engines ([metrics_scrape], [providers.lmcache]). Where a sidecar
// reports an engine it wins: it scrapes more often, sees KV events and is
// what every router of the mesh agrees on. The router's own polls answer
// for engines no sidecar reports.

// EngineReporter is an optional capability of an EngineView, checked by
// type assertion: Reported says whether the engine at apiBase has a
// fresh report of its own (a live sidecar), as opposed to the view's
// estimate from other routers' in-flight counts. Like Load it runs on the
// request path: no blocking, no allocation.
type EngineReporter interface {
	Reported(apiBase string) bool
}

// PreferLoad returns an EngineView that answers from primary where it has
// fresh data for the engine and from secondary elsewhere. When primary is
// an EngineReporter that has no report for the engine, its estimate (other
// routers' in-flight requests) and secondary's (the scraped queue beyond
// this router's requests) count the same requests, so the larger wins.
// A nil argument yields the other.
func PreferLoad(primary, secondary EngineView) EngineView {
	switch {
	case primary == nil:
		return secondary
	case secondary == nil:
		return primary
	}
	p := preferLoad{primary: primary, secondary: secondary}
	p.reporter, _ = primary.(EngineReporter)
	if p.prefill, _ = primary.(PrefillView); p.prefill == nil {
		p.prefill, _ = secondary.(PrefillView)
	}
	if p.rank, _ = primary.(MeshRank); p.rank == nil {
		p.rank, _ = secondary.(MeshRank)
	}
	if p.inflight, _ = primary.(InflightView); p.inflight == nil {
		p.inflight, _ = secondary.(InflightView)
	}
	p.status[0], _ = primary.(StatusView)
	p.status[1], _ = secondary.(StatusView)
	return p
}

type preferLoad struct {
	primary, secondary EngineView
	reporter           EngineReporter // primary's capability, or nil
	prefill            PrefillView    // the first view's that has one, or nil
	rank               MeshRank       // likewise
	status             [2]StatusView  // primary's and secondary's, each may be nil
	inflight           InflightView   // the first view's that has one, or nil
}

// PeerInflight implements InflightView with the first view that offers it.
func (p preferLoad) PeerInflight(apiBase string) uint64 {
	if p.inflight == nil {
		return 0
	}
	return p.inflight.PeerInflight(apiBase)
}

// Routers implements MeshRank with the first view that offers it; alone
// (1, 0) without one.
func (p preferLoad) Routers() (live, rank int) {
	if p.rank == nil {
		return 1, 0
	}
	return p.rank.Routers()
}

// EngineStatus implements StatusView: the first view with a fresh report.
func (p preferLoad) EngineStatus(apiBase string) (uint64, float64, bool) {
	for _, v := range p.status {
		if v != nil {
			if w, kv, ok := v.EngineStatus(apiBase); ok {
				return w, kv, true
			}
		}
	}
	return 0, 0, false
}

// PeerPrefill implements PrefillView with the first view that offers it
// (the mesh: the engine polls know nothing of other routers).
func (p preferLoad) PeerPrefill(apiBase string) uint64 {
	if p.prefill == nil {
		return 0
	}
	return p.prefill.PeerPrefill(apiBase)
}

func (p preferLoad) Load(apiBase string) (uint64, bool) {
	if p.reporter == nil {
		if q, ok := p.primary.Load(apiBase); ok {
			return q, true
		}
		return p.secondary.Load(apiBase)
	}
	if p.reporter.Reported(apiBase) {
		return p.primary.Load(apiBase)
	}
	q1, ok1 := p.primary.Load(apiBase)
	q2, ok2 := p.secondary.Load(apiBase)
	if !ok1 {
		q1 = 0
	}
	if !ok2 {
		q2 = 0
	}
	return max(q1, q2), ok1 || ok2
}

// PreferSources returns a SourceFactory whose residency and adapter views
// are primary's (secondary's where primary has none) and whose LMCache
// signal answers from primary for a target where it is fresh, else from
// secondary. A nil argument yields the other.
func PreferSources(primary, secondary SourceFactory) SourceFactory {
	switch {
	case primary == nil:
		return secondary
	case secondary == nil:
		return primary
	}
	return preferSources{primary, secondary}
}

type preferSources struct{ primary, secondary SourceFactory }

func (p preferSources) Sources(apiBases []string) (strategies.Residency, strategies.CacheSignal, strategies.AdapterResidency) {
	r1, c1, a1 := p.primary.Sources(apiBases)
	r2, c2, a2 := p.secondary.Sources(apiBases)
	if r1 == nil {
		r1 = r2
	}
	if a1 == nil {
		a1 = a2
	}
	switch {
	case c1 == nil:
		c1 = c2
	case c2 != nil:
		c1 = preferCache{c1, c2}
	}
	return r1, c1, a1
}

type preferCache struct{ primary, secondary strategies.CacheSignal }

func (p preferCache) Occupancy(t int) (float64, bool, bool) {
	if o, avail, ok := p.primary.Occupancy(t); ok {
		return o, avail, true
	}
	return p.secondary.Occupancy(t)
}
