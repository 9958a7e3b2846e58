package dashboard

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/rolter/rolter/adaptive"
	"github.com/rolter/rolter/adminapi"
	"github.com/rolter/rolter/cluster"
	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/internal/testwait"
	"github.com/rolter/rolter/router"
	"github.com/rolter/rolter/routestats"
	"github.com/rolter/rolter/strategies"
)

// fleetRouter is one router of the in-process fleet: the real data plane
// following one Raft node's state, the real admin API and dashboard on
// its admin port, and the real telemetry pusher.
type fleetRouter struct {
	srv    *router.Server
	api    *httptest.Server // the OpenAI API
	admin  *httptest.Server // admin API + /ui/
	pusher *adminapi.Pusher
}

// statsOf is the pusher's source: no adaptive routes, the ring's stats.
type statsOf struct{ srv *router.Server }

func (s statsOf) AdaptiveTelemetry() []adaptive.RouteTelemetry { return nil }
func (s statsOf) RouteStats() []routestats.Route               { return s.srv.RouteStats() }
func (s statsOf) ConfigVersion() uint64                        { return s.srv.ConfigVersion() }

// engine is a fake OpenAI-compatible engine counting the chats it served,
// each after delay; usage, when set, is the completion's usage object.
func engine(t *testing.T, name string, delay time.Duration, usage string) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), `"stream":true`) {
			// the first token after a third of the delay, the rest after it
			w.Header().Set("Content-Type", "text/event-stream")
			time.Sleep(delay / 3)
			fmt.Fprintf(w, "data: {\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n", name)
			w.(http.Flusher).Flush()
			time.Sleep(delay - delay/3)
			if usage != "" {
				fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":%s}\n\n", usage)
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
			return
		}
		time.Sleep(delay)
		w.Header().Set("Content-Type", "application/json")
		u := ""
		if usage != "" {
			u = `,"usage":` + usage
		}
		fmt.Fprintf(w, `{"id":"c","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]%s}`, name, u)
	}))
	t.Cleanup(s.Close)
	return s, &n
}

// startFleet runs a data plane, admin API and pusher on each of the given
// Raft nodes. Each data plane applies its node's state on every change,
// as `rolter router` does.
func startFleet(t *testing.T, c *cluster.InmemCluster, nodes []int, base *config.Config, internal string) []*fleetRouter {
	t.Helper()
	var out []*fleetRouter
	var peers urlList
	for k, i := range nodes {
		st := c.Node(i)
		srv := router.New(router.Options{Base: base, Rand: strategies.NewRand(uint64(7 + k))})
		api := adminapi.New(adminapi.Deps{Store: st, Cluster: st, InternalToken: internal, Limits: base.Limits})
		mux := http.NewServeMux()
		mux.Handle("/ui/", Handler())
		mux.Handle("/", api)
		fr := &fleetRouter{srv: srv, api: httptest.NewServer(srv.Handler()), admin: httptest.NewServer(mux)}
		t.Cleanup(fr.api.Close)
		t.Cleanup(fr.admin.Close)
		fr.pusher = &adminapi.Pusher{NodeID: st.Info().NodeID, InternalToken: internal, Source: statsOf{srv}, Local: api.Telemetry(),
			Build: "v0.9.0-test", AdminAddr: strings.TrimPrefix(fr.admin.URL, "http://")}
		peers = append(peers, fr.admin.URL)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			watch := st.Watch()
			applied := uint64(0)
			for {
				if s := st.State(); s.Seeded && s.ConfigVersion != applied {
					if err := srv.ApplyVersion(s.Config(base), s.ConfigVersion); err == nil {
						applied = s.ConfigVersion
					}
				}
				select {
				case <-ctx.Done():
					return
				case <-watch:
				}
			}
		}()
		t.Cleanup(func() { cancel(); <-done })
		out = append(out, fr)
	}
	for _, fr := range out {
		fr.pusher.Peers = peers
	}
	return out
}

type urlList []string

func (u urlList) TelemetryEndpoints() []string { return u }

