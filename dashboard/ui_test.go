package dashboard

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

func TestSignIn(t *testing.T) {
	p := newPage(t, newFakeAdmin(testToken))
	p.open("#/mesh")
	p.run("wrong token",
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token"),
		chromedp.Click(chromedp.CSS("#signin")))
	p.waitText("#signin-error", "not accepted")

	p.setValue("#token", testToken)
	p.run("right token", chromedp.Click(chromedp.CSS("#signin")), chromedp.WaitVisible(chromedp.CSS("#main")))
	p.waitText("#screen-mesh", "gpu-a1")

	// The token lives in sessionStorage: a reload stays signed in.
	p.run("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#main")))
	p.waitText("#screen-mesh", "router-1")

	// Signing out forgets it: a reload asks again.
	p.run("sign out", chromedp.Click(chromedp.CSS("#signout")), chromedp.WaitVisible(chromedp.CSS("#token")))
	p.run("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#token")))

	// A token revoked while signed in sends the operator back to sign-in.
	p.signIn("#/mesh")
	p.waitText("#engines", "gpu-a1")
	p.lock(func(f *fakeAdmin) { f.token = "rotated" })
	p.waitText("#signin-error", "sign in again")
}

func TestLowerRoleSeesWhyNotSignedOut(t *testing.T) {
	fake := newFakeAdmin(testToken)
	fake.viewerToken = "viewer-token"
	p := newPage(t, fake)
	p.open("#/mesh")
	p.run("sign in as viewer",
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), "viewer-token"),
		chromedp.Click(chromedp.CSS("#signin")))
	p.waitText("#engines", "gpu-a1")
	p.run("settings", chromedp.Navigate(p.base+"/ui/#/adaptive/settings"))
	p.waitText("#screen-adaptive-settings", "requires the superadmin role")
	if evalJS[bool](p, `!!document.querySelector('#token')`) {
		t.Error("a 403 signed the operator out")
	}
}

func TestMeshShowsLiveEngines(t *testing.T) {
	p := newPage(t, newFakeAdmin(testToken))
	p.signIn("#/mesh")
	engines := p.waitText("#engines", "gpu-a1")
	for _, want := range []string{"gpu-a2", "gpu-a3", "gpu-b1", "gpu-b2", "http://10.0.2.31:8000", "Qwen/Qwen2.5-7B-Instruct", "sql-lora", "62%"} {
		if !strings.Contains(engines, want) {
			t.Errorf("engines table lacks %q:\n%s", want, engines)
		}
	}
	for node, state := range map[string]string{"gpu-a1": "EXACT", "gpu-b1": "DEGRADED", "gpu-a3": "STALE", "gpu-b2": "no KV events"} {
		if got := p.text(fmt.Sprintf(`#engines tr[data-node=%q] td.kvstate`, node)); !strings.Contains(got, state) {
			t.Errorf("engine %s KV state = %q, want %s", node, got, state)
		}
	}
	if got := p.text(`#engines tr[data-node="gpu-a1"] td.blocks`); got != "18,432" {
		t.Errorf("gpu-a1 resident blocks = %q, want 18,432", got)
	}
	if got := p.text(`#engines tr[data-node="gpu-a1"] td.prefill`); got != "12,800 tok" {
		t.Errorf("gpu-a1 queued prefill = %q, want 12,800 tok", got)
	}

	// Routers: role, applied version, convergence.
	if got := p.text(`#routers tr[data-node="router-1"]`); !strings.Contains(got, "leader") || !strings.Contains(got, "converged") {
		t.Errorf("router-1 row = %q, want leader and converged", got)
	}
	p.waitText(`#routers tr[data-node="router-3"] td.converged`, "behind by 1")

	// Live: what the sidecars report next shows up without a reload.
	for _, waiting := range []int{17, 23} {
		p.lock(func(f *fakeAdmin) { f.pinned["gpu-a2"] = [2]int{4, waiting} })
		p.waitText(`#engines tr[data-node="gpu-a2"] .waiting`, fmt.Sprint(waiting))
	}
	p.lock(func(f *fakeAdmin) { f.routers[2].AppliedConfigVersion = f.configVersion })
	p.waitText(`#routers tr[data-node="router-3"] td.converged`, "converged")

	// The charts draw one line per engine from the history the page keeps.
	var lines int
	p.eventually(func() string { return fmt.Sprintf("5 queue-depth lines (have %d)", lines) }, func() bool {
		lines = evalJS[int](p, `document.querySelectorAll('svg.chart')[0].querySelectorAll('path.chart-line').length`)
		return lines == 5
	})
	hitLines := evalJS[int](p, `document.querySelectorAll('svg.chart')[1].querySelectorAll('path.chart-line').length`)
	if hitLines != 3 { // only engines with live KV state report a hit rate
		t.Errorf("hit-rate chart has %d lines, want 3", hitLines)
	}
}

