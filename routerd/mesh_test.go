package routerd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/cluster"
	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/internal/testwait"
	"github.com/rolter/rolter/router"
	"github.com/rolter/rolter/router/meshstate"
	"github.com/rolter/rolter/strategies"
)

func TestEngineKey(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8000":       "http://127.0.0.1:8000",
		"http://127.0.0.1:8000/":      "http://127.0.0.1:8000",
		"HTTP://Engine-A:8000/v1":     "http://engine-a:8000",
		"http://engine-a:8000/v1/":    "http://engine-a:8000",
		"https://gw.example/team/v1":  "https://gw.example/team",
		"http://engine-a:8000/v1beta": "http://engine-a:8000/v1beta",
	} {
		if got := engineKey(in); got != want {
			t.Errorf("engineKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDiscover(t *testing.T) {
	base := &config.Config{
		Providers: []config.Provider{{Name: "a", APIBase: "http://10.0.0.1:8000/v1"}, {Name: "e2", APIBase: "http://10.9.9.9:8000"}},
		Routes: []config.Route{
			{Model: "static", Strategy: "round_robin", Targets: []config.Target{{Provider: "a", Model: "m"}}},
			{Model: "m", Strategy: "power_of_two", Discover: true},
		},
	}
	engines := map[string][]mesh.EngineInfo{"m": {
		{NodeID: "e1", EngineURL: "http://10.0.0.1:8000", Models: []string{"m"}}, // already provider "a"
		{NodeID: "e2", EngineURL: "http://10.0.0.2:8000", Models: []string{"m"}}, // name taken by another provider
		{NodeID: "e3", EngineURL: "http://10.0.0.3:8000", Models: []string{"m"}},
	}}
	got := discover(base, func(model string) []mesh.EngineInfo { return engines[model] })
	var names []string
	for _, tg := range got.Routes[1].Targets {
		names = append(names, tg.Provider+"/"+tg.Model)
	}
	want := []string{"a/m", "http://10.0.0.2:8000/m", "e3/m"}
	if !slices.Equal(names, want) {
		t.Fatalf("discovered targets %v, want %v", names, want)
	}
	if len(got.Providers) != 4 || got.Providers[3].Name != "e3" || got.Providers[3].APIBase != "http://10.0.0.3:8000" {
		t.Fatalf("providers %+v", got.Providers)
	}
	if len(base.Providers) != 2 || len(base.Routes[1].Targets) != 0 {
		t.Fatal("discover modified its input")
	}
	if len(got.Routes[0].Targets) != 1 {
		t.Fatalf("static route changed: %+v", got.Routes[0])
	}
	if k1, k2 := discoveredKey(got), discoveredKey(discover(base, func(model string) []mesh.EngineInfo { return engines[model] })); k1 != k2 || k1 == discoveredKey(base) {
		t.Fatalf("fingerprints: same engines %q vs %q; none %q", k1, k2, discoveredKey(base))
	}
	// The engine gone: the route is empty again.
	engines["m"] = nil
	if got := discover(base, func(model string) []mesh.EngineInfo { return engines[model] }); len(got.Routes[1].Targets) != 0 {
		t.Fatalf("targets after the engines left: %+v", got.Routes[1].Targets)
	}
}

// startPool runs an in-process pool of routers and sidecars on loopback.
func startPool(t *testing.T, routers, sidecars int) *mesh.Harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h, err := mesh.NewHarness(ctx, mesh.HarnessConfig{Routers: routers, Sidecars: sidecars, Seed: 7})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(); cancel() })
	testwait.For(t, 10*time.Second, "gossip", func() error {
		for _, n := range h.Members() {
			if n.NumMembers() != routers+sidecars {
				return fmt.Errorf("%s sees %d members", n.Name(), n.NumMembers())
			}
		}
		return nil
	})
	return h
}

// recorder is a balancer with the mesh hooks, recording what it imports.
type recorder struct {
	strategies.LoadBalancer
	prefixes []string
	at       []int
	pins     map[string]int
}