// pushAll has every router report to every router (the 15 s loop's work).
func pushAll(fleet []*fleetRouter) {
	for _, fr := range fleet {
		fr.pusher.PushOnce(context.Background())
	}
}

// chat sends one chat request with key through a router's API.
func chat(t *testing.T, api *httptest.Server, key, model string) (int, string) {
	t.Helper()
	return post(t, api, key, `{"model":"`+model+`","messages":[{"role":"user","content":"hello"}]}`)
}

func post(t *testing.T, api *httptest.Server, key, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, api.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := api.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// eventuallyStatus waits until a chat with key answers want.
func eventuallyStatus(t *testing.T, api *httptest.Server, key, model string, want int) {
	t.Helper()
	testwait.For(t, 10*time.Second, fmt.Sprintf("chat %s with the key to answer %d", model, want), func() error {
		if code, body := chat(t, api, key, model); code != want {
			return fmt.Errorf("%d %s", code, body)
		}
		return nil
	})
}

// signInWith opens the dashboard and signs in with token.
func (p *page) signInWith(token, hash string) {
	p.t.Helper()
	p.open(hash)
	p.run("sign in",
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS("#main")))
}

func (p *page) click(sel string) {
	p.t.Helper()
	p.run("click "+sel, chromedp.WaitVisible(chromedp.CSS(sel)), chromedp.Click(chromedp.CSS(sel)))
}