func TestPolicyChangePersists(t *testing.T) {
	p := newPage(t, newFakeAdmin(testToken))
	p.signIn("#/adaptive/settings")
	p.run("settings", chromedp.WaitVisible(chromedp.CSS("#latency_weight")))
	if got := p.value("#exploration_pct"); got != "5" {
		t.Fatalf("exploration shown as %q, want 5 (percent of 0.05)", got)
	}
	if got := p.text("#latency_weight_share"); got != "57% of total" { // 1 / 1.75
		t.Errorf("latency share = %q, want 57%% of total", got)
	}

	p.setValue("#latency_weight", "2")
	if got := p.text("#latency_weight_share"); got != "73% of total" { // 2 / 2.75
		t.Errorf("latency share after edit = %q, want 73%% of total", got)
	}
	p.setValue("#exploration_pct", "12.5")
	p.setValue("#min_samples", "100")
	p.run("save", chromedp.Click(chromedp.CSS("#save-policy")))
	p.waitText("#policy-ok", "Saved")

	p.lock(func(f *fakeAdmin) {
		if f.policy.LatencyWeight != 2 || f.policy.ExplorationRatio != 0.125 || f.policy.MinSamples != 100 || f.policy.CostWeight != 0.5 {
			t.Errorf("stored policy = %+v, want latency 2, exploration 0.125, min_samples 100, cost 0.5", f.policy)
		}
		if f.configVersion != 43 {
			t.Errorf("config_version = %d, want 43", f.configVersion)
		}
	})

	p.run("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#latency_weight")))
	for sel, want := range map[string]string{"#latency_weight": "2", "#exploration_pct": "12.5", "#min_samples": "100", "#cost_weight": "0.5"} {
		if got := p.value(sel); got != want {
			t.Errorf("after reload %s = %q, want %q", sel, got, want)
		}
	}

	p.run("audit", chromedp.Navigate(p.base+"/ui/#/audit"))
	p.waitText("#audit", "adaptive_routing_policy.update")
	if got := p.text("#audit tbody tr"); !strings.Contains(got, "adaptive_routing_policy.update") || !strings.Contains(got, "exploration_ratio=0.125") {
		t.Errorf("newest audit entry = %q, want the policy update with its new exploration_ratio", got)
	}
}

func TestInvalidPolicyShowsServerMessage(t *testing.T) {
	cases := []struct {
		name  string
		edits map[string]string
		want  string
		field string // the input the message names, marked invalid
	}{
		{"exploration above 50 percent", map[string]string{"#exploration_pct": "60"}, "exploration_ratio must be in [0, 0.5]", "#exploration_pct"},
		{"all-zero blend", map[string]string{"#latency_weight": "0", "#cost_weight": "0", "#load_weight": "0"}, "use enabled = false to stop adaptive routing", ""},
		{"weight above 100", map[string]string{"#cost_weight": "250"}, "cost_weight must be a finite number in [0, 100]", "#cost_weight"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPage(t, newFakeAdmin(testToken))
			p.signIn("#/adaptive/settings")
			p.run("settings", chromedp.WaitVisible(chromedp.CSS("#latency_weight")))
			for sel, v := range tc.edits {
				p.setValue(sel, v)
			}
			p.run("save", chromedp.Click(chromedp.CSS("#save-policy")))
			if got := p.waitText("#policy-error", tc.want); strings.Contains(p.text("#policy-ok"), "Saved") {
				t.Errorf("error %q shown together with a success message", got)
			}
			if tc.field != "" && !evalJS[bool](p, fmt.Sprintf(`document.querySelector(%q).classList.contains('invalid')`, tc.field)) {
				t.Errorf("%s is not marked as the field the server refused", tc.field)
			}
			p.lock(func(f *fakeAdmin) {
				if f.policyPuts != 1 {
					t.Errorf("server saw %d PUTs, want 1 (the server validates, not the page)", f.policyPuts)
				}
				if f.configVersion != 42 || f.policy.ExplorationRatio != 0.05 || f.policy.LatencyWeight != 1 || f.policy.CostWeight != 0.5 {
					t.Errorf("a refused PUT changed state: version %d policy %+v", f.configVersion, f.policy)
				}
			})
			// The operator's input stays for correcting.
			for sel, v := range tc.edits {
				if got := p.value(sel); got != v {
					t.Errorf("%s reset to %q after the refusal", sel, got)
				}
			}
			p.run("reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#exploration_pct")))
			if got := p.value("#exploration_pct"); got != "5" {
				t.Errorf("after reload exploration = %q, want the unchanged 5", got)
			}
		})
	}
}

