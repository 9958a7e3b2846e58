package sidecar

import (
	"sync/atomic"

	"github.com/rolter/rolter/cluster/mesh"
)

// meshPublisher hands the sidecar's summaries to the gossip publisher.
// The sidecar's UNKNOWN residency (no event stream yet) is published as
// DEGRADED: the set is then empty or partial, and a router must never
// score it as exact.
type meshPublisher struct {
	pub *mesh.Publisher
	// streaming: a residency delta or snapshot was published; from then
	// on the deltas carry the state.
	streaming atomic.Bool
}

var (
	_ Publisher         = (*meshPublisher)(nil)
	_ SnapshotPublisher = (*meshPublisher)(nil)
)

// meshState is the state the publisher is told: anything but EXACT is
// DEGRADED, since the publisher reads UNKNOWN as "no change".
func meshState(s mesh.ResidencyState) mesh.ResidencyState {
	if s == mesh.StateExact {
		return mesh.StateExact
	}
	return mesh.StateDegraded
}

// PublishResidency implements Publisher.
func (p *meshPublisher) PublishResidency(d Delta) {
	p.streaming.Store(true)
	p.pub.Apply(mesh.ResidencyDelta{Added: d.Added, Removed: d.Removed, Cleared: d.Cleared, State: meshState(d.State)})
}

// PublishSnapshot implements SnapshotPublisher: the publisher's
// set becomes the snapshot (only the difference travels).
func (p *meshPublisher) PublishSnapshot(s Snapshot) {
	p.streaming.Store(true)
	p.pub.Reset(s.Keys, meshState(s.State))
}

// PublishStatus implements Publisher.
func (p *meshPublisher) PublishStatus(s EngineStatus) {
	st := mesh.EngineStatus{
		MetricsOK: s.MetricsOK, PrefixHits: s.PrefixHits, PrefixQueries: s.PrefixQueries,
		BlockSize: s.BlockSize, MaxLoras: s.MaxLoRAs, Adapters: s.Adapters,
		LMCacheKnown: s.LMCacheOK,
	}
	if s.MetricsOK {
		st.Running, st.Waiting, st.KVUsage = s.Running, s.Waiting, s.KVUsage
	}
	if s.LMCacheOK {
		st.LMCacheOccupancy, st.LMCacheAvailable = s.LMCacheOccupancy, s.LMCacheAvailable
	}
	p.pub.SetStatus(st)
	// No event stream yet: no delta will say so, the status does.
	if s.State == mesh.StateUnknown && !p.streaming.Load() {
		p.pub.Apply(mesh.ResidencyDelta{State: mesh.StateDegraded})
	}
}
