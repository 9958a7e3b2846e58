package routerd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolter/rolter/adaptive"
	"github.com/rolter/rolter/adminapi"
	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/internal/testwait"
	"github.com/rolter/rolter/routestats"
)

// upstream is an OpenAI-compatible engine stand-in that records the
// upstream model of every chat request.
type upstream struct {
	*httptest.Server
	calls atomic.Int64
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
			return
		}
		var req struct {
			Model string `json:"model"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		u.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`, req.Model)
	}))
	t.Cleanup(u.Close)
	return u
}

// call makes one HTTP request and returns the status and body.
func call(method, url, token, body string, hdr ...string) (int, string, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func expectStatus(t *testing.T, want int, method, url, token, body string) string {
	t.Helper()
	code, out, err := call(method, url, token, body)
	if err != nil || code != want {
		t.Fatalf("%s %s: %d %s (%v), want %d", method, url, code, out, err, want)
	}
	return out
}

func chatBody(model string) string {
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hello"}]}`, model)
}

// inprocRouter is one router with its Raft store, started in-process the
// way `rolter router` starts it.
type inprocRouter struct {
	r          *Router
	api, admin string // base URLs
	token      string
}

func startInprocRouter(t *testing.T, toml string) *inprocRouter {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "rolter.toml")
	tokFile := filepath.Join(dir, "admin-token")
	const token = "test-superadmin-token"
	for p, c := range map[string]string{cfgPath: toml, tokFile: token + "\n"} {
		if err := os.WriteFile(p, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	file, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rt, err := Open(ctx, Config{File: file, NodeID: "r1", HTTPAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0",
		RaftAddr: "127.0.0.1:0", DataDir: filepath.Join(dir, "data"), InsecureDev: true, AdminTokenFile: tokFile,
		Getenv: func(string) string { return "" }})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("router run: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("router did not stop")
		}
	})
	r := &inprocRouter{r: rt, api: "http://" + rt.api.Addr().String(), admin: "http://" + rt.admin.Addr().String(), token: token}
	testwait.For(t, 15*time.Second, "readyz", func() error {
		code, body, err := call(http.MethodGet, r.admin+"/readyz", "", "")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%d %s", code, body)
		}
		return err
	})
	return r
}

const seedTOML = `
[[providers]]
name = "up"
api_base = "%s"

[[providers]]
name = "up2"
api_base = "%s"

[[routes]]
model = "seeded"
strategy = "round_robin"
targets = [{ provider = "up", model = "seed-upstream" }]

[health]
enabled = false
`

