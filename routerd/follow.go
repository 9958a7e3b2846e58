package routerd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/rolter/rolter/cluster"
	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/router"
)

// The config follower: every config_version the Raft store commits
// becomes a data-plane snapshot (follow → applyState → discover →
// ApplyVersion). The interfaces below are what it consumes; the process
// passes the cluster.Store, the router.Server, the scrape.Poller and the
// mesh.View, the tests pass fakes.

// store is the replicated control plane as the follower reads it.
// State and Info are called from the follower's goroutine and from
// /readyz; they must not block on the network.
type store interface {
	// State is the current immutable state; its ConfigVersion is the
	// version the follower applies.
	State() *cluster.State
	// Watch returns a channel that receives after every change of the
	// state (buffered: a change made while nobody listens is kept).
	Watch() <-chan struct{}
	// Info names the Raft leader ("" while none is known).
	Info() cluster.Info
}

// dataPlane is the router.Server: it builds and swaps in the snapshot of
// cfg, labelled version. An error leaves the running snapshot.
type dataPlane interface {
	ApplyVersion(cfg *config.Config, version uint64) error
}

// enginePolls is the router's own engine polls ([metrics_scrape],
// [providers.lmcache]), re-targeted at every apply.
type enginePolls interface {
	Set(cfg *config.Config, lmcache map[string]*config.LMCache)
}

// fileSync syncs the entries a reloaded rolter.toml declares into the
// cluster (cluster.FileSyncer).
type fileSync interface {
	Kick(file *config.Config)
}

// discovery is the gossip view as discovery reads it: the live engines
// sidecars announce for a model, and a channel closed at the next change
// of that set. Engines and Changed never block.
type discovery interface {
	Engines(model string) []mesh.EngineInfo
	Changed() <-chan struct{}
}

// versionAnnouncer tells the pool which config_version this router runs
// (the Mesh page compares them).
type versionAnnouncer interface {
	PublishConfigVersion(version uint64)
}

// poolVersions is the gossip pool as readiness reads it: the
// config_version every router of the pool last announced
// (mesh.Router.Snapshot; Routers[i].ConfigVersion). Snapshot never blocks.
type poolVersions interface {
	Snapshot() mesh.Snapshot
}

// follower applies the replicated state to the data plane.
type follower struct {
	store store
	plane dataPlane
	polls enginePolls
	files fileSync
	log   *slog.Logger
	// engines and announce are the gossip view; nil without gossip
	// (no discovery).
	engines  discovery
	announce versionAnnouncer
	pool     poolVersions

	mu      sync.Mutex
	base    *config.Config // process-local sections (retry, breaker, health, timeouts, limits)
	applied uint64         // config_version last applied to the data plane
	// discovered fingerprints the discover routes' targets last applied.
	discovered string
	stale      bool // base changed since the last apply
	reload     chan struct{}
}

func newFollower(s store, plane dataPlane, polls enginePolls, files fileSync, base *config.Config, log *slog.Logger) *follower {
	return &follower{store: s, plane: plane, polls: polls, files: files, base: base, log: log, reload: make(chan struct{}, 1)}
}

// ready is the control plane's /readyz condition: the data plane runs a
// snapshot of the replicated config. A router that knows no Raft leader
// (the minority side of a partition) keeps serving that snapshot: it is
// ready, degraded, and says which config_version it serves. So is one
// that runs an older config_version than another router of the pool
// announces by gossip: after a partition heals, the leader's replication
// to it is backed off for seconds (RELIABILITY.md, scenario 18) while it
// already knows the leader.
func (f *follower) ready() error {
	f.mu.Lock()
	applied := f.applied
	f.mu.Unlock()
	leader := f.store.Info().Leader
	switch {
	case applied == 0 && leader == "":
		return errors.New("no raft leader")
	case applied == 0:
		return errors.New("replicated config not applied yet")
	case leader == "":
		return fmt.Errorf("%w: no raft leader; serving config_version %d, the last applied, until one is reachable "+
			"(admin writes answer 503 meanwhile)", router.ErrDegraded, applied)
	}
	if f.pool == nil {
		return nil
	}
	var ahead mesh.RouterInfo
	for _, r := range f.pool.Snapshot().Routers {
		if r.ConfigVersion > max(applied, ahead.ConfigVersion) {
			ahead = r
		}
	}
	if ahead.ConfigVersion > 0 {
		return fmt.Errorf("%w: catching up: serving config_version %d while router %s runs %d "+
			"(this router's copy of the replicated config is behind)", router.ErrDegraded, applied, ahead.NodeID, ahead.ConfigVersion)
	}
	return nil
}

// setBase takes a reloaded rolter.toml (SIGHUP): its process-local
// sections replace the running ones (follow re-applies), and the entries
// it declares are synced into the cluster.
func (f *follower) setBase(base *config.Config) {
	f.mu.Lock()
	f.base = base
	f.mu.Unlock()
	f.files.Kick(base)
	f.reapply()
}

// reapply asks follow to rebuild the data plane from the state and the
// current base (the file is unchanged: nothing to sync).
func (f *follower) reapply() {
	f.mu.Lock()
	f.stale = true
	f.mu.Unlock()
	select {
	case f.reload <- struct{}{}:
	default:
	}
}

// follow applies the replicated state to the data plane now and after
// every config_version bump, until ctx ends.
func (f *follower) follow(ctx context.Context) {
	watch := f.store.Watch()
	for {
		f.applyState()
		select {
		case <-ctx.Done():
			return
		case <-watch:
		case <-f.reload:
		}
	}
}

// applyState builds a snapshot from the current state when its
// config_version (or the local base) changed. A state that fails to build
// keeps the running snapshot.
func (f *follower) applyState() {
	st := f.store.State()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !st.Seeded || st.ConfigVersion == 0 || (st.ConfigVersion == f.applied && !f.stale) {
		return
	}
	cfg := st.Config(f.base)
	if f.engines != nil {
		cfg = discover(cfg, f.engines.Engines)
	}
	discovered := discoveredKey(cfg)
	f.polls.Set(cfg, f.base.LMCacheTables())
	if err := f.plane.ApplyVersion(cfg, st.ConfigVersion); err != nil {
		f.log.Error("replicated config does not build; keeping the running snapshot",
			"config_version", st.ConfigVersion, "err", err)
		return
	}
	f.applied, f.stale, f.discovered = st.ConfigVersion, false, discovered
	if f.announce != nil {
		f.announce.PublishConfigVersion(st.ConfigVersion)
	}
}

// rediscover re-applies the replicated config whenever the set of live
// engines (or their models) changes, so discover routes follow the pool.
// It needs engines.
func (f *follower) rediscover(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.engines.Changed():
		}
		// Rebuilding the snapshot resets the balancers' local state
		// (cache_aware's prefix index among it): only when a discover
		// route's targets change.
		f.mu.Lock()
		base, applied := f.base, f.discovered
		f.mu.Unlock()
		st := f.store.State()
		if !st.Seeded || st.ConfigVersion == 0 {
			continue
		}
		if discoveredKey(discover(st.Config(base), f.engines.Engines)) != applied {
			f.reapply()
		}
	}
}
