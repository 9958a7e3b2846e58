package adminapi

import gossip "github.com/rolter/rolter/cluster/mesh"

// MeshEngines is an EngineInventory over a router's gossip view: the one
// mapping from the mesh's engine snapshots to GET /api/v1/cluster's
// engines, shared by `rolter router` and the tests.
type MeshEngines struct{ View *gossip.View }

// Engines implements EngineInventory.
func (m MeshEngines) Engines() []EngineInfo {
	snap := m.View.Snapshot()
	out := make([]EngineInfo, 0, len(snap.Engines))
	for _, e := range snap.Engines {
		out = append(out, EngineInfo{
			NodeID: e.NodeID, EngineURL: e.EngineURL, Models: e.Models, State: e.State, AgeMS: e.AgeMS,
			ResidentBlocks: e.ResidentBlocks, Running: e.Running, Waiting: e.Waiting, KVUsage: e.KVUsage,
			LMCacheOccupancy: e.LMCacheOccupancy, Adapters: e.Adapters, MaxLoras: e.MaxLoras,
			RemoteInflight: e.RemoteInflight, QueuedPrefillTokens: e.QueuedPrefillTokens,
			// Residency comes from a KV-event stream while it is EXACT, or
			// DEGRADED with blocks still held; a silent sidecar is STALE.
			KVEvents:           e.State == gossip.StateExact.String() || e.State == gossip.StateDegraded.String() && e.ResidentBlocks > 0,
			LMCache:            e.LMCacheOccupancy != nil,
			PrefixCacheHitRate: e.PrefixCacheHitRate,
		})
	}
	return out
}
