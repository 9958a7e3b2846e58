package mesh

import (
	"math"
	"slices"
	"strings"
)

// Snapshot is the JSON body of GET /api/v1/cluster.
type Snapshot struct {
	Self    string           `json:"self"`
	Routers []RouterInfo     `json:"routers"`
	Engines []EngineSnapshot `json:"engines"`
}

// RouterInfo describes one router in the pool.
type RouterInfo struct {
	NodeID  string `json:"node_id"`
	Address string `json:"address"` // gossip host:port
	Build   string `json:"build"`
	// RaftAddr and AdminAddr are as announced (see Meta).
	RaftAddr  string `json:"raft_addr,omitempty"`
	AdminAddr string `json:"admin_addr,omitempty"`
	// ConfigVersion is the config_version the router last reported having
	// applied (0: none reported yet).
	ConfigVersion uint64 `json:"config_version,omitempty"`
}

// EngineSnapshot describes one engine as this router sees it.
type EngineSnapshot struct {
	NodeID           string   `json:"node_id"`
	EngineURL        string   `json:"engine_url"`
	Models           []string `json:"models"`
	State            string   `json:"state"`
	AgeMS            int64    `json:"age_ms"`
	ResidentBlocks   int      `json:"resident_blocks"`
	Running          uint64   `json:"running"`
	Waiting          uint64   `json:"waiting"`
	KVUsage          float64  `json:"kv_usage"`
	LMCacheOccupancy *float64 `json:"lmcache_occupancy"`
	Adapters         []string `json:"adapters"`
	MaxLoras         int      `json:"max_loras"`
	RemoteInflight   int64    `json:"remote_inflight"`
	// QueuedPrefillTokens is this router's estimate of the prompt tokens
	// waiting for prefill on the engine: its own requests without a first
	// token, as it last published them, plus the other routers' sums.
	QueuedPrefillTokens uint64 `json:"queued_prefill_tokens"`
	// PrefixCacheHitRate is the engine's prefix-cache hits over queries
	// since it started (its vllm:prefix_cache_* counters); nil when the
	// status is not fresh or nothing was queried yet.
	PrefixCacheHitRate *float64 `json:"prefix_cache_hit_rate"`
	// KVEvents: the engine's residency comes from a KV-event stream
	// (EXACT, or DEGRADED with blocks still held; a silent sidecar is
	// STALE). LMCache: a fresh LMCache signal reports its occupancy.
	KVEvents bool `json:"kv_events"`
	LMCache  bool `json:"lmcache"`
}

// EngineInfo is a discovered engine.
type EngineInfo struct {
	NodeID    string
	EngineURL string
	Models    []string
	State     ResidencyState
}

// Engines lists the live (non-STALE) engines serving model, sorted by URL;
// an empty model lists every live engine. Pair with Changed to follow
// discovery.
func (v *View) Engines(model string) []EngineInfo {
	var out []EngineInfo
	for _, e := range *v.engines.Load() {
		e.mu.Lock()
		live := e.alive && ResidencyState(e.state.Load()) != StateStale
		info := EngineInfo{NodeID: e.meta.NodeID, EngineURL: e.url, Models: slices.Clone(e.meta.Models), State: ResidencyState(e.state.Load())}
		e.mu.Unlock()
		if live && (model == "" || slices.Contains(info.Models, model)) {
			out = append(out, info)
		}
	}
	slices.SortFunc(out, func(a, b EngineInfo) int { return strings.Compare(a.EngineURL, b.EngineURL) })
	return out
}

// Snapshot returns the router's picture of the pool for the admin API.
func (r *Router) Snapshot() Snapshot {
	v := r.view
	s := Snapshot{Self: r.cfg.Name, Routers: []RouterInfo{}, Engines: []EngineSnapshot{}}
	var names []string // memberlist names, index-aligned with s.Routers
	r.eachMember(func(_ string, m member) {
		if m.meta.Role == RoleRouter {
			s.Routers = append(s.Routers, RouterInfo{NodeID: m.meta.NodeID, Address: m.node.Address(), Build: m.meta.Build,
				RaftAddr: m.meta.RaftAddr, AdminAddr: m.meta.AdminAddr})
			names = append(names, m.node.Name)
		}
	})
	for i, name := range names {
		s.Routers[i].ConfigVersion, _ = r.share.configVersion(name)
	}
	now := r.now().UnixNano()
	for _, e := range *v.engines.Load() {
		e.mu.Lock()
		es := EngineSnapshot{
			NodeID: e.meta.NodeID, EngineURL: e.url, Models: slices.Clone(e.meta.Models),
			State: ResidencyState(e.state.Load()).String(), Adapters: []string{},
			RemoteInflight:      e.remote.Load(),
			QueuedPrefillTokens: e.remotePrefill.Load() + e.ownPrefill.Load(),
		}
		if es.Models == nil {
			es.Models = []string{}
		}
		if last := e.lastMsg.Load(); last > 0 {
			es.AgeMS = max(now-last, 0) / 1e6
		} else {
			es.AgeMS = -1
		}
		if set := e.set.Load(); set != nil {
			es.ResidentBlocks = set.Len()
		}
		if e.fresh.Load() {
			es.Running, es.Waiting = e.running.Load(), e.waiting.Load()
			es.KVUsage = math.Float64frombits(e.kvUsage.Load())
			if e.lmKnown.Load() {
				occ := math.Float64frombits(e.lmOcc.Load())
				es.LMCacheOccupancy = &occ
			}
			if a := e.adapters.Load(); a != nil {
				es.Adapters = append(es.Adapters, a.names...)
				es.MaxLoras = a.maxLoras
			}
			if q := e.status.PrefixQueries; q > 0 {
				rate := min(float64(e.status.PrefixHits)/float64(q), 1)
				es.PrefixCacheHitRate = &rate
			}
		}
		e.mu.Unlock()
		es.KVEvents = es.State == StateExact.String() || es.State == StateDegraded.String() && es.ResidentBlocks > 0
		es.LMCache = es.LMCacheOccupancy != nil
		s.Engines = append(s.Engines, es)
	}
	slices.SortFunc(s.Routers, func(a, b RouterInfo) int { return strings.Compare(a.NodeID, b.NodeID) })
	slices.SortFunc(s.Engines, func(a, b EngineSnapshot) int { return strings.Compare(a.EngineURL, b.EngineURL) })
	return s
}

// ResidencyBytes returns the memory held by the view's residency index and
// the number of resident (engine, block) pairs it holds.
func (r *Router) ResidencyBytes() (bytes, blocks int) { return r.view.residencyBytes() }

func (v *View) residencyBytes() (bytes, blocks int) {
	for _, e := range *v.engines.Load() {
		if set := e.set.Load(); set != nil {
			bytes += set.Bytes()
			blocks += set.Len()
		}
	}
	return bytes, blocks
}