// TestControlPlaneDrivesDataPlane: a route created through the admin API
// is served without a restart, a policy PUT reaches the balancers'
// PolicyHolder, and an adaptive route's metrics and telemetry appear once
// it has traffic.
func TestControlPlaneDrivesDataPlane(t *testing.T) {
	up, up2 := newUpstream(t), newUpstream(t)
	r := startInprocRouter(t, fmt.Sprintf(seedTOML, up.URL, up2.URL))

	t.Run("seeded route serves", func(t *testing.T) {
		out := expectStatus(t, http.StatusOK, http.MethodPost, r.api+"/v1/chat/completions", "", chatBody("seeded"))
		if !strings.Contains(out, `"seed-upstream"`) {
			t.Fatalf("upstream model not rewritten: %s", out)
		}
	})

	t.Run("route added through the admin API serves without restart", func(t *testing.T) {
		expectStatus(t, http.StatusNotFound, http.MethodPost, r.api+"/v1/chat/completions", "", chatBody("added"))
		before := r.r.srv.ConfigVersion()
		expectStatus(t, http.StatusCreated, http.MethodPost, r.admin+"/api/v1/routes", r.token,
			`{"model":"added","strategy":"round_robin","targets":[{"provider":"up2","model":"added-upstream"}]}`)
		n := up2.calls.Load()
		testwait.For(t, 5*time.Second, "new route served", func() error {
			code, out, err := call(http.MethodPost, r.api+"/v1/chat/completions", "", chatBody("added"))
			if err == nil && (code != http.StatusOK || !strings.Contains(out, `"added-upstream"`)) {
				err = fmt.Errorf("%d %s", code, out)
			}
			return err
		})
		if up2.calls.Load() <= n {
			t.Fatal("the new route did not reach its upstream")
		}
		if v := r.r.srv.ConfigVersion(); v <= before || v != r.r.store.State().ConfigVersion {
			t.Fatalf("data plane at config_version %d, store at %d (before %d)", v, r.r.store.State().ConfigVersion, before)
		}
		metrics := expectStatus(t, http.StatusOK, http.MethodGet, r.admin+"/metrics", "", "")
		if want := fmt.Sprintf("rolter_config_version %d", r.r.srv.ConfigVersion()); !strings.Contains(metrics, want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	})

	t.Run("policy PUT reaches the PolicyHolder", func(t *testing.T) {
		if r.r.srv.Policy().Enabled {
			t.Fatal("seed policy already enabled")
		}
		expectStatus(t, http.StatusOK, http.MethodPut, r.admin+"/api/v1/adaptive-routing-policy", r.token,
			`{"enabled":true,"latency_weight":1,"cost_weight":0,"load_weight":0.5,"exploration_ratio":0,"min_samples":4}`)
		testwait.For(t, 5*time.Second, "policy applied", func() error {
			if p := r.r.srv.Policy(); !p.Enabled || p.MinSamples != 4 || p.CostWeight != 0 || p.LoadWeight != 0.5 {
				return fmt.Errorf("policy %+v", p)
			}
			return nil
		})
	})

	t.Run("adaptive metrics and telemetry once an adaptive route has traffic", func(t *testing.T) {
		expectStatus(t, http.StatusCreated, http.MethodPost, r.admin+"/api/v1/routes", r.token,
			`{"model":"adapt","strategy":"adaptive","targets":[{"provider":"up","model":"a"},{"provider":"up2","model":"b"}]}`)
		testwait.For(t, 10*time.Second, "adaptive route engaged", func() error {
			if code, out, err := call(http.MethodPost, r.api+"/v1/chat/completions", "", chatBody("adapt")); err != nil || code != 200 {
				return fmt.Errorf("chat: %d %s %v", code, out, err)
			}
			_, m, err := call(http.MethodGet, r.admin+"/metrics", "", "")
			if err != nil {
				return err
			}
			for _, want := range []string{
				`rolter_adaptive_routing_engaged{model="adapt"} 1`,
				`rolter_adaptive_routing_target_score{model="adapt",target="up/a"}`,
				`rolter_adaptive_routing_target_score{model="adapt",target="up2/b"}`,
				`rolter_adaptive_routing_decisions_total{mode="blend",model="adapt"}`,
			} {
				if !strings.Contains(m, want) {
					return fmt.Errorf("/metrics lacks %s", want)
				}
			}
			if strings.Contains(m, `rolter_adaptive_routing_decisions_total{mode="blend",model="adapt"} 0`) {
				return errors.New("no blended decision yet")
			}
			return nil
		})
		if m := expectStatus(t, http.StatusOK, http.MethodGet, r.admin+"/metrics", "", ""); strings.Contains(m, `rolter_adaptive_routing_engaged{model="seeded"}`) {
			t.Fatal("a round_robin route reports adaptive metrics")
		}
		// The router's own pusher reports every 15 s; a second one over the
		// same source and table reports now.
		now := &adminapi.Pusher{NodeID: "r1", Source: adminSource{r.r}, Local: r.r.adminAPI.Telemetry()}
		now.PushOnce(context.Background())
		out := expectStatus(t, http.StatusOK, http.MethodGet, r.admin+"/api/v1/adaptive-routing-telemetry", r.token, "")
		var view struct {
			Routes []struct {
				Model string `json:"model"`
				Nodes []struct {
					NodeID  string                     `json:"node_id"`
					Targets []adaptive.TargetTelemetry `json:"targets"`
				} `json:"nodes"`
			} `json:"routes"`
		}
		if err := json.Unmarshal([]byte(out), &view); err != nil {
			t.Fatal(err)
		}
		if len(view.Routes) != 1 || view.Routes[0].Model != "adapt" || len(view.Routes[0].Nodes) != 1 ||
			view.Routes[0].Nodes[0].NodeID != "r1" || len(view.Routes[0].Nodes[0].Targets) != 2 {
			t.Fatalf("telemetry: %s", out)
		}
		// The same push carried the data plane's route stats.
		stats := expectStatus(t, http.StatusOK, http.MethodGet, r.admin+"/api/v1/route-stats", r.token, "")
		var sv routestats.View
		if err := json.Unmarshal([]byte(stats), &sv); err != nil {
			t.Fatal(err)
		}
		if i := slices.IndexFunc(sv.Routes, func(rv routestats.RouteView) bool { return rv.Pool == "adapt" }); i < 0 ||
			sv.Routes[i].Windows["5m"].Requests == 0 || len(sv.Routes[i].Windows["5m"].Targets) == 0 {
			t.Fatalf("route stats lack the adaptive route's traffic: %s", stats)
		}
	})

	t.Run("dashboard is mounted", func(t *testing.T) {
		out := expectStatus(t, http.StatusOK, http.MethodGet, r.admin+"/ui/", "", "")
		if !strings.Contains(strings.ToLower(out), "<html") {
			t.Fatalf("/ui/: %.200s", out)
		}
	})
}
