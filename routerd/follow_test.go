package routerd

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/rolter/rolter/cluster"
	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/router"
)

// fakeStore is the replicated state without Raft: set replaces the state
// and signals the watcher, as a committed change does.
type fakeStore struct {
	state  atomic.Pointer[cluster.State]
	leader atomic.Value // string
	watch  chan struct{}
}

func newFakeStore() *fakeStore {
	s := &fakeStore{watch: make(chan struct{}, 1)}
	s.state.Store(&cluster.State{})
	s.leader.Store("")
	return s
}

func (s *fakeStore) State() *cluster.State  { return s.state.Load() }
func (s *fakeStore) Watch() <-chan struct{} { return s.watch }
func (s *fakeStore) Info() cluster.Info     { return cluster.Info{Leader: s.leader.Load().(string)} }

// set commits a state at version v with routes.
func (s *fakeStore) set(v uint64, routes ...config.Route) {
	st := &cluster.State{ConfigVersion: v, Seeded: true, Providers: map[string]config.Provider{
		"a": {Name: "a", APIBase: "http://10.0.0.1:8000/v1"},
	}, Routes: map[string]config.Route{}}
	for _, r := range routes {
		st.Routes[r.Model] = r
	}
	s.state.Store(st)
	select {
	case s.watch <- struct{}{}:
	default:
	}
}

// applied is one snapshot the fake data plane built.
type applied struct {
	version uint64
	cfg     *config.Config
}

// fakePlane is the data plane: it records every ApplyVersion and fails
// the versions in refuse.
type fakePlane struct {
	mu     sync.Mutex
	got    []applied
	refuse map[uint64]bool
}

func (p *fakePlane) ApplyVersion(cfg *config.Config, v uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refuse[v] {
		return errors.New("does not build")
	}
	p.got = append(p.got, applied{v, cfg})
	return nil
}

func (p *fakePlane) applies() []applied {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.got)
}

func (p *fakePlane) last(t *testing.T) applied {
	t.Helper()
	got := p.applies()
	if len(got) == 0 {
		t.Fatal("nothing applied")
	}
	return got[len(got)-1]
}

type fakePolls struct{ sets atomic.Int64 }

func (p *fakePolls) Set(*config.Config, map[string]*config.LMCache) { p.sets.Add(1) }

type fakeFiles struct {
	mu     sync.Mutex
	kicked []*config.Config
}

func (f *fakeFiles) Kick(c *config.Config) {
	f.mu.Lock()
	f.kicked = append(f.kicked, c)
	f.mu.Unlock()
}

// fakeView is the gossip view: the engines per model and the change
// channel closed at every change, like mesh.View's.
type fakeView struct {
	mu        sync.Mutex
	engines   map[string][]mesh.EngineInfo
	changed   chan struct{}
	announced []uint64
	routers   []mesh.RouterInfo // the pool's routers and the versions they announced
}

func (v *fakeView) Snapshot() mesh.Snapshot {
	v.mu.Lock()
	defer v.mu.Unlock()
	return mesh.Snapshot{Routers: slices.Clone(v.routers)}
}

func newFakeView() *fakeView {
	return &fakeView{engines: map[string][]mesh.EngineInfo{}, changed: make(chan struct{})}
}

func (v *fakeView) Engines(model string) []mesh.EngineInfo {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.engines[model])
}

func (v *fakeView) Changed() <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.changed
}

func (v *fakeView) PublishConfigVersion(version uint64) {
	v.mu.Lock()
	v.announced = append(v.announced, version)
	v.mu.Unlock()
}

// setEngines replaces a model's engines and signals the change.
func (v *fakeView) setEngines(model string, es ...mesh.EngineInfo) {
	v.mu.Lock()
	v.engines[model] = es
	close(v.changed)
	v.changed = make(chan struct{})
	v.mu.Unlock()
}

type followerRig struct {
	store *fakeStore
	plane *fakePlane
	polls *fakePolls
	files *fakeFiles
	view  *fakeView
	f     *follower
}

