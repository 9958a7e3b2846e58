package dashboard

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rolter/rolter/adminapi"
	"github.com/rolter/rolter/cluster"
	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/internal/testwait"
)

// TestAgainstRealAdminAPI drives the dashboard against the real admin API
// on an in-process three-node Raft cluster: the fake admin API proves the
// screens, this proves api.js speaks the adminapi dialect (list envelopes,
// group addressing, strict PUT bodies, the router view).
func TestAgainstRealAdminAPI(t *testing.T) {
	const super, internal = "dashboard-super-token", "dashboard-internal-token"
	// rolter.toml declares the providers and one route (file-owned,
	// read-only); the routes and the group the dashboard edits are
	// created through the admin API below.
	seed := config.Default()
	seed.Providers = []config.Provider{
		{Name: "gpu-a", APIBase: "http://127.0.0.1:18000/v1"},
		{Name: "gpu-b", APIBase: "http://127.0.0.1:18001/v1"},
	}
	seed.Routes = []config.Route{
		{Model: "embed", Strategy: "round_robin", Targets: []config.Target{{Provider: "gpu-b", Model: "embed", Weight: 1}}},
	}
	chat := config.Route{Model: "chat", Strategy: "adaptive",
		Targets: []config.Target{{Provider: "gpu-a", Model: "chat", Weight: 3}, {Provider: "gpu-b", Model: "chat", Weight: 1}}}
	plain := config.Route{Model: "plain", Strategy: "round_robin", Targets: []config.Target{{Provider: "gpu-a", Model: "plain", Weight: 1}}}
	fleet := config.ProviderGroup{Name: "fleet", Slug: "fleet",
		Strategy: "adaptive", Members: []config.Target{{Provider: "gpu-a", Weight: 1}, {Provider: "gpu-b", Weight: 1}}}

	p := newPage(t, newFakeAdmin(super)) // only the fake's token is used: the page signs in with it
	// Served from a follower, so writes go through leader forwarding.
	c, node := realCluster(t, &seed, super, internal)
	store, by := c.Node(node), cluster.Author{Name: "test", TokenSHA256: cluster.HashToken(super)}
	if _, err := store.CreateRoute(t.Context(), by, chat); err != nil {
		t.Fatalf("route chat: %v", err)
	}
	if _, err := store.CreateRoute(t.Context(), by, plain); err != nil {
		t.Fatalf("route plain: %v", err)
	}
	if _, err := store.CreateGroup(t.Context(), by, fleet); err != nil {
		t.Fatalf("group fleet: %v", err)
	}
	api := adminapi.New(adminapi.Deps{Store: c.Node(node), Cluster: c.Node(node), InternalToken: internal})
	mux := http.NewServeMux()
	mux.Handle("/ui/", Handler())
	mux.Handle("/", api)

	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	p.base = srv.URL

	p.signIn("#/mesh")
	routers := p.waitText("#routers", "leader")
	for _, id := range []string{"n1", "n2", "n3"} {
		if !strings.Contains(routers, id) {
			t.Errorf("routers table lacks %s:\n%s", id, routers)
		}
	}

	// An unrelated edit keeps adaptive, through the strict PUT decoder.
	p.run("routes", chromedp.Navigate(srv.URL+"/ui/#/routes"))
	card := `section.editor[data-key="chat"]`
	p.waitText(card, "chat")
	if got := p.value(card + " select"); got != "adaptive" {
		t.Fatalf("picker shows %q for a route on adaptive", got)
	}
	p.setValue(card+" input.weight", "5")
	p.run("save", chromedp.Click(chromedp.CSS(card+" button.save")))
	p.waitText(card+" .card-msg", "Saved")
	waitState(t, c, node, func(s *cluster.State) bool {
		r := s.Routes["chat"]
		return r.Strategy == "adaptive" && len(r.Targets) == 2 && r.Targets[0].Weight == 5
	})

	// The route rolter.toml declares is shown read-only: badge, disabled
	// inputs, no save button.
	file := `section.editor[data-key="embed"]`
	p.waitText(file, "managed by rolter.toml")
	if n := evalJS[int](p, `document.querySelectorAll('section.editor[data-key="embed"] button.save').length`); n != 0 {
		t.Errorf("the file-owned route has %d save buttons", n)
	}
	if !evalJS[bool](p, `document.querySelector('section.editor[data-key="embed"] input.weight').disabled`) {
		t.Error("the file-owned route's weight is editable")
	}
	if strings.Contains(p.text(card), "managed by rolter.toml") {
		t.Error("the API-created route carries the rolter.toml badge")
	}

	// Groups are addressed by name.
	group := `section.editor[data-key="fleet"]`
	p.setValue(group+" input.weight", "2")
	p.run("save group", chromedp.Click(chromedp.CSS(group+" button.save")))
	p.waitText(group+" .card-msg", "Saved")
	waitState(t, c, node, func(s *cluster.State) bool {
		g := s.Groups["fleet"]
		return g.Strategy == "adaptive" && len(g.Members) == 2 && g.Members[0].Weight == 2
	})

	// Policy: a refusal shows the server's words; a change persists.
	p.run("settings", chromedp.Navigate(srv.URL+"/ui/#/adaptive/settings"))
	p.run("form", chromedp.WaitVisible(chromedp.CSS("#exploration_pct")))
	p.setValue("#exploration_pct", "75")
	p.run("save", chromedp.Click(chromedp.CSS("#save-policy")))
	p.waitText("#policy-error", "exploration_ratio")
	p.setValue("#exploration_pct", "20")
	p.run("save", chromedp.Click(chromedp.CSS("#save-policy")))
	p.waitText("#policy-ok", "Saved")
	p.run("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#exploration_pct")))
	if got := p.value("#exploration_pct"); got != "20" {
		t.Errorf("after reload exploration = %q, want 20", got)
	}
	p.waitText("#affected-routes", "chat")

	// The kill switch is off by default: the telemetry screen says so.
	p.run("telemetry", chromedp.Navigate(srv.URL+"/ui/#/adaptive/telemetry"))
	p.waitText("#empty-kill-switch", "chat")

	p.run("audit", chromedp.Navigate(srv.URL+"/ui/#/audit"))
	p.waitText("#audit", "adaptive_routing_policy.update")
}

func waitState(t *testing.T, c *cluster.InmemCluster, node int, ok func(*cluster.State) bool) {
	t.Helper()
	testwait.For(t, 10*time.Second, "the cluster state to reflect the dashboard's write", func() bool { return ok(c.Node(node).State()) })
}
