package router

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/strategies"
)

// apply parses text and applies it as the next config version.
func (h *harness) apply(text string) {
	h.t.Helper()
	if !strings.Contains(text, "[health]") {
		text += "\n[health]\nenabled = false\n"
	}
	cfg, err := config.Parse("rolter.toml", []byte(text), nil)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.srv.Apply(cfg); err != nil {
		h.t.Fatal(err)
	}
}

// which sends a chat with content to model and returns the index of the
// engine that got it.
func (h *harness) which(model, content string, engines []*fakeEngine, hdr ...string) int {
	h.t.Helper()
	before := make([]int64, len(engines))
	for i, e := range engines {
		before[i] = e.hits.Load()
	}
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}]}`, model, content)
	if code, _, b := h.post("/v1/chat/completions", body, hdr...); code != 200 {
		h.t.Fatalf("%s: %d %s", model, code, b)
	}
	for i, e := range engines {
		if e.hits.Load() > before[i] {
			return i
		}
	}
	h.t.Fatal("no engine got the request")
	return -1
}

// A config change that leaves a route alone (here: the adaptive policy and
// another route) keeps the route's balancer: round_robin continues its
// rotation instead of restarting at the first target, and cache_aware
// keeps every prompt on the engine that served it.
func TestConfigChangeKeepsUnchangedBalancers(t *testing.T) {
	es := []*fakeEngine{newEngine(t, okChat), newEngine(t, okChat), newEngine(t, okChat), newEngine(t, okChat)}
	base := providers("a", es[0].URL, "b", es[1].URL, "c", es[2].URL, "d", es[3].URL) + `
[[routes]]
model = "rr"
strategy = "round_robin"
targets = [{provider = "a"}, {provider = "b"}, {provider = "c"}]

[[routes]]
model = "ca"
strategy = "cache_aware"
targets = [{provider = "a"}, {provider = "b"}, {provider = "c"}, {provider = "d"}]
`
	h := newHarness(t, base, nil)
	if got := h.which("rr", "x", es); got != 0 {
		t.Fatalf("first round_robin pick %d", got)
	}
	prompts := make([]string, 20)
	first := make([]int, len(prompts))
	for k := range prompts {
		prompts[k] = fmt.Sprintf("You are assistant %d. Reply in the style of a %d-year-old. What is %d + %d?", k, 20+k, k, k)
		first[k] = h.which("ca", prompts[k], es)
	}
	for v := range 11 {
		h.apply(base + fmt.Sprintf(`
[adaptive_routing]
enabled = %v
cost_weight = %d

[[routes]]
model = "other-%d"
targets = [{provider = "d"}]
`, v%2 == 0, v+1, v))
	}
	if got := h.which("rr", "x", es); got != 1 {
		t.Errorf("round_robin after 11 config changes picked %d, want 1: its rotation restarted", got)
	}
	same := 0
	for k, p := range prompts {
		if h.which("ca", p, es) == first[k] {
			same++
		}
	}
	if same != len(prompts) {
		t.Errorf("cache_aware: %d of %d prompts returned to their engine after config changes", same, len(prompts))
	}
}

// A route whose target list changes carries what its balancer learned by
// target identity: a new target inserted at the front moves every index,
// yet each prompt still goes to the engine that served it, and each
// session to its pinned engine.
func TestChangedTargetsCarryLearnedStateByIdentity(t *testing.T) {
	es := []*fakeEngine{newEngine(t, okChat), newEngine(t, okChat), newEngine(t, okChat), newEngine(t, okChat)}
	ps := providers("a", es[0].URL, "b", es[1].URL, "c", es[2].URL, "d", es[3].URL)
	route := func(strategy string, members ...string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "[[routes]]\nmodel = \"m\"\nstrategy = %q\ntargets = [", strategy)
		for _, m := range members {
			fmt.Fprintf(&b, "{provider = %q},", m)
		}
		b.WriteString("]\n")
		return b.String()
	}
	for _, strategy := range []string{"cache_aware", "pipeline"} {
		t.Run(strategy, func(t *testing.T) {
			h := newHarness(t, ps+route(strategy, "a", "b", "c"), nil)
			prompts := make([]string, 12)
			first := make([]int, len(prompts))
			for k := range prompts {
				prompts[k] = fmt.Sprintf("System prompt number %d, long enough to be a prefix worth keeping: %s", k, strings.Repeat("z", 40))
				first[k] = h.which("m", prompts[k], es)
			}
			sess := h.which("m", "session opener", es, "x-session-id", "s-1")
			h.apply(ps + route(strategy, "d", "a", "b", "c"))
			for k, p := range prompts {
				if got := h.which("m", p, es); got != first[k] {
					t.Errorf("prompt %d went to engine %d after the target change, want %d", k, got, first[k])
				}
			}
			if got := h.which("m", "something else entirely", es, "x-session-id", "s-1"); got != sess {
				t.Errorf("session went to engine %d after the target change, want %d", got, sess)
			}
		})
	}
}

// cache_aware on /v1/completions with token-id prompts (and on ids in
// x-rolter-vllm-token-ids with no text): requests sharing a long leading
// run of ids go to the engine that served it, not wherever least-load
// spreads them.
func TestCacheAwareFollowsTokenIDPrefixes(t *testing.T) {
	es := []*fakeEngine{newEngine(t, okChat), newEngine(t, okChat), newEngine(t, okChat), newEngine(t, okChat)}
	h := newHarness(t, providers("a", es[0].URL, "b", es[1].URL, "c", es[2].URL, "d", es[3].URL)+`