// startFollower runs a follower (with rediscover when gossip is set) over
// fakes until the test's bubble ends.
func startFollower(t *testing.T, gossip bool) *followerRig {
	r := &followerRig{store: newFakeStore(), plane: &fakePlane{refuse: map[uint64]bool{}}, polls: &fakePolls{}, files: &fakeFiles{}}
	base := &config.Config{Retry: config.Retry{Attempts: 2}}
	r.f = newFollower(r.store, r.plane, r.polls, r.files, base, slog.New(slog.DiscardHandler))
	if gossip {
		r.view = newFakeView()
		r.f.engines, r.f.announce, r.f.pool = r.view, r.view, r.view
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); r.f.follow(ctx) }()
	if gossip {
		wg.Add(1)
		go func() { defer wg.Done(); r.f.rediscover(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return r
}

var staticRoute = config.Route{Model: "chat", Strategy: "round_robin", Targets: []config.Target{{Provider: "a", Model: "m"}}}

// TestReadyzSaysCatchingUpWhileThePoolRunsANewerVersion: a router that
// knows the leader but runs an older config_version than another router
// announces (its Raft log behind, as after a partition heals) is ready,
// degraded, and says so; it is plainly ready once it applied that version.
func TestReadyzSaysCatchingUpWhileThePoolRunsANewerVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startFollower(t, true)
		r.store.leader.Store("r1")
		r.store.set(3, staticRoute)
		synctest.Wait()
		r.view.mu.Lock()
		r.view.routers = []mesh.RouterInfo{{NodeID: "r1", ConfigVersion: 3}, {NodeID: "r3"}}
		r.view.mu.Unlock()
		if err := r.f.ready(); err != nil {
			t.Fatalf("ready with the pool on the same version (one not reporting): %v", err)
		}
		r.view.mu.Lock()
		r.view.routers = []mesh.RouterInfo{{NodeID: "r1", ConfigVersion: 7}, {NodeID: "r2", ConfigVersion: 9}, {NodeID: "r3", ConfigVersion: 3}}
		r.view.mu.Unlock()
		err := r.f.ready()
		if !errors.Is(err, router.ErrDegraded) || !strings.Contains(err.Error(), "catching up: serving config_version 3 while router r2 runs 9") {
			t.Fatalf("ready behind the pool: %v, want degraded, catching up from 3 to r2's 9", err)
		}
		r.store.set(9, staticRoute)
		synctest.Wait()
		if err := r.f.ready(); err != nil {
			t.Fatalf("ready once caught up: %v", err)
		}
	})
}

// TestFollowerAppliesEveryConfigVersion: nothing is served before the
// seed; then each committed config_version becomes one snapshot, /readyz
// waits for a leader and an applied version, and a version that does not
// build leaves the running one (and readiness) alone.
func TestFollowerAppliesEveryConfigVersion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startFollower(t, false)
		synctest.Wait()
		if got := r.plane.applies(); len(got) != 0 {
			t.Fatalf("applied %d snapshots before the seed", len(got))
		}
		if err := r.f.ready(); err == nil || err.Error() != "no raft leader" {
			t.Fatalf("ready before a leader: %v", err)
		}
		r.store.leader.Store("r1")
		if err := r.f.ready(); err == nil || err.Error() != "replicated config not applied yet" {
			t.Fatalf("ready before the seed: %v", err)
		}

		r.store.set(1, staticRoute)
		synctest.Wait()
		if a := r.plane.last(t); a.version != 1 || len(a.cfg.Routes) != 1 || a.cfg.Retry.Attempts != 2 {
			t.Fatalf("applied v%d with %d routes, retry attempts %d; want v1, the seed route and the local sections",
				a.version, len(a.cfg.Routes), a.cfg.Retry.Attempts)
		}
		if err := r.f.ready(); err != nil {
			t.Fatalf("ready after the seed: %v", err)
		}
		// Cut from the leader, it keeps serving v1 and says so.
		r.store.leader.Store("")
		if err := r.f.ready(); !errors.Is(err, router.ErrDegraded) || !strings.Contains(err.Error(), "serving config_version 1") {
			t.Fatalf("ready without a leader after the seed: %v, want degraded serving config_version 1", err)
		}
		r.store.leader.Store("r1")

		r.plane.refuse[2] = true
		r.store.set(2)
		synctest.Wait()
		if got := r.plane.applies(); len(got) != 1 {
			t.Fatalf("a version that does not build was applied: %d snapshots", len(got))
		}
		if err := r.f.ready(); err != nil {
			t.Fatalf("a refused version made the router unready: %v", err)
		}

		r.store.set(3, staticRoute, config.Route{Model: "more", Strategy: "round_robin", Targets: []config.Target{{Provider: "a", Model: "x"}}})
		synctest.Wait()
		if a := r.plane.last(t); a.version != 3 || len(a.cfg.Routes) != 2 {
			t.Fatalf("applied v%d with %d routes, want v3 with 2", a.version, len(a.cfg.Routes))
		}
		// A signal without a new version rebuilds nothing.
		r.store.set(3, staticRoute, config.Route{Model: "more", Strategy: "round_robin", Targets: []config.Target{{Provider: "a", Model: "x"}}})
		synctest.Wait()
		if got := r.plane.applies(); len(got) != 2 {
			t.Fatalf("%d snapshots after a repeated version, want 2", len(got))
		}
	})
}