func (r *recorder) ObservePrefixRemote(target int, prefix string) {
	r.prefixes = append(r.prefixes, prefix)
	r.at = append(r.at, target)
}

func (r *recorder) PinSession(key string, target int, _ time.Time) {
	if r.pins == nil {
		r.pins = map[string]int{}
	}
	r.pins[key] = target
}

// TestLearnedSharing: a prefix one router observed and a session it pinned
// reach another router's balancer of the same pool, mapped to the target
// index of the engine there, and only for prompts that share the prefix.
func TestLearnedSharing(t *testing.T) {
	h := startPool(t, 2, 0)
	a := newMeshHooks(h.Routers[0], time.Now)
	b := newMeshHooks(h.Routers[1], time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.follow(ctx)

	system := strings.Repeat("You are a helpful assistant. ", 10) // 290 bytes
	a.Observed("chat", "http://engine-2:8000/v1", &strategies.RouteContext{Prompt: system + "What is 2+2?", SessionKey: "s1"})
	bases := []string{"http://engine-1:8000", "http://ENGINE-2:8000/"}
	rec := &recorder{}
	testwait.For(t, 5*time.Second, "gossip", func() error {
		b.Recall("chat", rec, bases, &strategies.RouteContext{Prompt: system + "Tell me a joke.", SessionKey: "s1"})
		if len(rec.prefixes) == 0 || len(rec.pins) == 0 {
			return errors.New("nothing imported yet")
		}
		return nil
	})
	for i, p := range rec.prefixes {
		if rec.at[i] != 1 || !strings.HasPrefix(system, p) {
			t.Fatalf("imported %q at target %d; want prefixes of the system prompt at target 1", p, rec.at[i])
		}
	}
	if rec.pins["s1"] != 1 {
		t.Fatalf("pins %v, want s1 → 1", rec.pins)
	}
	// Another pool, or an unrelated prompt, imports nothing.
	other := &recorder{}
	b.Recall("other", other, bases, &strategies.RouteContext{Prompt: system + "x", SessionKey: "s1"})
	b.Recall("chat", other, bases, &strategies.RouteContext{Prompt: strings.Repeat("z", 300), SessionKey: "s2"})
	if len(other.prefixes) != 0 || len(other.pins) != 0 {
		t.Fatalf("imported %v %v for an unrelated request", other.prefixes, other.pins)
	}
}

// TestMeshInventory: routers found by gossip become Raft peers (alive while
// in the pool, not alive once gone, so the leader prunes them), telemetry
// endpoints and inventory entries; an unspecified host in an announced
// address is the member's gossip host.
func TestMeshInventory(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h, err := mesh.NewHarness(ctx, mesh.HarnessConfig{Routers: 2, Seed: 3, Configure: func(c *mesh.Config) {
		c.Meta.RaftAddr, c.Meta.AdminAddr = c.Name+".raft:7947", "0.0.0.0:4001"
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	static := cluster.StaticPeers{{ID: "r9", Addr: "10.0.0.9:7947", Alive: true}}
	inv := newMeshInventory(h.Routers[0], h.Routers[0].Name(), static, []string{"http://10.0.0.9:4001"})
	peer := func() (cluster.Peer, error) {
		for _, p := range inv.RaftPeers() {
			if p.ID == "router-1" {
				return p, nil
			}
		}
		return cluster.Peer{}, fmt.Errorf("router-1 not among %v", inv.RaftPeers())
	}
	testwait.For(t, 10*time.Second, "router-1 discovered", func() error {
		p, err := peer()
		if err == nil && (!p.Alive || p.Addr != "router-1.raft:7947") {
			err = fmt.Errorf("peer %+v", p)
		}
		return err
	})
	if ps := inv.RaftPeers(); len(ps) != 2 || ps[0] != static[0] {
		t.Fatalf("raft peers %+v, want the static r9 and router-1 (never this router)", ps)
	}
	gossipHost, _, _ := net.SplitHostPort(h.Routers[1].Addr())
	wantAdmin := "http://" + net.JoinHostPort(gossipHost, "4001")
	if got := inv.TelemetryEndpoints(); !slices.Equal(got, []string{"http://10.0.0.9:4001", wantAdmin}) {
		t.Fatalf("endpoints %v, want --peer-admin then %s", got, wantAdmin)
	}
	inv.adminScheme = "https" // this router has --admin-tls-cert: so do its peers
	if got := inv.TelemetryEndpoints(); len(got) != 2 || got[1] != "https://"+net.JoinHostPort(gossipHost, "4001") {
		t.Fatalf("endpoints with admin TLS %v, want the gossip-found router over https", got)
	}
	inv.adminScheme = ""
	if rs := inv.Routers(); len(rs) != 2 || rs[0].NodeID != "router-0" || rs[1].NodeID != "router-1" || !rs[1].Alive {
		t.Fatalf("inventory %+v", rs)
	}

	if err := h.Routers[1].Close(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 15*time.Second, "router-1 reported dead", func() error {
		p, err := peer()
		if err == nil && p.Alive {
			err = errors.New("still alive")
		}
		return err
	})
	if got := inv.TelemetryEndpoints(); !slices.Equal(got, []string{"http://10.0.0.9:4001"}) {
		t.Fatalf("endpoints after router-1 died: %v", got)
	}
}

// TestLoadsReachOtherRoutersAndExpire: a router's per-target in-flight
// counts and queued-prefill sums, keyed by provider api_base, reach the
// other routers' view of the engine (never its own), so replicas do not
// herd onto one engine; once the router is gone, they expire.
func TestLoadsReachOtherRoutersAndExpire(t *testing.T) {
	h := startPool(t, 2, 0)
	a := newMeshHooks(h.Routers[0], time.Now)
	b := newMeshHooks(h.Routers[1], time.Now)
	for _, m := range []*meshHooks{a, b} {
		m.Sources([]string{"http://engine-1:8000/v1"}) // a route targets it
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.publish(ctx, func() map[string]router.BaseLoad {
			return map[string]router.BaseLoad{"http://engine-1:8000/v1": {Inflight: 2, Prefill: 9000}, "http://ENGINE-1:8000": {Inflight: 1, Prefill: 500}}
		}, nil)
	}()
	testwait.For(t, 5*time.Second, "loads gossiped", func() error {
		if q, ok := b.Load("http://engine-1:8000"); !ok || q != 3 {
			return fmt.Errorf("router b sees load %d, %v; want 3", q, ok)
		}
		if p := b.PeerPrefill("http://engine-1:8000"); p != 9500 {
			return fmt.Errorf("router b sees queued prefill %d; want 9500", p)
		}
		return nil
	})
	if q, ok := a.Load("http://engine-1:8000/v1"); ok || q != 0 {
		t.Fatalf("router a counts its own in-flight through the mesh: %d, %v", q, ok)
	}
	if p := a.PeerPrefill("http://engine-1:8000/v1"); p != 0 {
		t.Fatalf("router a counts its own prefill through the mesh: %d", p)
	}
	cancel()
	<-done
	if err := h.Routers[0].Close(); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "a's loads expire once it is gone", func() error {
		if p := b.PeerPrefill("http://engine-1:8000"); p != 0 {
			return fmt.Errorf("router b still sees queued prefill %d", p)
		}
		if q, ok := b.Load("http://engine-1:8000"); ok || q != 0 {
			return fmt.Errorf("router b still sees load %d, %v", q, ok)
		}
		return nil
	})
}

// TestRouterRunsMeshState: rolter router's mesh hooks run router/meshstate's
// State, the type the fleet simulator's replicas hold
// (sim/fleet TestReplicasRunTheRoutersMeshState), so `rolter bench
// routing` measures the sharing code that ships.
func TestRouterRunsMeshState(t *testing.T) {
	h := startPool(t, 1, 0)
	m := newMeshHooks(h.Routers[0], time.Now)
	var st *meshstate.State = m.state
	if st == nil {
		t.Fatal("meshHooks holds no meshstate.State")
	}
}

// fakePool is the gossip view's announcements, set by the test.
type fakePool struct{ routers []mesh.RouterInfo }

func (p *fakePool) Snapshot() mesh.Snapshot { return mesh.Snapshot{Routers: slices.Clone(p.routers)} }

// TestInventoryForgetsRoutersADayAfterTheyLeft: a router that left the
// pool stays a Raft peer, not alive (so the leader removes it after its
// grace), and in the admin inventory, but not a telemetry endpoint; a
// day later it is forgotten; a router that comes back is alive again.
func TestInventoryForgetsRoutersADayAfterTheyLeft(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	pool := &fakePool{routers: []mesh.RouterInfo{
		{NodeID: "self", Address: "10.0.0.1:7946", RaftAddr: "10.0.0.1:7947", AdminAddr: "10.0.0.1:4001"},
		{NodeID: "r2", Address: "10.0.0.2:7946", RaftAddr: "0.0.0.0:7947", AdminAddr: ":4001", Build: "v2"},
	}}
	inv := &meshInventory{view: pool, self: "self", now: func() time.Time { return now }, seen: map[string]seenRouter{}}
	peers := func() []cluster.Peer { return inv.RaftPeers() }
	if got := peers(); len(got) != 1 || got[0] != (cluster.Peer{ID: "r2", Addr: "10.0.0.2:7947", Alive: true}) {
		t.Fatalf("peers %+v, want r2 alive at its gossip host", got)
	}
	if got := inv.TelemetryEndpoints(); !slices.Equal(got, []string{"http://10.0.0.2:4001"}) {
		t.Fatalf("endpoints %v", got)
	}

	pool.routers = pool.routers[:1] // r2 left
	now = now.Add(time.Hour)
	if got := peers(); len(got) != 1 || got[0].ID != "r2" || got[0].Alive {
		t.Fatalf("peers after r2 left: %+v, want r2 not alive", got)
	}
	if got := inv.TelemetryEndpoints(); len(got) != 0 {
		t.Fatalf("endpoints after r2 left: %v", got)
	}
	if rs := inv.Routers(); len(rs) != 2 || rs[1].NodeID != "r2" || rs[1].Alive || rs[1].Build != "v2" {
		t.Fatalf("inventory after r2 left: %+v", rs)
	}

	now = now.Add(forgetAfter + time.Minute)
	if got := peers(); len(got) != 0 {
		t.Fatalf("peers a day after r2 left: %+v, want none", got)
	}
	pool.routers = append(pool.routers, mesh.RouterInfo{NodeID: "r2", Address: "10.0.0.2:7946", RaftAddr: "10.0.0.2:7947"})
	if got := peers(); len(got) != 1 || !got[0].Alive {
		t.Fatalf("peers after r2 came back: %+v", got)
	}
}

// TestMeshRanksRouters: every router of a pool learns how many routers the
// mesh has and takes a distinct rank among them (what meshstate orders
// the first picks of an instant by), all agreeing on the order.
func TestMeshRanksRouters(t *testing.T) {
	h := startPool(t, 3, 0)
	ranks := make([]int, 3)
	testwait.For(t, 5*time.Second, "router inventory", func() error {
		seen := map[int]bool{}
		for i, n := range h.Routers {
			live, rank := viewTransport{node: n, now: time.Now}.Routers()
			if live != 3 {
				return fmt.Errorf("router %d sees %d routers", i, live)
			}
			if seen[rank] {
				return fmt.Errorf("rank %d taken twice", rank)
			}
			seen[rank], ranks[i] = true, rank
		}
		return nil
	})
	m := newMeshHooks(h.Routers[2], time.Now)
	if live, rank := m.Routers(); live != 3 || rank != ranks[2] {
		t.Errorf("meshHooks.Routers() = %d, %d, want 3, %d", live, rank, ranks[2])
	}
}