func TestKillSwitchShowsAffectedRoutes(t *testing.T) {
	fake := newFakeAdmin(testToken)
	fake.policy.Enabled = true
	p := newPage(t, fake)
	p.signIn("#/adaptive/settings")
	note := p.waitText("#affected-routes", "The blend governs these routes")
	for _, r := range []string{"chat-adaptive", "support-bot"} {
		if !strings.Contains(note, r) {
			t.Errorf("affected routes %q lack %s", note, r)
		}
	}
	if strings.Contains(note, "qwen-7b") {
		t.Errorf("affected routes list a route not on adaptive: %q", note)
	}

	p.run("flip the kill switch", chromedp.Click(chromedp.CSS("label.switch")))
	// The kill switch falls back to the pipeline stack (seed 000), not to
	// the static weights seed 003 names; the screen says what the code does.
	note = p.waitText("#affected-routes", "Saving switches these routes back to their pipeline fallback stack")
	if !strings.Contains(note, "chat-adaptive") || !strings.Contains(note, "support-bot") {
		t.Errorf("after flipping, affected routes = %q", note)
	}
	p.run("save", chromedp.Click(chromedp.CSS("#save-policy")))
	p.waitText("#policy-ok", "Saved")
	if note = p.waitText("#affected-routes", "Held back on their pipeline fallback stack"); strings.Contains(note, "static target weights") {
		t.Errorf("affected routes still name static target weights: %q", note)
	}
	p.lock(func(f *fakeAdmin) {
		if f.policy.Enabled {
			t.Error("kill switch still on after saving it off")
		}
	})
}

func TestTelemetryEmptyStates(t *testing.T) {
	cases := []struct {
		name    string
		enabled bool
		shown   string
		hidden  string
		want    []string
	}{
		{"kill switch off", false, "#empty-kill-switch", "#empty-no-reports",
			[]string{"kill switch", "enabled = false", "chat-adaptive", "support-bot", "Nothing is wrong with the gateways", "Open Adaptive Routing → Settings",
				"pipeline fallback stack"}},
		{"switch on, nothing reporting", true, "#empty-no-reports", "#empty-kill-switch",
			[]string{"No gateway is reporting", "ROLTER_NODE_ID", "adaptive-routing telemetry report failed", "60 s", "chat-adaptive"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake := newFakeAdmin(testToken)
			fake.policy.Enabled = tc.enabled
			p := newPage(t, fake)
			p.signIn("#/adaptive/telemetry")
			got := p.waitText(tc.shown, tc.want[0])
			for _, w := range tc.want[1:] {
				if !strings.Contains(got, w) {
					t.Errorf("%s lacks %q:\n%s", tc.shown, w, got)
				}
			}
			other := evalJS[bool](p, fmt.Sprintf(`!!document.querySelector(%q)`, tc.hidden))
			if other {
				t.Errorf("both empty states shown")
			}
			if !tc.enabled {
				// The screen renders anew on every refresh (200 ms here), so
				// the link chromedp found can be replaced before its click
				// lands ("node is detached"); the page clicks it in one step.
				if !evalJS[bool](p, `(() => { const a = document.querySelector('#to-settings'); if (!a) return false; a.click(); return true; })()`) {
					t.Fatal("no #to-settings link")
				}
				p.run("follow the link", chromedp.WaitVisible(chromedp.CSS("#enabled")))
			}
			// Once a gateway reports, the empty state gives way to its data.
			p.lock(func(f *fakeAdmin) { f.telemetry = sampleTelemetry(time.Now(), f.policy) })
			p.run("telemetry", chromedp.Navigate(p.base+"/ui/?refresh_ms=200#/adaptive/telemetry"))
			p.waitText(`[data-model="chat-adaptive"]`, "router-1")
		})
	}
}