// TestFollowerReloadReappliesWithTheNewFile: a SIGHUP's file replaces the
// local sections of the running snapshot at the same config_version, and
// its entries go to the file syncer.
func TestFollowerReloadReappliesWithTheNewFile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startFollower(t, false)
		r.store.set(4, staticRoute)
		synctest.Wait()
		file := &config.Config{Retry: config.Retry{Attempts: 5}}
		r.f.setBase(file)
		synctest.Wait()
		got := r.plane.applies()
		if len(got) != 2 || got[1].version != 4 || got[1].cfg.Retry.Attempts != 5 {
			t.Fatalf("after the reload: %d snapshots, last %+v", len(got), got[len(got)-1])
		}
		r.files.mu.Lock()
		defer r.files.mu.Unlock()
		if len(r.files.kicked) != 1 || r.files.kicked[0] != file {
			t.Fatalf("file syncer kicked %d times", len(r.files.kicked))
		}
	})
}

// TestDiscoveryFollowsThePool: a discover route's targets are the engines
// gossip announces for its model; the snapshot is rebuilt when they
// change and only then (a rebuild resets the balancers' learned state),
// and every applied version is announced to the pool.
func TestDiscoveryFollowsThePool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startFollower(t, true)
		r.view.setEngines("m", mesh.EngineInfo{NodeID: "e1", EngineURL: "http://10.0.0.1:8000", Models: []string{"m"}})
		synctest.Wait()
		r.store.set(1, staticRoute, config.Route{Model: "m", Strategy: "power_of_two", Discover: true})
		synctest.Wait()
		targets := func() []string {
			var out []string
			for _, rt := range r.plane.last(t).cfg.Routes {
				if rt.Model == "m" {
					for _, tg := range rt.Targets {
						out = append(out, tg.Provider)
					}
				}
			}
			return out
		}
		if got := targets(); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("discovered %v, want the provider whose api_base is the engine", got)
		}

		r.view.setEngines("m", mesh.EngineInfo{NodeID: "e1", EngineURL: "http://10.0.0.1:8000", Models: []string{"m"}},
			mesh.EngineInfo{NodeID: "e2", EngineURL: "http://10.0.0.2:8000", Models: []string{"m"}})
		synctest.Wait()
		got := r.plane.applies()
		if len(got) != 2 || got[1].version != 1 || !slices.Equal(targets(), []string{"a", "e2"}) {
			t.Fatalf("after a second engine joined: %d snapshots, targets %v", len(got), targets())
		}

		// An engine of another model joins: the discover route is unchanged.
		r.view.setEngines("other", mesh.EngineInfo{NodeID: "e3", EngineURL: "http://10.0.0.3:8000", Models: []string{"other"}})
		synctest.Wait()
		if got := r.plane.applies(); len(got) != 2 {
			t.Fatalf("an unrelated engine rebuilt the snapshot: %d snapshots", len(got))
		}

		r.view.setEngines("m")
		synctest.Wait()
		if got := r.plane.applies(); len(got) != 3 || len(targets()) != 0 {
			t.Fatalf("after the engines left: %d snapshots, targets %v", len(got), targets())
		}
		r.view.mu.Lock()
		defer r.view.mu.Unlock()
		if !slices.Equal(r.view.announced, []uint64{1, 1, 1}) {
			t.Fatalf("announced %v, want v1 at every apply", r.view.announced)
		}
	})
}
