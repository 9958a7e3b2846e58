package sidecar

import (
	"time"

	"github.com/rolter/rolter/cluster/mesh"
)

// The residency a sidecar publishes is as trustworthy as its state, a
// mesh.ResidencyState: mesh.StateUnknown (no event stream seen yet), mesh.StateExact
// (every event since the engine's cache was last empty applied in
// sequence: the residency equals the engine's) or mesh.StateDegraded (events
// were lost: an unrepaired gap, a malformed batch, a stream joined
// mid-way; a best effort, never to be scored as exact).

// Delta is one batch of residency changes of one engine, in block keys
// (package kvblock). Deltas of one Epoch have consecutive Versions; a
// consumer that sees a Version other than last+1, or a new Epoch, has missed
// something and must wait for a Snapshot. Cleared means: drop every key held
// for this engine before applying Added. The slices belong to the receiver.
type Delta struct {
	// Epoch identifies the sidecar incarnation (its start time, unix ns);
	// it changes when the sidecar restarts.
	Epoch   uint64
	Version uint64
	Added   []uint64
	Removed []uint64
	Cleared bool
	State   mesh.ResidencyState
}

// Snapshot is the full residency of one engine at Version: applying every
// later Delta of the same Epoch to Keys gives the current residency.
type Snapshot struct {
	Epoch   uint64
	Version uint64
	Keys    []uint64
	State   mesh.ResidencyState
}

// EngineStatus is what the sidecar learns from the engine's /metrics and the
// LMCache signal. A zero field means "not reported"; the OK flags say
// whether the source answered recently enough to be used at all.
type EngineStatus struct {
	Running, Waiting uint64
	// KVUsage is the engine's KV cache usage in [0,1].
	KVUsage       float64
	PrefixHits    uint64
	PrefixQueries uint64
	BlockSize     int
	NumGPUBlocks  int
	MaxLoRAs      int
	// Adapters are the LoRA adapters known to be resident (sorted,
	// deduplicated): loaded per a fresh /v1/models, or with running or
	// waiting requests per fresh /metrics (vllm:lora_requests_info).
	Adapters []string
	// Models are the base models the engine serves (/v1/models, last
	// successful answer).
	Models []string
	// MetricsOK: the last scrape succeeded and is younger than the stale
	// limit; ScrapedAt is when it happened.
	MetricsOK bool
	ScrapedAt time.Time
	// LMCache: occupancy in [0,1], whether the cache accepts entries, and
	// whether the signal is fresh (LMCacheOK) as of LMCacheAt.
	LMCacheOccupancy float64
	LMCacheAvailable bool
	LMCacheOK        bool
	LMCacheAt        time.Time
	// Residency state and size at the time of the status.
	State          mesh.ResidencyState
	ResidentBlocks int
}

// Publisher receives the sidecar's summaries, typically to gossip them.
// Both methods are called from the sidecar's own goroutines and must not
// block: queue, coalesce or drop, but return promptly. They are never called
// concurrently with themselves.
type Publisher interface {
	PublishResidency(Delta)
	PublishStatus(EngineStatus)
}

// SnapshotPublisher is an optional capability of a Publisher: when
// implemented, the sidecar also pushes its full residency every
// Config.FullStateInterval (same non-blocking contract).
type SnapshotPublisher interface {
	PublishSnapshot(Snapshot)
}