[[routes]]
model = "m"
strategy = "cache_aware"
targets = [{provider = "a"}, {provider = "b"}, {provider = "c"}, {provider = "d"}]
`, nil)
	ids := func(group, suffix int) string {
		var b strings.Builder
		for i := range 1024 {
			fmt.Fprintf(&b, "%d,", 100_000*group+i)
		}
		for i := range 128 {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%d", 9_000_000+1000*suffix+i)
		}
		return b.String()
	}
	send := func(group, suffix int, header bool) int {
		before := make([]int64, len(es))
		for i, e := range es {
			before[i] = e.hits.Load()
		}
		var code int
		var body string
		if header {
			code, _, body = h.post("/v1/completions", `{"model":"m","prompt":"","max_tokens":1}`, headerTokenIDs, ids(group, suffix))
		} else {
			code, _, body = h.post("/v1/completions", `{"model":"m","prompt":[`+ids(group, suffix)+`],"max_tokens":1}`)
		}
		if code != 200 {
			t.Fatalf("completions: %d %s", code, body)
		}
		for i, e := range es {
			if e.hits.Load() > before[i] {
				return i
			}
		}
		t.Fatal("no engine got the request")
		return -1
	}
	const groups = 8
	home := make([]int, groups)
	for g := range groups {
		home[g] = send(g, g, false)
	}
	same := 0
	for k := range 4 * groups {
		g := k % groups
		if send(g, 100+k, k%2 == 1) == home[g] {
			same++
		}
	}
	if same != 4*groups {
		t.Errorf("%d of %d token-id requests went to their prefix's engine", same, 4*groups)
	}
}

// Where rolter differs from seed 000 ("a route that gains a target keeps
// its existing models and the new target reads as unpredicted until the
// next process start"): the existing target's model is kept, and the new
// target learns from its own completions at once, predicting after 8
// successes like any cold target, with no restart.
func TestAddedTargetLearnsWithoutRestart(t *testing.T) {
	a, b := newEngine(t, okChat), newEngine(t, okChat)
	ps := providers("a", a.URL, "b", b.URL)
	h := newHarness(t, ps+`
[[routes]]
model = "m"
strategy = "predicted_latency"
targets = [{provider = "a"}]
`, nil)
	for range 10 {
		h.chat("m")
	}
	if _, ok := h.srv.tracker.Target("a/m").Predict(0, 0); !ok {
		t.Fatal("a has no model after 10 successes")
	}
	h.apply(ps + `
[[routes]]
model = "m"
strategy = "predicted_latency"
targets = [{provider = "a"}, {provider = "b"}]
`)
	if _, ok := h.srv.tracker.Target("a/m").Predict(0, 0); !ok {
		t.Error("a's model was lost when the route gained b")
	}
	for b.hits.Load() < 8 {
		if code, _, body := h.chat("m"); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		if a.hits.Load() > 500 {
			t.Fatal("b never served 8 requests")
		}
	}
	if _, ok := h.srv.tracker.Target("b/m").Predict(0, 0); !ok {
		t.Error("b does not predict after 8 successes in the same process")
	}
}

// Seed 000: a target that never answers "absorbs at most eight picks in
// total" of adaptive's warm-up. Config changes — here policy PUTs and a
// route added elsewhere — do not hand it eight more each.
func TestAdaptiveWarmupBudgetSurvivesConfigChanges(t *testing.T) {
	ok, dead := newEngine(t, okChat), newEngine(t, status(500))
	base := providers("ok", ok.URL, "dead", dead.URL) + `
