package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rolter/rolter/adaptive"
	"github.com/rolter/rolter/adminapi"
	"github.com/rolter/rolter/cluster"
	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/internal/testwait"
)

// realCluster starts a seeded in-memory three-node Raft cluster and
// returns it with the index of a follower, so writes made through that
// node go through leader forwarding.
func realCluster(t *testing.T, seed *config.Config, super, internal string) (*cluster.InmemCluster, int) {
	t.Helper()
	c, err := cluster.NewInmemCluster(t.Context(), 3, cluster.StoreConfig{InternalToken: internal, SuperadminToken: super, Seed: seed, ForwardWait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	node := (c.Leader() + 1) % c.Len()
	testwait.For(t, 20*time.Second, "the seed to apply", func() bool { return c.Node(node).State().Seeded })
	return c, node
}

// sidecarSpec is one sidecar of the test mesh and what it publishes.
type sidecarSpec struct {
	name, url string
	blocks    int
	status    mesh.EngineStatus
}

func keys(from, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(from+i)*0x9e3779b97f4a7c15 | 1
	}
	return out
}

// TestMeshAgainstRealGossip drives the Mesh screen against the real admin
// API on an in-memory Raft cluster whose engines come from a real gossip
// pool on loopback: one router's view and three sidecars publishing
// residency and engine status. What the sidecars publish next shows up
// without a reload, and a sidecar that dies turns STALE.
func TestMeshAgainstRealGossip(t *testing.T) {
	const super, internal = "dashboard-super-token", "dashboard-internal-token"
	engines := []sidecarSpec{
		{name: "gpu-a", url: "http://127.0.0.1:18000", blocks: 120, status: mesh.EngineStatus{MetricsOK: true, Running: 3, Waiting: 1, KVUsage: 0.42,
			PrefixHits: 30, PrefixQueries: 100, MaxLoras: 4, Adapters: []string{"sql-lora", "support-v3"}, LMCacheKnown: true, LMCacheOccupancy: 0.62, LMCacheAvailable: true}},
		{name: "gpu-b", url: "http://127.0.0.1:18001", blocks: 75, status: mesh.EngineStatus{MetricsOK: true, Running: 5, Waiting: 0, KVUsage: 0.18,
			PrefixHits: 10, PrefixQueries: 40, MaxLoras: 4, Adapters: []string{"support-v3"}}},
		{name: "gpu-c", url: "http://127.0.0.1:18002", blocks: 33, status: mesh.EngineStatus{MetricsOK: true, Running: 1, Waiting: 2, KVUsage: 0.91}},
	}
	seed := config.Default()
	seed.Routes = []config.Route{{Model: "chat", Strategy: "precise_cache_aware"}}
	for _, e := range engines {
		seed.Providers = append(seed.Providers, config.Provider{Name: e.name, APIBase: e.url + "/v1"})
		seed.Routes[0].Targets = append(seed.Routes[0].Targets, config.Target{Provider: e.name, Model: "chat", Weight: 1})
	}
	p := newPage(t, newFakeAdmin(super)) // only the fake's token is used: the page signs in with it
	c, node := realCluster(t, &seed, super, internal)

	// The gossip pool: a router that calls an engine STALE after a second
	// of silence, status every 100 ms. Membership runs memberlist's LAN
	// timing: FastTiming's 100 ms ack deadline, missed in a stall of this
	// loaded process (chromium, -race), could declare a live sidecar dead
	// and its engine STALE; a dead sidecar's goes STALE on its silence.
	h, err := mesh.NewHarness(t.Context(), mesh.HarnessConfig{Routers: 1, Seed: 11, Timing: &mesh.Timing{}, Configure: func(cfg *mesh.Config) {
		cfg.Router.StaleAfter = time.Second
		cfg.Router.SweepInterval = 100 * time.Millisecond
		cfg.Sidecar.StatusInterval = 100 * time.Millisecond
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	for i, e := range engines {
		n, err := h.AddSidecar(t.Context(), e.name, e.url, "chat")
		if err != nil {
			t.Fatal(err)
		}
		n.Publisher().Apply(mesh.ResidencyDelta{Added: keys(1000*i, e.blocks), State: mesh.StateExact})
		n.Publisher().SetStatus(e.status)
	}
	// An engine no provider points at yet: the route form offers it.
	if _, err := h.AddSidecar(t.Context(), "gpu-d", "http://127.0.0.1:18003", "chat-d"); err != nil {
		t.Fatal(err)
	}

	api := adminapi.New(adminapi.Deps{Store: c.Node(node), Cluster: c.Node(node), InternalToken: internal, Engines: adminapi.MeshEngines{Mesh: h.Routers[0]}})
	mux := http.NewServeMux()
	mux.Handle("/ui/", Handler())
	mux.Handle("/", api)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	p.base = srv.URL
	// The serving router describes itself over the telemetry channel; the
	// other two Raft nodes run no router here, so they report nothing.
	self := &adminapi.Pusher{NodeID: c.Node(node).Info().NodeID, Source: noAdaptive{}, Local: api.Telemetry(),
		Build: "v0.9.0-test", AdminAddr: strings.TrimPrefix(srv.URL, "http://")}
	self.PushOnce(t.Context())

	p.signIn("#/mesh")
	row := func(name string) string { return fmt.Sprintf(`#engines tr[data-node=%q]`, name) }
	for _, e := range engines {
		p.waitText(row(e.name)+" td.kvstate", "EXACT")
		p.waitText(row(e.name)+" td.blocks", fmt.Sprint(e.blocks))
		got := p.waitText(row(e.name)+" td.rw", fmt.Sprintf("%d / %d", e.status.Running, e.status.Waiting))
		text := p.text(row(e.name))
		for _, want := range append([]string{e.url, "chat"}, e.status.Adapters...) {
			if !strings.Contains(text, want) {
				t.Errorf("%s row lacks %q:\n%s (running/waiting %q)", e.name, want, text, got)
			}
		}
	}
	p.waitText(row("gpu-a"), "62%") // LMCache occupancy
	p.waitText(row("gpu-c"), "91%") // KV usage
	if got := p.text(row("gpu-b")); !strings.Contains(got, "—") {
		t.Errorf("gpu-b publishes no LMCache signal, row shows %q", got)
	}
	routers := p.text("#routers")
	for _, id := range []string{"n1", "n2", "n3", "leader"} {
		if !strings.Contains(routers, id) {
			t.Errorf("routers table lacks %s:\n%s", id, routers)
		}
	}
	selfRow := fmt.Sprintf(`#routers tr[data-node=%q]`, self.NodeID)
	p.waitText(selfRow+" .admin-addr", self.AdminAddr)
	p.waitText(selfRow+" .build", "v0.9.0-test")

	// Live: what the sidecars publish next reaches the table without a
	// reload (the marker set on this document survives).
	evalJS[bool](p, `window.__sameDocument = true`)
	busy := engines[1].status
	busy.Running, busy.Waiting = 7, 17
	h.Sidecars[1].Publisher().SetStatus(busy)
	h.Sidecars[1].Publisher().Apply(mesh.ResidencyDelta{Added: keys(50_000, 25), Removed: keys(1000, 5)})
	p.waitText(row("gpu-b")+" td.rw", "7 / 17")
	p.waitText(row("gpu-b")+" td.blocks", "95")
	busy.Waiting = 23
	h.Sidecars[1].Publisher().SetStatus(busy)
	p.waitText(row("gpu-b")+" .waiting", "23")
	if !evalJS[bool](p, `window.__sameDocument === true`) {
		t.Error("the page reloaded to show the new status")
	}

	// A sidecar that dies goes STALE; the others stay EXACT.
	if err := h.Sidecars[2].Close(); err != nil {
		t.Fatal(err)
	}
	p.waitText(row("gpu-c")+" td.kvstate", "STALE")
	for _, name := range []string{"gpu-a", "gpu-b"} {
		if got := p.text(row(name) + " td.kvstate"); !strings.Contains(got, "EXACT") {
			t.Errorf("%s state = %q after another sidecar died, want EXACT", name, got)
		}
	}
	if !slices.ContainsFunc(h.Routers[0].Snapshot().Engines, func(e mesh.EngineSnapshot) bool { return e.NodeID == "gpu-c" && e.State == "STALE" }) {
		t.Error("the gossip view itself does not call gpu-c STALE")
	}

	// The route's telemetry hint judges each target from the same gossip:
	// provider api_base matched to the engine URL a sidecar announces.
	evalJS[string](p, `location.hash = '#/routes'`)
	hint := p.waitText(`section.editor[data-key="chat"] [data-hint="kv_events"]`, "live on 2 of 3 targets")
	for _, want := range []string{"gpu-a: KV events EXACT", "gpu-b: KV events EXACT", "gpu-c: KV events STALE"} {
		if !strings.Contains(hint, want) {
			t.Errorf("precise_cache_aware hint lacks %q:\n%s", want, hint)
		}
	}

	// A route over the engine the mesh discovered: saving creates its
	// provider (named after the engine, api_base its URL + /v1) first.
	p.waitText(`section.editor[data-key="chat"]`, "gpu-a")
	p.run("new route", chromedp.Click(chromedp.CSS("#new-route")))
	p.waitText("#route-targets", "gpu-d ·")
	if opts := p.text("#route-targets .target-provider"); !strings.Contains(opts, "gpu-d · http://127.0.0.1:18003") || strings.Contains(opts, "gpu-a ·") {
		t.Errorf("engine options: want gpu-d only (the others have providers):\n%s", opts)
	}
	p.run("type route", chromedp.SendKeys(chromedp.CSS("#route-name"), "chat-d"))
	p.setValue("#route-targets tr:nth-child(1) .target-provider", "e:0")
	p.run("save route", chromedp.Click(chromedp.CSS("#route-save")))
	p.waitText(`section.editor[data-key="chat-d"]`, "gpu-d")
	waitState(t, c, node, func(s *cluster.State) bool {
		r, pr := s.Routes["chat-d"], s.Providers["gpu-d"]
		return pr.APIBase == "http://127.0.0.1:18003/v1" && len(r.Targets) == 1 && r.Targets[0].Provider == "gpu-d"
	})

	if *screenshotDir != "" {
		evalJS[string](p, `location.hash = '#/mesh'`)
		p.waitText(row("gpu-c")+" td.kvstate", "STALE")
		meshScreenshot(t, p, h, engines[:2])
	}
}

// noAdaptive is a telemetry source with no adaptive route.
type noAdaptive struct{}

func (noAdaptive) AdaptiveTelemetry() []adaptive.RouteTelemetry { return nil }

// meshScreenshot lets the live sidecars' queues move for a while, so the
// charts draw from real polls, then saves the Mesh screen.
func meshScreenshot(t *testing.T, p *page, h *mesh.Harness, live []sidecarSpec) {
	t.Helper()
	for step := range 40 {
		for i, e := range live {
			s := e.status
			s.Running = uint64(2 + (step/4+3*i)%6)
			s.Waiting = uint64((step / 3 * (i + 1)) % 9)
			s.PrefixHits += uint64(step * (3 + i))
			s.PrefixQueries += uint64(step * 6)
			h.Sidecars[i].Publisher().SetStatus(s)
		}
		time.Sleep(200 * time.Millisecond)
	}
	p.saveScreenshot(filepath.Join(*screenshotDir, "01-mesh.png"))
}