func TestTelemetryShowsScores(t *testing.T) {
	fake := newFakeAdmin(testToken)
	fake.policy.Enabled = true
	fake.telemetry = sampleTelemetry(time.Now(), fake.policy)
	p := newPage(t, fake)
	p.signIn("#/adaptive/telemetry")
	node := `[data-model="chat-adaptive"] [data-node="router-1"]`
	p.waitText(node, "Blend active")
	for mode, want := range map[string]string{"blend": "Blend 1,612", "exploration": "Exploration 88", "fallback": "Fallback 140"} {
		if got := strings.Join(strings.Fields(p.text(node+fmt.Sprintf(` [data-mode=%q]`, mode))), " "); !strings.HasPrefix(got, want) {
			t.Errorf("key for %s = %q, want it to start with %q", mode, got, want)
		}
	}
	row := p.text(node + ` tr.preferred`)
	if !strings.Contains(row, "Preferred") || !strings.Contains(row, "gpu-a1/") || !strings.Contains(row, "412") {
		t.Errorf("preferred row on router-1 = %q, want gpu-a1 with its 412 ms latency", row)
	}
	badges := evalJS[int](p, `document.querySelectorAll('[data-model="chat-adaptive"] [data-node="router-2"] .preferred-badge').length`)
	if badges != 0 {
		t.Errorf("router-2 is not blending but shows %d Preferred badges", badges)
	}
	if got := p.text(`[data-model="chat-adaptive"] [data-node="router-2"]`); !strings.Contains(got, "not engaged") {
		t.Errorf("router-2 = %q, want it marked not engaged", got)
	}
	if got := p.text(`[data-model="support-bot"] tr.preferred`); !strings.Contains(got, "hosted-api/gpt-4o-mini") {
		t.Errorf("support-bot preferred row = %q, want the higher-scoring hosted-api target", got)
	}
}