// enabled reports whether the first element matching sel exists and is
// not disabled.
func (p *page) enabled(sel string) bool {
	p.t.Helper()
	return evalJS[bool](p, fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && !e.disabled; })()`, sel))
}

// unlabelled lists the form controls in #main no label names.
func (p *page) unlabelled() string {
	p.t.Helper()
	return evalJS[string](p, `[...document.querySelectorAll('#main input, #main select, #main textarea')]
		.filter((e) => !e.getAttribute('aria-label') && !(e.id && document.querySelector('label[for="' + e.id + '"]')) && !e.closest('label'))
		.map((e) => e.outerHTML.slice(0, 80)).join('\n')`)
}

func (p *page) shot(name string) {
	p.t.Helper()
	if *screenshotDir == "" {
		return
	}
	time.Sleep(300 * time.Millisecond) // let the last refresh paint
	p.saveScreenshot(filepath.Join(*screenshotDir, name+".png"))
}

// TestManageFleetAgainstRealCluster is the operator's path through the
// management screens, against a real three-node Raft cluster with two real
// routers: create two providers, a route over them and a key in the UI;
// the key works through the router and stops working once deleted in the
// UI; a provider outside [limits] is refused with the server's message and
// nothing is created; rolter.toml entries cannot be edited; the route page
// counts what was sent through both routers; a viewer can change nothing.
func TestManageFleetAgainstRealCluster(t *testing.T) {
	const super, internal = "dashboard-super-token", "dashboard-internal-token"
	const tomlKey = "sk-from-rolter-toml"
	// Distinct latencies, so the route page has something to compare.
	// gpu-a reports cached prompt tokens (vLLM with
	// --enable-prompt-tokens-details), gpu-b does not.
	engA, servedA := engine(t, "gpu-a", 20*time.Millisecond,
		`{"prompt_tokens":40,"completion_tokens":1,"total_tokens":41,"prompt_tokens_details":{"cached_tokens":30}}`)
	engB, servedB := engine(t, "gpu-b", 60*time.Millisecond, `{"prompt_tokens":40,"completion_tokens":1,"total_tokens":41}`)
	engToml, _ := engine(t, "toml-gpu", 0, "")

	seed := config.Default()
	seed.Limits.AllowedHosts = []string{"127.0.0.1"}
	seed.Health.Enabled = false
	seed.Providers = []config.Provider{{Name: "toml-gpu", APIBase: engToml.URL + "/v1", ReadOnly: true}}
	seed.Routes = []config.Route{{Model: "toml-route", Strategy: "round_robin", ReadOnly: true,
		Targets: []config.Target{{Provider: "toml-gpu", Model: "toml-route", Weight: 1}}}}
	seed.Keys = []config.Key{{Name: "toml-key", SHA256: cluster.HashToken(tomlKey), ReadOnly: true}}

	p := newPage(t, newFakeAdmin(super)) // only the fake's token is used: the page signs in with it
	c, node := realCluster(t, &seed, super, internal)
	fleet := startFleet(t, c, []int{node, (node + 1) % c.Len(), (node + 2) % c.Len()}, &seed, internal)
	p.base = fleet[0].admin.URL
	state := func() *cluster.State { return c.Node(node).State() }

	p.signIn("#/serving")
	p.waitText("#serving-empty", "No traffic")
	p.shot("09-serving-empty")

	// Providers: two created through the form.
	p.run("providers", chromedp.Navigate(p.base+"/ui/#/providers"))
	p.waitText(`#providers tr[data-name="toml-gpu"]`, "managed by rolter.toml")
	for _, e := range []struct{ name, url string }{{"gpu-a", engA.URL}, {"gpu-b", engB.URL}} {
		p.click("#new-provider")
		p.run("type provider", chromedp.SendKeys(chromedp.CSS("#provider-name"), e.name),
			chromedp.SendKeys(chromedp.CSS("#provider-api-base"), e.url+"/v1"),
			chromedp.SendKeys(chromedp.CSS("#provider-price-in"), "0.2"))
		p.click("#provider-save")
		p.waitText(fmt.Sprintf(`#providers tr[data-name=%q]`, e.name), e.url)
	}

	// A validation error: the server's message inline, nothing created.
	p.click("#new-provider")
	p.run("type provider", chromedp.SendKeys(chromedp.CSS("#provider-name"), "metadata"),
		chromedp.SendKeys(chromedp.CSS("#provider-api-base"), "http://169.254.169.254/v1"))
	p.click("#provider-save")
	msg := p.waitText("#provider-error", "not in [limits] allowed_hosts")
	if !strings.Contains(msg, `api_base: host "169.254.169.254"`) {
		t.Errorf("inline error %q is not the server's message", msg)
	}
	if !evalJS[bool](p, `document.activeElement.id === 'provider-api-base' && document.activeElement.getAttribute('aria-invalid') === 'true'`) {
		t.Error("the field the server named is not marked invalid and focused")
	}
	p.shot("11-provider-invalid")
	if _, ok := state().Providers["metadata"]; ok {
		t.Fatal("a provider the server refused was created")
	}
	p.click("#provider-cancel")
	if got := p.text("#providers"); strings.Contains(got, "metadata") {
		t.Errorf("the refused provider is listed:\n%s", got)
	}
	p.shot("10-providers")

	// Editing a provider: the form comes back filled in, the name fixed.
	p.click(`#providers tr[data-name="gpu-b"] button.edit`)
	if got := p.value("#provider-api-base"); got != engB.URL+"/v1" || p.enabled("#provider-name") {
		t.Fatalf("edit form: api_base %q, name enabled %v", got, p.enabled("#provider-name"))
	}
	if u := p.unlabelled(); u != "" {
		t.Errorf("provider form controls without a label:\n%s", u)
	}
	p.setValue("#provider-price-out", "1.5")
	p.click("#provider-save")
	p.waitText(`#providers tr[data-name="gpu-b"]`, "0.20 / 1.50")
	if pr := state().Providers["gpu-b"]; pr.PriceOutPerMtok != 1.5 || pr.APIBase != engB.URL+"/v1" {
		t.Errorf("stored provider after edit: %+v", pr)
	}

	// A rolter.toml entry cannot be edited: its controls are disabled.
	for _, sel := range []string{`#providers tr[data-name="toml-gpu"] button.edit`, `#providers tr[data-name="toml-gpu"] button.delete`} {
		if p.enabled(sel) {
			t.Errorf("%s is enabled on a rolter.toml provider", sel)
		}
	}

	// A route over both, weighted 3:1.
	p.run("routes", chromedp.Navigate(p.base+"/ui/#/routes"))
	p.click("#new-route")
	p.run("type route", chromedp.SendKeys(chromedp.CSS("#route-name"), "chat"))
	p.setValue("#route-strategy", "weighted")
	p.setValue("#route-targets tr:nth-child(1) .target-provider", "p:gpu-a")
	p.setValue("#route-targets tr:nth-child(1) .target-weight", "3")
	p.click("#route-add-target")
	p.setValue("#route-targets tr:nth-child(2) .target-provider", "p:gpu-b")
	p.shot("12-route-form")
	if u := p.unlabelled(); u != "" {
		t.Errorf("route form controls without a label:\n%s", u)
	}
	p.click("#route-save")
	p.waitText(`section.editor[data-key="chat"]`, "gpu-b")
	if r := state().Routes["chat"]; r.Strategy != "weighted" || len(r.Targets) != 2 || r.Targets[0].Weight != 3 || r.Targets[1].Weight != 1 {
		t.Fatalf("stored route: %+v", r)
	}
	card := `section.editor[data-key="toml-route"]`
	p.waitText(card, "managed by rolter.toml")
	for _, sel := range []string{card + " select", card + " input.weight", card + " button.edit", card + " button.delete"} {
		if p.enabled(sel) {
			t.Errorf("%s is enabled on a rolter.toml route", sel)
		}
	}
	if evalJS[bool](p, fmt.Sprintf(`!!document.querySelector(%q)`, card+" button.save")) {
		t.Error("a rolter.toml route offers a Save button")
	}

	// A provider group over both, through the same form.
	p.click("#new-group")
	p.run("type group", chromedp.SendKeys(chromedp.CSS("#group-name"), "fleet"), chromedp.SendKeys(chromedp.CSS("#group-slug"), "fleet"))
	p.setValue("#group-strategy", "power_of_two")
	p.setValue("#group-targets tr:nth-child(1) .target-provider", "p:gpu-a")
	p.click("#group-add-target")
	p.setValue("#group-targets tr:nth-child(2) .target-provider", "p:gpu-b")
	p.click("#group-save")
	p.waitText(`section.editor[data-key="fleet"]`, "fleet/<model>")
	if g := state().Groups["fleet"]; g.Strategy != "power_of_two" || len(g.Members) != 2 || g.Members[1].Provider != "gpu-b" {
		t.Fatalf("stored group: %+v", g)
	}

	// Editing the group through the full form: the form comes back filled
	// in; a target removed and the strategy changed are stored.
	p.click(`section.editor[data-key="fleet"] button.edit`)
	if got := p.value("#group-slug"); got != "fleet" || p.enabled("#group-name") {
		t.Fatalf("group edit form: slug %q, name enabled %v", got, p.enabled("#group-name"))
	}
	if n := evalJS[int](p, `document.querySelectorAll('#group-targets tr').length`); n != 2 {
		t.Fatalf("group edit form has %d member rows, want 2", n)
	}
	p.click("#group-targets tr:nth-child(2) .remove-target")
	p.setValue("#group-strategy", "random")
	p.click("#group-save")
	waitState(t, c, node, func(s *cluster.State) bool {
		g := s.Groups["fleet"]
		return g.Strategy == "random" && len(g.Members) == 1 && g.Members[0].Provider == "gpu-a"
	})
	p.eventually(func() string { return "the group card to show random" }, func() bool {
		// read in the page: the card is redrawn when the list reloads
		return evalJS[string](p, `(document.querySelector('section.editor[data-key="fleet"] select') || {}).value || ''`) == "random"
	})

	// Deleting the group after confirming; deleting a provider a route
	// still targets is refused with the server's reason.
	p.click(`section.editor[data-key="fleet"] button.delete`)
	p.waitText("#confirm", "Delete provider group fleet?")
	p.click("#confirm-ok")
	p.waitText("#routes-msg", "Deleted provider group fleet")
	if _, ok := state().Groups["fleet"]; ok {
		t.Fatal("the group is still stored")
	}
	p.run("providers", chromedp.Navigate(p.base+"/ui/#/providers"))
	p.click(`#providers tr[data-name="gpu-a"] button.delete`)
	p.waitText("#confirm", "Delete provider gpu-a?")
	p.click("#confirm-ok")
	p.waitText("#providers-msg", `provider "gpu-a" is a target of route "chat"`)
	if _, ok := state().Providers["gpu-a"]; !ok {
		t.Fatal("a provider in use was deleted")
	}

	// A key allowed to call chat, made with the keyboard alone (Enter
	// submits); its secret shown once.
	p.run("keys", chromedp.Navigate(p.base+"/ui/#/keys"))
	p.waitText(`#keys tr[data-name="toml-key"]`, "managed by rolter.toml")
	if p.enabled(`#keys tr[data-name="toml-key"] button.delete`) {
		t.Error("the rolter.toml key can be deleted from the UI")
	}
	p.click("#new-key")
	if u := p.unlabelled(); u != "" {
		t.Errorf("key form controls without a label:\n%s", u)
	}
	p.run("type key", chromedp.SendKeys(chromedp.CSS("#key-name"), "team-search"), chromedp.SendKeys(chromedp.CSS("#key-models"), "chat"),
		chromedp.KeyEvent(kb.Enter))
	p.waitText("#secret-panel", "shown only this once")
	if !evalJS[bool](p, `document.activeElement && document.activeElement.id === 'copy-secret'`) {
		t.Error("focus is not on the secret's Copy button")
	}
	secret := p.value("#secret-value")
	if !strings.HasPrefix(secret, "sk-rolter-") {
		t.Fatalf("secret panel shows %q", secret)
	}
	p.shot("13-key-secret")
	p.click("#secret-done")
	p.waitText(`#keys tr[data-name="team-search"]`, "chat")
	p.shot("14-keys")

	// Through the routers: 200 with the new key, 24 requests on one
	// router and 12 on another.
	eventuallyStatus(t, fleet[0].api, secret, "chat", 200)
	eventuallyStatus(t, fleet[1].api, secret, "chat", 200)
	sent := 2
	for i := range 34 {
		if code, body := chat(t, fleet[i%3/2].api, secret, "chat"); code != 200 {
			t.Fatalf("chat %d: %d %s", i, code, body)
		}
		sent++
	}
	if servedA.Load() == 0 || servedB.Load() == 0 {
		t.Fatalf("weighted 3:1 sent %d to gpu-a and %d to gpu-b", servedA.Load(), servedB.Load())
	}
	pushAll(fleet)

	// The route page: the requests sent through both routers, and each
	// target's share beside its configured weight.
	p.run("serving", chromedp.Navigate(p.base+"/ui/#/serving"))
	pool := `section.serving[data-pool="chat"]`
	got := p.waitText(pool+" .req-count", "")
	p.eventually(func() string { return fmt.Sprintf("request count %q to be %d ± 1", got, sent) }, func() bool {
		got = p.text(pool + " .req-count")
		n, err := strconv.Atoi(strings.ReplaceAll(got, ",", ""))
		return err == nil && n >= sent-1 && n <= sent+1
	})
	if nodes := p.text(pool); !strings.Contains(nodes, "reported by 2 routers") {
		t.Errorf("the route page does not add both routers:\n%s", nodes)
	}
	for name, served := range map[string]int64{"gpu-a/chat": servedA.Load(), "gpu-b/chat": servedB.Load()} {
		row := fmt.Sprintf(`%s tr[data-target=%q]`, pool, name)
		want := fmt.Sprintf("%.1f%%", 100*float64(served)/float64(sent))
		if share := p.waitText(row+" .observed-share", "%"); share != want {
			t.Errorf("%s observed share %q, want %s (%d of %d)", name, share, want, served, sent)
		}
		if attempts := p.text(row + " .attempts"); attempts != strconv.FormatInt(served, 10) {
			t.Errorf("%s attempts %q, engine served %d", name, attempts, served)
		}
	}
	if cfg := p.text(pool + ` tr[data-target="gpu-a/chat"]`); !strings.Contains(cfg, "75.0% (weight 3)") {
		t.Errorf("gpu-a row lacks its configured share:\n%s", cfg)
	}
	// The prefix-cache hit rate is the engine's cached ÷ prompt tokens.
	if hit := p.text(pool + ` tr[data-target="gpu-a/chat"] .hit-cell`); hit != "75.0%" {
		t.Errorf("gpu-a hit rate %q, want 75.0%% (30 of 40 prompt tokens cached)", hit)
	}
	if hit := p.text(pool + ` tr[data-target="gpu-b/chat"] .hit-cell`); hit != "not reported" {
		t.Errorf("gpu-b reports no cached tokens, hit rate cell %q", hit)
	}
	p.shot("15-serving")
	// The hour's window holds the same requests (all sent this minute).
	p.setValue("#serving-window", "60m")
	if got := p.waitText(pool+" .req-count", strconv.Itoa(sent)); got != strconv.Itoa(sent) {
		t.Errorf("60-minute window counts %q, want %d", got, sent)
	}

	// Deleting the key in the UI: the next request gets 401.
	p.run("keys", chromedp.Navigate(p.base+"/ui/#/keys"))
	p.click(`#keys tr[data-name="team-search"] button.delete`)
	dialog := p.waitText("#confirm", "Delete API key team-search?")
	if !strings.Contains(dialog, "401") {
		t.Errorf("the confirmation does not say what deleting does:\n%s", dialog)
	}
	p.shot("16-confirm-delete-key")
	// Escape cancels and deletes nothing; then confirm for real.
	p.run("escape", chromedp.KeyEvent(kb.Escape))
	p.eventually(func() string { return "the dialog to close" }, func() bool { return !evalJS[bool](p, `!!document.querySelector('#confirm')`) })
	if _, ok := state().Keys["team-search"]; !ok {
		t.Fatal("Escape deleted the key")
	}
	p.click(`#keys tr[data-name="team-search"] button.delete`)
	p.waitText("#confirm", "team-search")
	p.click("#confirm-ok")
	p.waitText("#keys-msg", "Deleted API key team-search")
	if _, ok := state().Keys["team-search"]; ok {
		t.Fatal("the key is still stored")
	}
	eventuallyStatus(t, fleet[0].api, secret, "chat", 401)
	eventuallyStatus(t, fleet[1].api, secret, "chat", 401)

	// A viewer token, created in the UI, sees every screen and no enabled
	// button anywhere.
	p.run("tokens", chromedp.Navigate(p.base+"/ui/#/tokens"))
	p.click("#new-token")
	p.run("type token", chromedp.SendKeys(chromedp.CSS("#token-name"), "ops-viewer"))
	p.setValue("#token-role", "viewer")
	p.click("#token-save")
	p.waitText("#secret-panel", "ops-viewer")
	viewer := p.value("#secret-value")
	p.click("#secret-done")
	p.waitText(`#tokens tr[data-name="ops-viewer"]`, "viewer")
	p.shot("17-admin-tokens")
	p.click("#signout")
	p.signInWith(viewer, "#/mesh")
	p.waitText("#whoami", "viewer")
	pushAll(fleet) // keep the route stats fresh for the viewer's visit
	for _, sc := range []struct{ hash, ready string }{
		{"#/mesh", "#routers"}, {"#/serving", `section.serving[data-pool="chat"]`}, {"#/routes", `section.editor[data-key="chat"]`},
		{"#/providers", "#providers"}, {"#/keys", "#keys"}, {"#/tokens", "#tokens-forbidden"}, {"#/audit", ".banner"},
		{"#/adaptive/settings", ".banner"}, {"#/adaptive/telemetry", ".banner"},
	} {
		p.run("viewer "+sc.hash, chromedp.Navigate(p.base+"/ui/"+sc.hash))
		p.waitText(sc.ready, "")
		if n := evalJS[int](p, `document.querySelectorAll('#main button:not([disabled])').length`); n != 0 {
			t.Errorf("viewer on %s sees %d enabled buttons: %s", sc.hash, n,
				evalJS[string](p, `[...document.querySelectorAll('#main button:not([disabled])')].map((b) => b.textContent).join(', ')`))
		}
		if sc.hash == "#/routes" {
			p.waitText("#viewer-banner", "change nothing")
			p.shot("18-viewer-routes")
		}
	}
	if strings.Contains(p.text(".nav"), "Admin tokens") {
		t.Error("a viewer is offered the Admin tokens screen")
	}

	// The mesh page: every router with its admin address, build and
	// applied config version, all reported over the telemetry channel.
	waitState(t, c, node, func(s *cluster.State) bool {
		for _, fr := range fleet {
			if fr.srv.ConfigVersion() != s.ConfigVersion {
				return false
			}
		}
		return true
	})
	pushAll(fleet)
	p.run("mesh", chromedp.Navigate(p.base+"/ui/#/mesh"))
	for _, fr := range fleet {
		row := fmt.Sprintf(`#routers tr[data-node=%q]`, fr.pusher.NodeID)
		p.waitText(row+" .admin-addr", strings.TrimPrefix(fr.admin.URL, "http://"))
		p.waitText(row+" .build", "v0.9.0-test")
		p.waitText(row+" .converged", "converged")
	}
	p.shot("19-mesh-routers")

	if *screenshotDir != "" {
		servingScreenshot(t, p, fleet, tomlKey)
	}
}

