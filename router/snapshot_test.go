package router

import (
	"strings"
	"testing"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/strategies"
)

func TestProviderGroupBalancerIsSharedAcrossRequests(t *testing.T) {
	a := newEngine(t, okChat)
	b := newEngine(t, okChat)
	h := newHarness(t, providers("a", a.URL, "b", b.URL)+`
[[provider_groups]]
name = "Fleet"
slug = "fleet"
strategy = "round_robin"
members = [{provider = "a"}, {provider = "b"}]

[[provider_groups]]
name = "Declared"
slug = "qwen"
members = [{provider = "b", model = "Qwen/Qwen2.5-7B"}]
`, nil)
	var order []string
	for i := range 6 {
		// A different requested model each time: every request builds a
		// synthetic entry, and all of them share the group's balancer.
		model := []string{"lora-x", "lora-y", "base"}[i%3]
		before := a.hits.Load()
		if code, _, body := h.chat("fleet/" + model); code != 200 {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
		e := b
		if a.hits.Load() > before {
			order = append(order, "a")
			e = a
		} else {
			order = append(order, "b")
		}
		if got := e.lastBody()["model"]; got != model {
			t.Fatalf("passthrough member got model %v, want %q", got, model)
		}
	}
	if strings.Join(order, "") != "ababab" {
		t.Fatalf("round_robin over the group went %v, want alternation", order)
	}
	if code, _, _ := h.chat("qwen/anything"); code != 200 || b.lastBody()["model"] != "Qwen/Qwen2.5-7B" {
		t.Fatalf("declared member must forward its own model, got %v", b.lastBody()["model"])
	}
	if code, _, _ := h.chat("a/pinned-model"); code != 200 || a.lastBody()["model"] != "pinned-model" {
		t.Fatalf("provider pin: %v", a.lastBody()["model"])
	}
}

func TestResolveSetsAdapterOnPassthroughGroupsOnly(t *testing.T) {
	eng := newEngine(t, okChat)
	h := newHarness(t, providers("a", eng.URL)+`
[[routes]]
model = "org/llama"
targets = [{provider = "a"}]
[[provider_groups]]
name = "Fleet"
slug = "fleet"
members = [{provider = "a"}]
[[provider_groups]]
name = "Declared"
slug = "decl"
members = [{provider = "a", model = "base"}]
`, nil)
	sn := h.srv.snap.Load()
	cases := []struct {
		addr, pool, requested, adapter string
	}{
		{"org/llama", "org/llama", "org/llama", ""}, // a route whose name has a slash
		{"fleet/sql-lora", "fleet/*", "sql-lora", "sql-lora"},
		{"decl/x", "decl/*", "x", ""},
		{"a/x", "a/*", "x", ""},
	}
	for _, tc := range cases {
		r, err := sn.resolve(tc.addr)
		if err != nil {
			t.Fatalf("%s: %v", tc.addr, err)
		}
		if r.pool.key != tc.pool || r.requested != tc.requested || r.adapter != tc.adapter {
			t.Errorf("%s: pool %s requested %s adapter %q", tc.addr, r.pool.key, r.requested, r.adapter)
		}
	}
	for _, bad := range []string{"fleet/", "nope/x", "llama"} {
		if _, err := sn.resolve(bad); err == nil {
			t.Errorf("%q resolved", bad)
		}
	}
	if got := strings.Join(sn.models, ","); got != "decl/base,fleet/*,org/llama" {
		t.Errorf("/v1/models ids %s", got)
	}
}

func TestApplyKeepsLearnedStateAndRejectsBadConfig(t *testing.T) {
	eng := newEngine(t, status(500))
	text := providers("a", eng.URL) + `
[[routes]]
model = "m"
targets = [{provider = "a"}]
[retry]
attempts = 0
[health]
enabled = false
`
	h := newHarness(t, text, nil)
	for range 5 {
		h.chat("m")
	}
	if v := h.srv.ConfigVersion(); v != 1 {
		t.Fatalf("version %d", v)
	}
	cfg, err := config.Parse("rolter.toml", []byte(text+"\n[[routes]]\nmodel = \"n\"\ntargets = [{provider = \"a\"}]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if v := h.srv.ConfigVersion(); v != 2 {
		t.Fatalf("version after Apply %d", v)
	}
	// The breaker opened under the old snapshot is still open.
	if code, _, body := h.chat("n"); code != 503 || !strings.Contains(body, "breaker_open") {
		t.Fatalf("breaker state lost on Apply: %d %s", code, body)
	}
	if h.srv.tracker.Target("a/m").Picks() != 5 {
		t.Fatal("tracker state lost on Apply")
	}
	bad := *cfg
	bad.Routes = append([]config.Route(nil), cfg.Routes...)
	bad.Routes[0].Strategy = "no_such_strategy"
	if err := h.srv.Apply(&bad); err == nil {
		t.Fatal("a config with an unknown strategy was applied")
	}
	if v := h.srv.ConfigVersion(); v != 2 {
		t.Fatalf("a failed Apply changed the version to %d", v)
	}
}

// Every registered strategy builds inside a snapshot and routes a request,
// on a route and on a provider group.
func TestEveryStrategyServes(t *testing.T) {
	a := newEngine(t, okChat)
	b := newEngine(t, okChat)
	for _, name := range strategies.Names() {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, providers("a", a.URL, "b", b.URL)+`
[[routes]]
model = "m"
strategy = "`+name+`"
targets = [{provider = "a"}, {provider = "b", weight = 2}]
[[provider_groups]]
name = "g"
slug = "g"
strategy = "`+name+`"
members = [{provider = "a"}, {provider = "b"}]
`, nil)
			for _, model := range []string{"m", "g/lora"} {
				if code, _, body := h.chat(model, "x-session-id", "s1", headerTokenIDs, "1,2,3"); code != 200 {
					t.Fatalf("%s: %d %s", model, code, body)
				}
			}
		})
	}
}

// A disabled route or provider group answers 404 in the OpenAI error
// shape, as an unknown model does, and leaves GET /v1/models.
func TestDisabledRoutesAndGroupsAnswer404(t *testing.T) {
	eng := newEngine(t, okChat)
	h := newHarness(t, providers("a", eng.URL)+`
[[routes]]
model = "on"
targets = [{provider = "a"}]

[[routes]]
model = "off"
enabled = false
targets = [{provider = "a"}]

[[provider_groups]]
name = "Fleet"
slug = "fleet"
enabled = false
members = [{provider = "a"}]
`, nil)
	for _, model := range []string{"off", "fleet/llama"} {
		code, _, body := h.chat(model)
		if code != 404 || errorCode(t, body) != "model_not_found" || !strings.Contains(body, "disabled") {
			t.Errorf("%s: %d %s, want 404 model_not_found", model, code, body)
		}
	}
	if code, _, body := h.chat("on"); code != 200 {
		t.Errorf("enabled route: %d %s", code, body)
	}
	if eng.hits.Load() != 1 {
		t.Errorf("engine got %d requests, want only the enabled route's", eng.hits.Load())
	}
	if got := strings.Join(h.srv.snap.Load().models, ","); got != "on" {
		t.Errorf("/v1/models ids %q, want only the enabled route", got)
	}
}