func TestRouteEditors(t *testing.T) {
	for _, served := range []bool{true, false} {
		name := "strategies endpoint served"
		if !served {
			name = "strategies endpoint absent (built-in list)"
		}
		t.Run(name, func(t *testing.T) {
			fake := newFakeAdmin(testToken)
			fake.noStrategies = !served
			// A strategy the backend allows ahead of the dashboard.
			fake.routes = append(fake.routes, fakeRoute{Model: "future", Strategy: "speculative_v2",
				Targets: []fakeTarget{{Provider: "gpu-a1", Model: "m", Weight: 1}}})
			p := newPage(t, fake)
			p.signIn("#/routes")
			card := func(key string) string { return fmt.Sprintf(`section.editor[data-key=%q]`, key) }
			p.waitText(card("chat-adaptive"), "chat-adaptive")

			// A held strategy the picker does not offer still shows as itself.
			if got := p.value(card("chat-adaptive") + " select"); got != "adaptive" {
				t.Fatalf("chat-adaptive picker value = %q, want adaptive", got)
			}
			shown := evalJS[string](p, `(() => { const s = document.querySelector('section.editor[data-key="batch"] select'); return s.options[s.selectedIndex].text; })()`)
			if !strings.HasPrefix(shown, "adaptive") {
				t.Errorf("group on adaptive shows %q in its picker", shown)
			}
			if got := p.value(card("future") + " select"); got != "speculative_v2" {
				t.Errorf("a route on a strategy unknown to the dashboard shows %q in its picker", got)
			}
			offered := evalJS[[]string](p, `[...document.querySelector('section.editor[data-key="qwen-7b"] select').options].map(o => o.value)`)
			if len(offered) != 13 || strings.Contains(strings.Join(offered, ","), "adaptive") {
				t.Errorf("picker offers %v, want the 13 strategies other than adaptive", offered)
			}

			// Weights: a share only where the strategy reads them.
			if got := p.text(card("qwen-7b")); !strings.Contains(got, "75%") || !strings.Contains(got, "25%") {
				t.Errorf("weighted route lacks its 75/25 share:\n%s", got)
			}
			if got := p.text(card("embed-small")); !strings.Contains(got, "round_robin ignores weights") || strings.Contains(got, "67%") {
				t.Errorf("round_robin route should say weights are ignored and show no share:\n%s", got)
			}

			// Telemetry hints say, per target, whether a source is live.
			hint := p.text(card("llama-3.1-8b") + ` [data-hint="kv_events"]`)
			for _, w := range []string{"live on 2 of 3 targets", "gpu-a3", "STALE", "least-load fallback"} {
				if !strings.Contains(hint, w) {
					t.Errorf("precise_cache_aware hint lacks %q:\n%s", w, hint)
				}
			}
			if hint := p.text(card("Qwen/Qwen2.5-7B-Instruct") + ` [data-hint="lmcache"]`); !strings.Contains(hint, "live on 2 of 2") {
				t.Errorf("lmcache_aware hint on a discover route = %q", hint)
			}

			// An unrelated edit keeps the adaptive strategy.
			p.setValue(card("chat-adaptive")+" input.weight", "5")
			p.run("save", chromedp.Click(chromedp.CSS(card("chat-adaptive")+" button.save")))
			p.waitText(card("chat-adaptive")+" .card-msg", "Saved")
			p.lock(func(f *fakeAdmin) {
				body := f.routePuts[len(f.routePuts)-1]
				ts, _ := body["targets"].([]any)
				first, _ := ts[0].(map[string]any)
				if body["strategy"] != "adaptive" || first["weight"] != float64(5) || len(ts) != 2 {
					t.Errorf("PUT body = %v, want strategy adaptive and the first weight 5", body)
				}
			})
			if got := p.value(card("chat-adaptive") + " select"); got != "adaptive" {
				t.Errorf("after saving, picker shows %q", got)
			}

			// A strategy the operator picks is sent, and the weights note follows it.
			p.setValue(card("qwen-7b")+" select", "round_robin")
			p.waitText(card("qwen-7b"), "round_robin ignores weights")
			p.run("save", chromedp.Click(chromedp.CSS(card("qwen-7b")+" button.save")))
			p.waitText(card("qwen-7b")+" .card-msg", "Saved")
			p.lock(func(f *fakeAdmin) {
				if got := f.routes[3].Strategy; got != "round_robin" {
					t.Errorf("qwen-7b strategy stored as %q", got)
				}
			})

			// The server's refusal shows inline on the card.
			p.setValue(card("llama-fleet")+" input.weight", "-2")
			p.run("save", chromedp.Click(chromedp.CSS(card("llama-fleet")+" button.save")))
			p.waitText(card("llama-fleet")+" .card-msg", "weight must be an integer ≥ 1")
		})
	}
}

// The Mesh page shows each router's admission queue per band and each
// engine's saturation as every router running admission sees it.
func TestMeshShowsAdmissionQueuesAndSaturation(t *testing.T) {
	fake := newFakeAdmin(testToken)
	fake.routers[0].Admission = map[string]any{
		"queues":            map[string]any{"chat": map[string]any{"critical": 2, "standard": 5, "sheddable": 11}},
		"engine_saturation": map[string]any{"gpu-a1/llama": 1.0, "gpu-a2/llama": 0.5},
	}
	fake.routers[1].Admission = map[string]any{"queues": map[string]any{}, "engine_saturation": map[string]any{"gpu-a1/llama": 0.75}}
	p := newPage(t, fake)
	p.signIn("#/mesh")
	q := p.waitText(`#routers tr[data-node="router-1"] .admission-queue`, "chat 2 / 5 / 11")
	if !strings.Contains(q, "chat") {
		t.Fatalf("router-1's queue cell: %q", q)
	}
	if got := p.text(`#routers tr[data-node="router-2"] .admission-queue`); got != "empty" {
		t.Errorf("router-2 (admission on, nothing queued): %q", got)
	}
	if got := p.text(`#routers tr[data-node="router-3"] .admission-queue`); got != "off" {
		t.Errorf("router-3 (no admission report): %q", got)
	}
	row := p.waitText(`#saturation tr[data-target="gpu-a1/llama"]`, "100%")
	if !strings.Contains(row, "75%") {
		t.Errorf("gpu-a1's saturation row %q: want router-1's 100%% and router-2's 75%%", row)
	}
}