// servingScreenshot sends a minute of varying traffic, streamed and not,
// through the routers (with the rolter.toml key), so the Serving page's
// charts and TTFT draw from real 10-second slots, then saves it.
func servingScreenshot(t *testing.T, p *page, fleet []*fleetRouter, key string) {
	t.Helper()
	for slot := range 6 {
		end := time.Now().Add(10 * time.Second)
		for i := 0; time.Now().Before(end); i++ {
			body := `{"model":"chat","messages":[{"role":"user","content":"hello"}]}`
			if i%2 == 0 {
				body = `{"model":"chat","stream":true,"messages":[{"role":"user","content":"hello"}]}`
			}
			if code, out := post(t, fleet[i%len(fleet)].api, key, body); code != 200 {
				t.Fatalf("chat: %d %s", code, out)
			}
			time.Sleep(time.Duration(40+60*(slot%3)) * time.Millisecond)
		}
	}
	pushAll(fleet)
	p.run("serving", chromedp.Navigate(p.base+"/ui/#/serving"))
	p.waitText(`section.serving[data-pool="chat"]`, "reported by 3 routers")
	p.shot("15-serving")
}

// TestEmptyStatesAgainstRealCluster: a fresh cluster with nothing seeded
// says so on every management screen, and says what to do first.
func TestEmptyStatesAgainstRealCluster(t *testing.T) {
	const super, internal = "dashboard-super-token", "dashboard-internal-token"
	seed := config.Default()
	p := newPage(t, newFakeAdmin(super))
	c, node := realCluster(t, &seed, super, internal)
	fleet := startFleet(t, c, []int{node}, &seed, internal)
	p.base = fleet[0].admin.URL
	p.signIn("#/providers")
	for _, sc := range []struct{ hash, sel, want, shot string }{
		{"#/providers", "#providers-empty", "Create one, then a route over it", "20-providers-empty"},
		{"#/routes", "#routes-empty", "Create a provider first", "21-routes-empty"},
		{"#/keys", "#keys-empty", "the router accepts every client", "22-keys-empty"},
		{"#/serving", "#serving-empty", "No traffic in the last hour", ""},
	} {
		p.run(sc.hash, chromedp.Navigate(p.base+"/ui/"+sc.hash))
		p.waitText(sc.sel, sc.want)
		if sc.shot != "" {
			p.shot(sc.shot)
		}
	}
}