[[routes]]
model = "m"
strategy = "adaptive"
targets = [{provider = "ok", weight = 100}, {provider = "dead"}]

[retry]
attempts = 0

[breaker]
failures = 1000
`
	policy := func(ms int) string {
		return fmt.Sprintf("\n[adaptive_routing]\nenabled = true\nmin_samples = %d\nexploration_ratio = 0.0\n", ms)
	}
	h := newHarness(t, base+policy(1000), nil)
	send := func() {
		for range 20 {
			h.chat("m")
		}
	}
	send()
	for v := range 5 {
		h.apply(base + policy(1000+v) + fmt.Sprintf("\n[[routes]]\nmodel = \"x%d\"\ntargets = [{provider = \"ok\"}]\n", v))
		send()
	}
	// The fallback stack prefers ok (weight 100 to 1), so every request
	// the dead target got was a warm-up pick.
	if got := dead.hits.Load(); got != strategies.WarmupBudget {
		t.Errorf("the dead target got %d requests over 6 config versions, want %d in total", got, strategies.WarmupBudget)
	}
	tel := h.srv.AdaptiveTelemetry()
	if len(tel) != 1 {
		t.Fatalf("adaptive routes %d", len(tel))
	}
	// The dead target never earns a latency sample, so warm-up may steer
	// to it at most 8 times; ok may take one warm-up pick before its first
	// sample lands.
	if got := tel[0].Decisions.Exploration; got < 8 || got > 9 {
		t.Errorf("warm-up picks over 6 config versions: %d, want 8 (+1 for ok) in total", got)
	}
	if d := tel[0].Decisions; d.Blend+d.Exploration+d.Fallback != 120 {
		t.Errorf("decision split %+v does not count all 120 picks", d)
	}
}

// A provider pointed at a new api_base is another engine: nothing learned
// about the old address is carried to it, while the other targets map by
// identity.
func TestMovedProviderStartsCold(t *testing.T) {
	es := []*fakeEngine{newEngine(t, okChat), newEngine(t, okChat), newEngine(t, okChat)}
	route := `
[[routes]]
model = "m"
strategy = "cache_aware"
targets = [{provider = "a"}, {provider = "b"}]
`
	h := newHarness(t, providers("a", es[0].URL, "b", es[1].URL)+route, nil)
	prev := h.srv.snap.Load().routes["m"]
	h.apply(providers("a", es[2].URL, "b", es[1].URL) + `
[[routes]]
model = "m"
strategy = "cache_aware"
targets = [{provider = "b"}, {provider = "a"}]
`)
	next := h.srv.snap.Load().routes["m"]
	if next.lb == prev.lb {
		t.Fatal("the balancer was kept although a target moved")
	}
	if got := fmt.Sprint(carryMapping(prev, next)); got != "[1 -1]" {
		t.Errorf("carry mapping %s, want b from index 1 and nothing for the moved a", got)
	}
}

// adaptive's min_samples counts requests the route served: a retried
// attempt and another route's traffic on the same targets do not count.
func TestAdaptiveCountsServedRequestsNotAttempts(t *testing.T) {
	bad, good := newEngine(t, status(500)), newEngine(t, okChat)
	h := newHarness(t, providers("bad", bad.URL, "good", good.URL)+`
[[routes]]
model = "m"
strategy = "adaptive"
targets = [{provider = "bad"}, {provider = "good"}]

[[routes]]
model = "other"
strategy = "round_robin"
targets = [{provider = "good"}]

[retry]
attempts = 1
budget = 1.0

[breaker]
failures = 1000

[adaptive_routing]
enabled = true
min_samples = 1000
`, nil)
	for range 20 {
		if code, _, body := h.chat("m"); code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		h.chat("other")
	}
	tel := h.srv.AdaptiveTelemetry()
	if len(tel) != 1 {
		t.Fatalf("adaptive routes %d", len(tel))
	}
	if attempts := bad.hits.Load() + good.hits.Load() - 20; tel[0].Observed != 20 || attempts <= 20 {
		t.Errorf("observed %d after 20 served requests (%d attempts on the route); want 20", tel[0].Observed, attempts)
	}
}
