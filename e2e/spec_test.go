//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
)

// Issue 15's real-process measurements: learned routing state survives
// admin writes, and cache_aware keys token-id prompts.

// TestLearnedAffinitySurvivesAdminWrites: 4 sims, one router (with its Raft
// store), a cache_aware route. 20 distinct prompts are sent once; then 10
// unrelated admin writes (API keys) and one adaptive policy PUT bump the
// config version 11 times; then the 20 prompts are sent again. At least
// 95% must land on the engine that served them the first time.
func TestLearnedAffinitySurvivesAdminWrites(t *testing.T) {
	bin := BuildRolter(t)
	dir := t.TempDir()
	var toml strings.Builder
	for i := range 4 {
		fmt.Fprintf(&toml, "[[providers]]\nname = \"e%d\"\napi_base = %q\n\n", i, StartSim(t, bin, fmt.Sprintf("sim-%d", i), dir))
	}
	toml.WriteString("[[routes]]\nmodel = \"chat\"\nstrategy = \"cache_aware\"\ntargets = [\n")
	for i := range 4 {
		fmt.Fprintf(&toml, "  { provider = \"e%d\", model = \"meta-llama/Llama-3.1-8B-Instruct\" },\n", i)
	}
	toml.WriteString("]\n")
	c := StartCluster(t, ClusterOptions{Bin: bin, N: 1, Dir: dir, Config: toml.String()})
	r := c.Routers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	admin := func(method, path, body string) []byte {
		t.Helper()
		code, b, err := Do(ctx, method, r.Admin+path, c.Token, body)
		if err != nil || code/100 != 2 {
			t.Fatalf("%s %s: %d %v %s", method, path, code, err, b)
		}
		return b
	}
	var key struct {
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal(admin(http.MethodPost, "/api/v1/keys", `{"name":"client"}`), &key); err != nil || key.Secret == "" {
		t.Fatalf("client key: %v %+v", err, key)
	}
	served := func() map[string]float64 {
		out := map[string]float64{}
		for i := range 4 {
			p := fmt.Sprintf("e%d", i)
			out[p] = meshMetric(ctx, r.Admin, "rolter_target_requests_total", `provider="`+p+`"`)
		}
		return out
	}
	rng := rand.New(rand.NewPCG(15, 15))
	prompts := make([]string, 20)
	for i := range prompts {
		var b strings.Builder
		fmt.Fprintf(&b, "Conversation %d. You are assistant %d.", i, rng.IntN(1_000_000))
		for range 60 {
			fmt.Fprintf(&b, " w%d", rng.IntN(5000))
		}
		prompts[i] = b.String()
	}
	send := func(p string) string {
		t.Helper()
		before := served()
		body := fmt.Sprintf(`{"model":"chat","messages":[{"role":"user","content":%q}],"max_tokens":2}`, p)
		var code int
		var b []byte
		// The key just created reaches the data plane a commit later.
		err := testwait.Poll(10*time.Second, 20*time.Millisecond, func() error {
			var err error
			code, b, err = Do(ctx, http.MethodPost, r.API+"/v1/chat/completions", key.Secret, body)
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("%d %s", code, b)
			}
			return err
		})
		if err != nil {
			t.Fatalf("chat: %v", err)
		}
		after := served()
		for name, n := range after {
			if n > before[name] {
				return name
			}
		}
		t.Fatalf("no target counter moved for a served request")
		return ""
	}
	first := make([]string, len(prompts))
	for i, p := range prompts {
		first[i] = send(p)
	}
	v0 := metricPlain(ctx, r.Admin, "rolter_config_version")
	for i := range 10 {
		admin(http.MethodPost, "/api/v1/keys", fmt.Sprintf(`{"name":"unrelated-%d"}`, i))
	}
	admin(http.MethodPut, "/api/v1/adaptive-routing-policy",
		`{"enabled":true,"latency_weight":1,"cost_weight":0.5,"load_weight":0.25,"exploration_ratio":0.05,"min_samples":50}`)
	err := testwait.Poll(10*time.Second, 50*time.Millisecond, func() error {
		if v := metricPlain(ctx, r.Admin, "rolter_config_version"); v < v0+11 {
			return fmt.Errorf("config_version %v, want ≥ %v", v, v0+11)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	same := 0
	for i, p := range prompts {
		if send(p) == first[i] {
			same++
		}
	}
	share := float64(same) / float64(len(prompts))
	t.Logf("after 10 key writes and a policy PUT (config_version %v → %v): %d of %d prompts (%.0f%%) landed on the engine that served them first",
		v0, metricPlain(ctx, r.Admin, "rolter_config_version"), same, len(prompts), 100*share)
	if share < 0.95 {
		t.Errorf("only %.0f%% of prompts returned to their engine, want ≥ 95%%", 100*share)
	}
}

// metricPlain reads an unlabelled sample from a /metrics page.
func metricPlain(ctx context.Context, base, metric string) float64 {
	code, body, err := Do(ctx, http.MethodGet, base+"/metrics", "", "")
	if err != nil || code != http.StatusOK {
		return 0
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, metric+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// TestCacheAwareOnTokenIDPrompts: 4 sims with KV caches (and sidecars, for
// precise_cache_aware), one router; 48 shared 1024-token system prompts
// with unique 128-token suffixes, 400 /v1/completions requests whose
// prompt is token ids only. The engines' cached-token share under
// cache_aware must close at least half the gap between round_robin and
// precise_cache_aware.
func TestCacheAwareOnTokenIDPrompts(t *testing.T) {
	bin := BuildRolterCgo(t)
	const groups, requests, workers = 48, 400, 6
	rng := rand.New(rand.NewPCG(12, 12))
	reqs := make([]meshRequest, requests)
	for i := range reqs {
		g := rng.IntN(groups)
		ids := make([]int, 0, 1024+128)
		for k := range 1024 {
			ids = append(ids, 1000+g*2000+k)
		}
		for k := range 128 {
			ids = append(ids, 200_000+i*128+k)
		}
		body, _ := json.Marshal(map[string]any{"model": "chat", "prompt": ids, "max_tokens": 4})
		reqs[i] = meshRequest{body: string(body)}
	}
	shares := map[string]float64{}
	for _, strategy := range []string{"round_robin", "cache_aware", "precise_cache_aware"} {
		p := startMeshPool(t, bin, 4, 1, meshChatTOML(strategy), "--speed", "20", "--kv-blocks", "3000")
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		h0, q0, err := meshPrefixCounters(ctx, p.Engines)
		if err != nil {
			t.Fatal(err)
		}
		failed, first := meshDrive(ctx, p.Routers, reqs, workers)
		h1, q1, err := meshPrefixCounters(ctx, p.Engines)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if failed > 0 {
			t.Fatalf("%s: %d of %d requests failed: %v", strategy, failed, requests, first)
		}
		shares[strategy] = (h1 - h0) / (q1 - q0)
		t.Logf("%s: cached-token share %.3f (%.0f of %.0f prompt tokens)", strategy, shares[strategy], h1-h0, q1-q0)
		for _, e := range p.Engines {
			e.Sidecar.Kill()
			e.Sim.Kill()
		}
		for _, r := range p.Routers {
			r.Proc.Kill()
		}
	}
	rr, ca, pca := shares["round_robin"], shares["cache_aware"], shares["precise_cache_aware"]
	closed := (ca - rr) / (pca - rr)
	t.Logf("cache_aware closes %.0f%% of the round_robin → precise_cache_aware gap", 100*closed)
	if !(closed >= 0.5) {
		t.Errorf("cache_aware share %.3f closes %.0f%% of the gap between round_robin %.3f and precise_cache_aware %.3f, want ≥ 50%%",
			ca, 100*closed, rr, pca)
	}
}
