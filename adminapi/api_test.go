package adminapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolter/rolter/adaptive"
	"github.com/rolter/rolter/cluster"
	gossip "github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/internal/testwait"
)

const (
	superToken    = "bootstrap-super-token"
	internalToken = "node-to-node-token"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type mesh struct {
	c     *cluster.InmemCluster
	apis  []*API
	clock *fakeClock
}

func newMesh(t *testing.T) *mesh {
	t.Helper()
	seed := config.Default()
	seed.Providers = []config.Provider{{Name: "vllm-a", APIBase: "http://127.0.0.1:8000/v1", ReadOnly: true}}
	seed.Routes = []config.Route{
		{Model: "zeta", Strategy: "adaptive", Targets: []config.Target{{Provider: "vllm-a", Model: "zeta", Weight: 1}}},
		{Model: "alpha", Strategy: "adaptive", Targets: []config.Target{{Provider: "vllm-a", Model: "alpha", Weight: 1}}},
		{Model: "plain", Strategy: "round_robin", Targets: []config.Target{{Provider: "vllm-a", Model: "plain", Weight: 1}}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := cluster.NewInmemCluster(ctx, 3, cluster.StoreConfig{InternalToken: internalToken, SuperadminToken: superToken,
		Seed: &seed, ForwardWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	m := &mesh{c: c, clock: &fakeClock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}}
	for i := range 3 {
		testwait.For(t, 5*time.Second, "seeded", func() bool { return c.Node(i).State().Seeded })
		m.apis = append(m.apis, New(Deps{Store: c.Node(i), Cluster: c.Node(i), InternalToken: internalToken, Now: m.clock.Now}))
	}
	return m
}

func (m *mesh) follower() int {
	l := m.c.Leader()
	return (l + 1) % 3
}

type resp struct {
	code int
	hdr  http.Header
	body map[string]any
	raw  string
}

func call(t *testing.T, h http.Handler, method, path, token, body string, hdr ...string) resp {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	out := resp{code: rec.Code, hdr: rec.Header(), raw: rec.Body.String()}
	_ = json.Unmarshal(rec.Body.Bytes(), &out.body)
	return out
}

func errMessage(r resp) string {
	e, _ := r.body["error"].(map[string]any)
	msg, _ := e["message"].(string)
	return msg
}

const goodPolicy = `{"enabled":true,"latency_weight":2,"cost_weight":0.5,"load_weight":0.25,"exploration_ratio":0.1,"min_samples":20}`

func TestPolicyValidationRulesAnswer400WithTheirMessage(t *testing.T) {
	m := newMesh(t)
	api := m.apis[m.follower()]
	weights := "at least one of latency_weight, cost_weight, load_weight must be positive; use enabled = false to stop adaptive routing"
	tests := []struct{ name, body, msg string }{
		{"latency above 100", `{"enabled":true,"latency_weight":100.5,"cost_weight":1,"load_weight":1,"exploration_ratio":0.1,"min_samples":1}`, "latency_weight must be a finite number in [0, 100]"},
		{"cost negative", `{"enabled":true,"latency_weight":1,"cost_weight":-0.1,"load_weight":1,"exploration_ratio":0.1,"min_samples":1}`, "cost_weight must be a finite number in [0, 100]"},
		{"load not finite", `{"enabled":true,"latency_weight":1,"cost_weight":1,"load_weight":1e999,"exploration_ratio":0.1,"min_samples":1}`, "load_weight must be a finite number in [0, 100]"},
		{"all weights zero", `{"enabled":true,"latency_weight":0,"cost_weight":0,"load_weight":0,"exploration_ratio":0.1,"min_samples":1}`, weights},
		{"exploration above 0.5", `{"enabled":true,"latency_weight":1,"cost_weight":1,"load_weight":1,"exploration_ratio":0.51,"min_samples":1}`, "exploration_ratio must be in [0, 0.5]"},
		{"exploration negative", `{"enabled":true,"latency_weight":1,"cost_weight":1,"load_weight":1,"exploration_ratio":-0.01,"min_samples":1}`, "exploration_ratio must be in [0, 0.5]"},
		{"min_samples above 1e6", `{"enabled":true,"latency_weight":1,"cost_weight":1,"load_weight":1,"exploration_ratio":0.1,"min_samples":1000001}`, "min_samples must be in [0, 1000000]"},
		{"min_samples negative", `{"enabled":true,"latency_weight":1,"cost_weight":1,"load_weight":1,"exploration_ratio":0.1,"min_samples":-1}`, "min_samples must be in [0, 1000000]"},
		{"rules hold when disabled", `{"enabled":false,"latency_weight":0,"cost_weight":0,"load_weight":0,"exploration_ratio":0.1,"min_samples":1}`, weights},
		{"disabled with bad exploration", `{"enabled":false,"latency_weight":1,"cost_weight":1,"load_weight":1,"exploration_ratio":0.9,"min_samples":1}`, "exploration_ratio must be in [0, 0.5]"},
		{"every field required", `{"enabled":true,"latency_weight":1,"cost_weight":1,"load_weight":1,"exploration_ratio":0.1}`, "min_samples is required"},
	}
	before := m.c.Node(0).State().ConfigVersion
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := call(t, api, http.MethodPut, "/api/v1/adaptive-routing-policy", superToken, tt.body)
			if r.code != http.StatusBadRequest || errMessage(r) != tt.msg {
				t.Fatalf("got %d %q, want 400 %q", r.code, errMessage(r), tt.msg)
			}
		})
	}
	if v := m.c.Node(0).State().ConfigVersion; v != before {
		t.Errorf("rejected policies changed config_version %d → %d", before, v)
	}
}

func TestPolicyPutOnFollowerReachesEveryRouterAndIsAudited(t *testing.T) {
	m := newMesh(t)
	f := m.follower()
	r := call(t, m.apis[f], http.MethodGet, "/api/v1/adaptive-routing-policy", superToken, "")
	want := map[string]any{"enabled": false, "latency_weight": 1.0, "cost_weight": 0.5, "load_weight": 0.25,
		"exploration_ratio": 0.05, "min_samples": 50.0, "updated_at": nil}
	for k, v := range want {
		if r.body[k] != v {
			t.Errorf("default %s = %v, want %v", k, r.body[k], v)
		}
	}
	if got := fmt.Sprint(r.body["affected_routes"]); got != "[alpha zeta]" {
		t.Errorf("affected_routes %s, want sorted adaptive routes [alpha zeta]", got)
	}
	before := m.c.Node(f).State().ConfigVersion
	r = call(t, m.apis[f], http.MethodPut, "/api/v1/adaptive-routing-policy", superToken, goodPolicy)
	if r.code != http.StatusOK || r.body["enabled"] != true || r.body["latency_weight"] != 2.0 || r.body["updated_at"] == nil {
		t.Fatalf("PUT: %d %s", r.code, r.raw)
	}
	for i := range 3 {
		testwait.For(t, 3*time.Second, "policy on router "+fmt.Sprint(i), func() bool {
			g := call(t, m.apis[i], http.MethodGet, "/api/v1/adaptive-routing-policy", superToken, "")
			return g.body["enabled"] == true && g.body["min_samples"] == 20.0
		})
		if v := m.c.Node(i).State().ConfigVersion; v != before+1 {
			t.Errorf("router %d config_version %d, want %d", i, v, before+1)
		}
	}
	a := call(t, m.apis[0], http.MethodGet, "/api/v1/audit?limit=1", superToken, "")
	data, _ := a.body["data"].([]any)
	if len(data) != 1 {
		t.Fatalf("audit: %s", a.raw)
	}
	e := data[0].(map[string]any)
	if e["action"] != "adaptive_routing_policy.update" || e["actor"] != "bootstrap" || e["outcome"] != "ok" || e["time"] == "" {
		t.Errorf("audit entry %v", e)
	}
	// The entry records what changed: the six fields before and after, and
	// the routes the policy reaches.
	d, _ := json.Marshal(e["detail"])
	wantDetail := `{"affected_routes":["alpha","zeta"],` +
		`"after":{"cost_weight":0.5,"enabled":true,"exploration_ratio":0.1,"latency_weight":2,"load_weight":0.25,"min_samples":20},` +
		`"before":{"cost_weight":0.5,"enabled":false,"exploration_ratio":0.05,"latency_weight":1,"load_weight":0.25,"min_samples":50}}`
	if string(d) != wantDetail {
		t.Errorf("audit detail\n%s\nwant\n%s", d, wantDetail)
	}
	if strings.Contains(a.raw, superToken) || strings.Contains(a.raw, cluster.HashToken(superToken)) {
		t.Error("audit log leaks the admin token")
	}
}

func createToken(t *testing.T, api http.Handler, name, role string) string {
	t.Helper()
	r := call(t, api, http.MethodPost, "/api/v1/admin-tokens", superToken, fmt.Sprintf(`{"name":%q,"role":%q}`, name, role))
	if r.code != http.StatusCreated {
		t.Fatalf("create token: %d %s", r.code, r.raw)
	}
	return r.body["secret"].(string)
}

func TestAdaptiveEndpointsAreSuperadminOnly(t *testing.T) {
	m := newMesh(t)
	api := m.apis[m.follower()]
	admin := createToken(t, api, "ops-admin", "admin")
	viewer := createToken(t, api, "ops-viewer", "viewer")
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodGet, "/api/v1/adaptive-routing-policy", ""},
		{http.MethodPut, "/api/v1/adaptive-routing-policy", goodPolicy},
		{http.MethodGet, "/api/v1/adaptive-routing-telemetry", ""},
	} {
		for _, tok := range []struct{ name, secret string }{{"admin", admin}, {"viewer", viewer}} {
			t.Run(tc.method+" "+tc.path+" as "+tok.name, func(t *testing.T) {
				r := call(t, api, tc.method, tc.path, tok.secret, tc.body)
				e, _ := r.body["error"].(map[string]any)
				if r.code != http.StatusForbidden || e["type"] != "permission_error" || e["code"] == "" || e["message"] == "" {
					t.Fatalf("got %d %s, want 403 in the OpenAI error shape", r.code, r.raw)
				}
			})
		}
		r := call(t, api, tc.method, tc.path, "", tc.body)
		if r.code != http.StatusUnauthorized {
			t.Errorf("%s %s without a token: %d", tc.method, tc.path, r.code)
		}
		if r := call(t, api, tc.method, tc.path, "wrong", tc.body); r.code != http.StatusUnauthorized {
			t.Errorf("%s %s with an unknown token: %d", tc.method, tc.path, r.code)
		}
	}
	// An admin manages providers but the viewer cannot.
	body := `{"name":"p2","api_base":"http://127.0.0.1:9000/v1"}`
	if r := call(t, api, http.MethodPost, "/api/v1/providers", viewer, body); r.code != http.StatusForbidden {
		t.Errorf("viewer create provider: %d", r.code)
	}
	if r := call(t, api, http.MethodPost, "/api/v1/providers", admin, body); r.code != http.StatusCreated {
		t.Errorf("admin create provider: %d %s", r.code, r.raw)
	}
}

func report(n int, targets int) string {
	var rep Report
	for i := range n {
		rs := adaptive.RouteTelemetry{Model: fmt.Sprintf("m%03d", i),
			Telemetry: adaptive.Telemetry{Engaged: true, Observed: 60, Decisions: adaptive.Decisions{Blend: 50, Exploration: 3, Fallback: 7}}}
		for j := range targets {
			rs.Targets = append(rs.Targets, adaptive.TargetTelemetry{Target: fmt.Sprintf("t%d", j), Provider: "vllm-a", Score: 0.5})
		}
		rep.Routes = append(rep.Routes, rs)
	}
	b, _ := json.Marshal(rep)
	return string(b)
}

func TestInternalTelemetry(t *testing.T) {
	m := newMesh(t)
	api := m.apis[0]
	post := func(token, node, body string) resp {
		return call(t, api, http.MethodPost, "/internal/adaptive-telemetry", token, body, NodeIDHeader, node)
	}
	view := func() []any {
		r := call(t, api, http.MethodGet, "/api/v1/adaptive-routing-telemetry", superToken, "")
		if r.body["fresh_window_secs"] != 60.0 {
			t.Fatalf("fresh_window_secs: %s", r.raw)
		}
		routes, _ := r.body["routes"].([]any)
		return routes
	}
	if r := post("bad", "r1", report(1, 1)); r.code != http.StatusUnauthorized {
		t.Fatalf("bad internal token: %d", r.code)
	}
	if r := post(superToken, "r1", report(1, 1)); r.code != http.StatusUnauthorized {
		t.Fatalf("an admin token is not the internal token: %d", r.code)
	}
	if r := post(internalToken, "", report(1, 1)); r.code != http.StatusBadRequest {
		t.Fatalf("missing node id: %d", r.code)
	}
	if len(view()) != 0 {
		t.Fatal("refused reports were stored")
	}
	if r := post(internalToken, "r1", report(600, 1)); r.code != http.StatusNoContent {
		t.Fatalf("report: %d %s", r.code, r.raw)
	}
	routes := view()
	if len(routes) != MaxReportRoutes {
		t.Fatalf("%d routes kept, want cap %d", len(routes), MaxReportRoutes)
	}
	post(internalToken, "r1", report(1, 300))
	routes = view()
	nodes := routes[0].(map[string]any)["nodes"].([]any)
	if n := nodes[0].(map[string]any); n["node_id"] != "r1" || len(n["targets"].([]any)) != MaxReportTargets {
		t.Fatalf("node row %v targets %d", n["node_id"], len(n["targets"].([]any)))
	}
	// A second node's row for the same route; each report overwrites only
	// its own node's rows.
	post(internalToken, "r2", report(1, 1))
	post(internalToken, "r1", report(1, 2))
	routes = view()
	if len(routes) != 1 || len(routes[0].(map[string]any)["nodes"].([]any)) != 2 {
		t.Fatalf("after overwrite: %v", routes)
	}
	// Older than 60 s: hidden.
	m.clock.Add(61 * time.Second)
	post(internalToken, "r2", report(1, 1))
	routes = view()
	if nodes := routes[0].(map[string]any)["nodes"].([]any); len(nodes) != 1 || nodes[0].(map[string]any)["node_id"] != "r2" {
		t.Fatalf("stale row served: %v", nodes)
	}
	// An empty report clears the node's rows.
	post(internalToken, "r2", `{"routes":[]}`)
	if len(view()) != 0 {
		t.Fatal("empty report did not clear the node's rows")
	}
	// Rows older than an hour are pruned.
	post(internalToken, "r3", report(1, 1))
	m.clock.Add(PruneAfter + time.Second)
	api.Telemetry().View()
	api.Telemetry().mu.Lock()
	left := len(api.Telemetry().rows)
	api.Telemetry().mu.Unlock()
	if left != 0 {
		t.Fatalf("%d nodes left after the prune window", left)
	}
}

func TestKeySecretShownOnce(t *testing.T) {
	m := newMesh(t)
	api := m.apis[m.follower()]
	r := call(t, api, http.MethodPost, "/api/v1/keys", superToken, `{"name":"team-a","models":["alpha"]}`, "Idempotency-Key", "k-1")
	secret, _ := r.body["secret"].(string)
	if r.code != http.StatusCreated || !strings.HasPrefix(secret, "sk-rolter-") {
		t.Fatalf("create key: %d %s", r.code, r.raw)
	}
	st := m.c.Node(m.follower()).State()
	if st.Keys["team-a"].SHA256 != cluster.HashToken(secret) {
		t.Error("stored hash does not match the secret shown")
	}
	// The retry (same Idempotency-Key) applies once and shows no secret.
	r = call(t, api, http.MethodPost, "/api/v1/keys", superToken, `{"name":"team-a","models":["alpha"]}`, "Idempotency-Key", "k-1")
	if r.code != http.StatusOK || r.body["secret"] != nil {
		t.Fatalf("retry: %d %s", r.code, r.raw)
	}
	list := call(t, api, http.MethodGet, "/api/v1/keys", superToken, "")
	if strings.Contains(list.raw, secret) || strings.Contains(list.raw, cluster.HashToken(secret)) || strings.Contains(list.raw, "secret\"") {
		t.Errorf("key listing leaks the secret: %s", list.raw)
	}
	if n := len(list.body["data"].([]any)); n != 1 {
		t.Errorf("%d keys after a retried create, want 1", n)
	}
}

func TestProviderCRUDValidatesAndAudits(t *testing.T) {
	m := newMesh(t)
	api := m.apis[m.follower()]
	auditLen := len(m.c.Node(m.follower()).State().Audit)
	steps := []struct {
		method, path, body string
		code               int
	}{
		{http.MethodPost, "/api/v1/providers", `{"name":"evil","api_base":"file:///etc/passwd"}`, http.StatusBadRequest},
		{http.MethodPost, "/api/v1/providers", `{"name":"evil","api_base":"http://user:pw@127.0.0.1/"}`, http.StatusBadRequest},
		{http.MethodPost, "/api/v1/providers", `{"name":"p2","api_base":"http://127.0.0.1:9000/v1"}`, http.StatusCreated},
		{http.MethodPost, "/api/v1/providers", `{"name":"p2","api_base":"http://127.0.0.1:9000/v1"}`, http.StatusConflict},
		{http.MethodPut, "/api/v1/providers/p2", `{"api_base":"http://127.0.0.1:9001/v1"}`, http.StatusOK},
		{http.MethodPut, "/api/v1/providers/vllm-a", `{"api_base":"http://127.0.0.1:9001/v1"}`, http.StatusConflict},
		{http.MethodPost, "/api/v1/routes", `{"model":"org/m","strategy":"lora_aware","max_loras":5000,"targets":[{"provider":"p2"}]}`, http.StatusBadRequest},
		{http.MethodPost, "/api/v1/provider-groups", `{"name":"g","slug":"g","max_loras":-1,"members":[{"provider":"p2"}]}`, http.StatusBadRequest},
		{http.MethodPost, "/api/v1/routes", `{"model":"org/m","strategy":"round_robin","targets":[{"provider":"p2"}]}`, http.StatusCreated},
		{http.MethodDelete, "/api/v1/providers/p2", "", http.StatusConflict},
		{http.MethodDelete, "/api/v1/routes/org/m", "", http.StatusNoContent},
		{http.MethodDelete, "/api/v1/providers/p2", "", http.StatusNoContent},
		{http.MethodGet, "/api/v1/providers/p2", "", http.StatusNotFound},
	}
	writes := 0
	for i, s := range steps {
		r := call(t, api, s.method, s.path, superToken, s.body)
		if r.code != s.code {
			t.Fatalf("step %d %s %s: %d %s, want %d", i, s.method, s.path, r.code, r.raw, s.code)
		}
		if s.method != http.MethodGet && s.code != http.StatusBadRequest {
			writes++ // reached the FSM: audited whatever the outcome
		}
	}
	if got := len(m.c.Node(m.follower()).State().Audit) - auditLen; got != writes {
		t.Errorf("%d audit entries for %d writes", got, writes)
	}
}

func TestWriteWithoutLeaderAnswers503(t *testing.T) {
	m := newMesh(t)
	f := m.follower()
	for i := range 3 {
		if i != f {
			if err := m.c.Stop(i); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := call(t, m.apis[f], http.MethodPut, "/api/v1/adaptive-routing-policy", superToken, goodPolicy)
	if r.code != http.StatusServiceUnavailable || r.hdr.Get("Retry-After") == "" {
		t.Fatalf("got %d (Retry-After %q), want 503 with Retry-After", r.code, r.hdr.Get("Retry-After"))
	}
}

type fakeInventory []RouterInfo

func (f fakeInventory) Routers() []RouterInfo { return f }

func TestClusterViewNamesTheLeader(t *testing.T) {
	m := newMesh(t)
	f := m.follower()
	api := New(Deps{Store: m.c.Node(f), Cluster: m.c.Node(f), InternalToken: internalToken,
		Inventory: fakeInventory{
			{RouterInfo: gossip.RouterInfo{NodeID: "n1", ConfigVersion: 7}, Alive: true},
			{RouterInfo: gossip.RouterInfo{NodeID: "r9"}, Alive: false}}})
	// Under load an election can be under way: wait until there is a
	// leader and the follower's view names it.
	var r resp
	var leader string
	testwait.For(t, 10*time.Second, "the follower naming the leader", func() error {
		li := m.c.Leader()
		if li < 0 {
			return fmt.Errorf("no leader")
		}
		r, leader = call(t, api, http.MethodGet, "/api/v1/cluster", superToken, ""), m.c.Node(li).NodeID()
		if r.body["leader"] != leader {
			return fmt.Errorf("leader %v, want %s", r.body["leader"], leader)
		}
		return nil
	})
	roles := map[string]string{}
	for _, x := range r.body["routers"].([]any) {
		rv := x.(map[string]any)
		roles[rv["node_id"].(string)] = rv["raft_role"].(string)
		if rv["node_id"] == m.c.Node(f).NodeID() && rv["config_version"] == nil {
			t.Error("own config_version missing")
		}
	}
	if roles[leader] != "leader" || roles[m.c.Node(f).NodeID()] != "follower" || roles["r9"] != "none" || len(roles) != 4 {
		t.Errorf("roles %v", roles)
	}
}

type fakeEngines []gossip.EngineSnapshot

func (f fakeEngines) Engines() []gossip.EngineSnapshot { return f }

// TestClusterViewListsEngines: GET /api/v1/cluster carries the gossip
// view's engines with the fields the dashboard reads, and an empty list
// (not null) without gossip.
func TestClusterViewListsEngines(t *testing.T) {
	m := newMesh(t)
	f := m.follower()
	occ := 0.25
	for _, tc := range []struct {
		name    string
		engines EngineInventory
		want    []string // engine_url/state
	}{
		{name: "no gossip", want: []string{}},
		{name: "two engines", engines: fakeEngines{
			{NodeID: "s1", EngineURL: "http://10.0.0.1:8000", State: "EXACT", ResidentBlocks: 12, KVEvents: true, LMCacheOccupancy: &occ, LMCache: true},
			{NodeID: "s2", EngineURL: "http://10.0.0.2:8000", State: "STALE"},
		}, want: []string{"http://10.0.0.1:8000/EXACT", "http://10.0.0.2:8000/STALE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := New(Deps{Store: m.c.Node(f), Cluster: m.c.Node(f), InternalToken: internalToken, Engines: tc.engines})
			r := call(t, api, http.MethodGet, "/api/v1/cluster", superToken, "")
			list, ok := r.body["engines"].([]any)
			if !ok {
				t.Fatalf("engines = %#v, want a list", r.body["engines"])
			}
			got := []string{}
			for _, x := range list {
				e := x.(map[string]any)
				got = append(got, e["engine_url"].(string)+"/"+e["state"].(string))
				for _, k := range []string{"node_id", "models", "age_ms", "resident_blocks", "running", "waiting", "kv_usage",
					"lmcache_occupancy", "adapters", "kv_events", "lmcache", "prefix_cache_hit_rate"} {
					if _, ok := e[k]; !ok {
						t.Errorf("engine %v lacks %q", e["engine_url"], k)
					}
				}
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("engines %v, want %v", got, tc.want)
			}
		})
	}
}

// unseededStore is a follower that has not applied the seeded state yet.
type unseededStore struct{ Store }

func (unseededStore) State() *cluster.State { return &cluster.State{} }

// A valid token on a router that has not applied the seed yet is not an
// invalid token: the answer says to retry, in the OpenAI error shape.
func TestNotYetReplicatedAnswers503NotInvalidToken(t *testing.T) {
	api := New(Deps{Store: unseededStore{}, Cluster: nil, InternalToken: internalToken})
	for _, path := range []string{"/api/v1/cluster", "/api/v1/providers", "/api/v1/adaptive-routing-policy"} {
		r := call(t, api, http.MethodGet, path, superToken, "")
		e, _ := r.body["error"].(map[string]any)
		if r.code != http.StatusServiceUnavailable || r.hdr.Get("Retry-After") == "" ||
			errMessage(r) != "not ready: state not yet replicated" || e["code"] != "not_ready" {
			t.Errorf("%s: %d Retry-After %q %s, want 503 with Retry-After and \"not ready: state not yet replicated\"",
				path, r.code, r.hdr.Get("Retry-After"), r.raw)
		}
	}
	// No token at all is still the caller's mistake.
	if r := call(t, api, http.MethodGet, "/api/v1/cluster", "", ""); r.code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", r.code)
	}
}

// compat.md: weights are integers ≥ 1. The API rejects 0 and negatives
// with an error naming the target, and an omitted weight is 1.
func TestTargetWeightsMustBeAtLeastOne(t *testing.T) {
	m := newMesh(t)
	api := m.apis[m.follower()]
	for _, tc := range []struct{ path, body, want string }{
		{"/api/v1/routes", `{"model":"w","targets":[{"provider":"vllm-a"},{"provider":"vllm-a","model":"x","weight":0}]}`,
			`targets[1] (provider "vllm-a"): weight: must be an integer ≥ 1, got 0`},
		{"/api/v1/routes", `{"model":"w","targets":[{"provider":"vllm-a","weight":-2}]}`,
			`targets[0] (provider "vllm-a"): weight: must be an integer ≥ 1, got -2`},
		{"/api/v1/provider-groups", `{"name":"g","slug":"g","members":[{"provider":"vllm-a","weight":0}]}`,
			`members[0] (provider "vllm-a"): weight: must be an integer ≥ 1, got 0`},
	} {
		r := call(t, api, http.MethodPost, tc.path, superToken, tc.body)
		if r.code != http.StatusBadRequest || errMessage(r) != tc.want {
			t.Errorf("POST %s %s: %d %q, want 400 %q", tc.path, tc.body, r.code, errMessage(r), tc.want)
		}
	}
	r := call(t, api, http.MethodPost, "/api/v1/routes", superToken, `{"model":"w","targets":[{"provider":"vllm-a"},{"provider":"vllm-a","model":"x","weight":3}]}`)
	if r.code != http.StatusCreated || !strings.Contains(r.raw, `"weight":1`) || !strings.Contains(r.raw, `"weight":3`) {
		t.Fatalf("valid route: %d %s", r.code, r.raw)
	}
}

// Routes and groups carry enabled (default true), replicated and editable;
// affected_routes lists only enabled routes on adaptive, and an update
// that leaves enabled out keeps the stored value.
func TestEnabledFlagOnRoutesAndGroups(t *testing.T) {
	m := newMesh(t)
	api := m.apis[m.follower()]
	affected := func() string {
		t.Helper()
		r := call(t, api, http.MethodGet, "/api/v1/adaptive-routing-policy", superToken, "")
		b, _ := json.Marshal(r.body["affected_routes"])
		return string(b)
	}
	// The seeded routes are owned by rolter.toml: the route this test
	// disables is one the API created.
	r := call(t, api, http.MethodPost, "/api/v1/routes", superToken, `{"model":"omega","strategy":"adaptive","targets":[{"provider":"vllm-a"}]}`)
	if r.code != http.StatusCreated {
		t.Fatalf("create omega: %d %s", r.code, r.raw)
	}
	testwait.For(t, 5*time.Second, "omega replicated", func() bool {
		_, ok := m.c.Node(m.c.Leader()).State().Routes["omega"]
		return ok
	})
	if got := affected(); got != `["alpha","omega","zeta"]` {
		t.Fatalf("affected_routes %s", got)
	}
	r = call(t, api, http.MethodPut, "/api/v1/routes/omega", superToken, `{"strategy":"adaptive","enabled":false,"targets":[{"provider":"vllm-a"}]}`)
	if r.code != http.StatusOK || r.body["enabled"] != false {
		t.Fatalf("disable omega: %d %s", r.code, r.raw)
	}
	testwait.For(t, 5*time.Second, "disabled route replicated", func() bool {
		for i := range 3 {
			if m.c.Node(i).State().Routes["omega"].IsEnabled() {
				return false
			}
		}
		return true
	})
	if got := affected(); got != `["alpha","zeta"]` {
		t.Errorf("affected_routes with omega disabled: %s", got)
	}
	r = call(t, api, http.MethodPut, "/api/v1/routes/omega", superToken, `{"strategy":"adaptive","targets":[{"provider":"vllm-a","weight":2}]}`)
	if r.code != http.StatusOK || r.body["enabled"] != false {
		t.Errorf("update without enabled re-enabled the route: %d %s", r.code, r.raw)
	}
	r = call(t, api, http.MethodPost, "/api/v1/provider-groups", superToken, `{"name":"g","slug":"g","enabled":false,"members":[{"provider":"vllm-a"}]}`)
	if r.code != http.StatusCreated || r.body["enabled"] != false {
		t.Fatalf("create disabled group: %d %s", r.code, r.raw)
	}
	r = call(t, api, http.MethodGet, "/api/v1/routes/alpha", superToken, "")
	if r.body["enabled"] != true {
		t.Errorf("a route created without enabled reads %v", r.body["enabled"])
	}
	testwait.For(t, 5*time.Second, "group replicated", func() bool {
		g, ok := m.c.Node(m.c.Leader()).State().Groups["g"]
		return ok && !g.IsEnabled()
	})
}

// A key's provider allowlist is validated, replicated and shown.
func TestKeyProviderAllowlistThroughTheAPI(t *testing.T) {
	m := newMesh(t)
	api := m.apis[m.follower()]
	r := call(t, api, http.MethodPost, "/api/v1/keys", superToken, `{"name":"k","providers":["vllm-a","nope"]}`)
	if r.code != http.StatusBadRequest || errMessage(r) != `providers[1]: no provider named "nope"` {
		t.Fatalf("unknown provider: %d %s", r.code, r.raw)
	}
	r = call(t, api, http.MethodPost, "/api/v1/keys", superToken, `{"name":"k","providers":["vllm-a"]}`)
	if r.code != http.StatusCreated || !strings.Contains(r.raw, `"providers":["vllm-a"]`) {
		t.Fatalf("create: %d %s", r.code, r.raw)
	}
	testwait.For(t, 5*time.Second, "key replicated with its providers", func() bool {
		for i := range 3 {
			if k, ok := m.c.Node(i).State().Keys["k"]; !ok || len(k.Providers) != 1 || k.Providers[0] != "vllm-a" {
				return false
			}
		}
		return true
	})
	cfg := m.c.Node(0).State().Config(nil)
	if len(cfg.Keys) != 1 || len(cfg.Keys[0].Providers) != 1 {
		t.Errorf("data-plane config keys %+v", cfg.Keys)
	}
}

// The model price catalog is editable through the API with rolter.toml's
// validation, replicated, and part of the data plane's config.
func TestModelPriceCatalog(t *testing.T) {
	m := newMesh(t)
	api := m.apis[m.follower()]
	for _, tc := range []struct{ body, want string }{
		{`{"price_in_per_mtok":-1,"price_out_per_mtok":1}`, "price_in_per_mtok: must be a finite number ≥ 0"},
		{`{"price_in_per_mtok":1}`, "price_in_per_mtok and price_out_per_mtok: both required"},
		{`{"model":"other","price_in_per_mtok":1,"price_out_per_mtok":1}`, "model: does not match the URL"},
	} {
		r := call(t, api, http.MethodPut, "/api/v1/model-prices/meta-llama/Llama-3.1-8B", superToken, tc.body)
		if r.code != http.StatusBadRequest || errMessage(r) != tc.want {
			t.Errorf("PUT %s: %d %q, want 400 %q", tc.body, r.code, errMessage(r), tc.want)
		}
	}
	r := call(t, api, http.MethodPut, "/api/v1/model-prices/meta-llama/Llama-3.1-8B", superToken, `{"price_in_per_mtok":0.2,"price_out_per_mtok":0.6}`)
	if r.code != http.StatusOK || r.body["model"] != "meta-llama/Llama-3.1-8B" || r.body["price_out_per_mtok"] != 0.6 {
		t.Fatalf("PUT: %d %s", r.code, r.raw)
	}
	testwait.For(t, 5*time.Second, "catalog replicated", func() bool {
		for i := range 3 {
			cfg := m.c.Node(i).State().Config(nil)
			if len(cfg.Models) != 1 || cfg.Models[0].PriceInPerMtok != 0.2 {
				return false
			}
		}
		return true
	})
	r = call(t, m.apis[0], http.MethodGet, "/api/v1/model-prices", superToken, "")
	if r.code != http.StatusOK || !strings.Contains(r.raw, `"model":"meta-llama/Llama-3.1-8B"`) {
		t.Errorf("GET: %d %s", r.code, r.raw)
	}
	if r := call(t, api, http.MethodDelete, "/api/v1/model-prices/meta-llama/Llama-3.1-8B", superToken, ""); r.code != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", r.code, r.raw)
	}
	if r := call(t, api, http.MethodDelete, "/api/v1/model-prices/meta-llama/Llama-3.1-8B", superToken, ""); r.code != http.StatusNotFound {
		t.Errorf("second DELETE: %d %s", r.code, r.raw)
	}
}

type fakeParked []ParkedTarget

func (f fakeParked) ParkedTargets() []ParkedTarget { return f }

// GET /api/v1/cluster says which targets this router has parked, until
// when and why; an empty list when none.
func TestClusterViewListsParkedTargets(t *testing.T) {
	m := newMesh(t)
	until := time.Date(2026, 12, 1, 9, 0, 30, 0, time.UTC)
	api := New(Deps{Store: m.c.Node(0), Cluster: m.c.Node(0), InternalToken: internalToken,
		Parked: fakeParked{{Target: "a/x", Until: until, Reason: "HTTP 429 with Retry-After 30"}}})
	r := call(t, api, http.MethodGet, "/api/v1/cluster", superToken, "")
	if !strings.Contains(r.raw, `"parked_targets":[{"target":"a/x","until":"2026-12-01T09:00:30Z","reason":"HTTP 429 with Retry-After 30"}]`) {
		t.Errorf("cluster view %s", r.raw)
	}
	r = call(t, New(Deps{Store: m.c.Node(0), Cluster: m.c.Node(0), InternalToken: internalToken}), http.MethodGet, "/api/v1/cluster", superToken, "")
	if !strings.Contains(r.raw, `"parked_targets":[]`) {
		t.Errorf("no parked targets: %s", r.raw)
	}
}

func TestResumeStreamsReplicatesToEveryRouter(t *testing.T) {
	m := newMesh(t)
	api := m.apis[m.follower()]
	if r := call(t, api, http.MethodPost, "/api/v1/providers", superToken, `{"name":"p2","api_base":"http://127.0.0.1:9000/v1"}`); r.code != http.StatusCreated {
		t.Fatalf("create provider: %d %s", r.code, r.raw)
	}
	writes := []struct{ path, body string }{
		{"/api/v1/routes", `{"model":"on","resume_streams":true,"targets":[{"provider":"p2"}]}`},
		{"/api/v1/routes", `{"model":"off","resume_streams":false,"targets":[{"provider":"p2"}]}`},
		{"/api/v1/routes", `{"model":"inherit","targets":[{"provider":"p2"}]}`},
		{"/api/v1/provider-groups", `{"name":"g","slug":"g","resume_streams":true,"members":[{"provider":"p2"}]}`},
	}
	for _, w := range writes {
		if r := call(t, api, http.MethodPost, w.path, superToken, w.body); r.code != http.StatusCreated {
			t.Fatalf("POST %s %s: %d %s", w.path, w.body, r.code, r.raw)
		}
	}
	str := func(b *bool) string {
		if b == nil {
			return "unset"
		}
		return fmt.Sprint(*b)
	}
	want := map[string]string{"on": "true", "off": "false", "inherit": "unset"}
	for i := range 3 {
		testwait.For(t, 5*time.Second, "group replicated", func() bool { _, ok := m.c.Node(i).State().Groups["g"]; return ok })
		st := m.c.Node(i).State()
		for model, w := range want {
			if got := str(st.Routes[model].ResumeStreams); got != w {
				t.Errorf("node %d route %s: resume_streams %s, want %s", i, model, got, w)
			}
		}
		if got := str(st.Groups["g"].ResumeStreams); got != "true" {
			t.Errorf("node %d group g: resume_streams %s, want true", i, got)
		}
	}
	r := call(t, api, http.MethodGet, "/api/v1/routes/off", superToken, "")
	if v, ok := r.body["resume_streams"].(bool); !ok || v {
		t.Errorf("GET route off: resume_streams %v in %s", r.body["resume_streams"], r.raw)
	}
}

// A write the state machine refuses, made on a follower and so forwarded
// to the leader, answers with the refusal's code in the OpenAI error
// shape and the status that code maps to.
func TestRefusedWritesAnswerTheirCode(t *testing.T) {
	m := newMesh(t)
	api := m.apis[m.follower()]
	if r := call(t, api, http.MethodPost, "/api/v1/providers", superToken, `{"name":"gpu-b","api_base":"http://127.0.0.1:9/v1"}`); r.code != http.StatusCreated {
		t.Fatalf("create gpu-b: %d %s", r.code, r.raw)
	}
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code, message            string
	}{
		{"name taken", http.MethodPost, "/api/v1/providers", `{"name":"gpu-b","api_base":"http://127.0.0.1:9/v1"}`,
			http.StatusConflict, "conflict", `provider "gpu-b" already exists`},
		{"no such route", http.MethodDelete, "/api/v1/routes/nope", "", http.StatusNotFound, "not_found", `no route "nope"`},
		{"unknown target provider", http.MethodPost, "/api/v1/routes",
			`{"model":"m2","strategy":"round_robin","targets":[{"provider":"ghost","model":"m2","weight":1}]}`,
			http.StatusBadRequest, "invalid", `no provider named "ghost"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, api, tc.method, tc.path, superToken, tc.body)
			e, _ := r.body["error"].(map[string]any)
			if r.code != tc.status || e["code"] != tc.code || e["type"] != "invalid_request_error" || !strings.Contains(errMessage(r), tc.message) {
				t.Fatalf("%d %s, want %d with code %q and a message containing %q", r.code, r.raw, tc.status, tc.code, tc.message)
			}
		})
	}
}

// Every kind reads the same way: its list under "data" (sorted by name),
// one entry by its name in the URL (slashes allowed where names have
// them), and a name it does not hold answers 404 not_found in the OpenAI
// shape, naming the kind.
func TestReadsOfEveryKind(t *testing.T) {
	m := newMesh(t)
	api := m.apis[m.follower()]
	for _, w := range []struct{ method, path, body string }{
		{http.MethodPost, "/api/v1/provider-groups", `{"name":"pool","slug":"pool","members":[{"provider":"vllm-a"}]}`},
		{http.MethodPut, "/api/v1/model-prices/meta-llama/Llama-3.1-8B-Instruct", `{"price_in_per_mtok":0.2,"price_out_per_mtok":0.6}`},
	} {
		if r := call(t, api, w.method, w.path, superToken, w.body); r.code/100 != 2 {
			t.Fatalf("%s %s: %d %s", w.method, w.path, r.code, r.raw)
		}
	}
	for _, tc := range []struct {
		kind, list, one, field, want, missing string
	}{
		{"provider", "/api/v1/providers", "/api/v1/providers/vllm-a", "name", "vllm-a", "no such provider"},
		{"route", "/api/v1/routes", "/api/v1/routes/alpha", "model", "alpha", "no such route"},
		{"provider group", "/api/v1/provider-groups", "/api/v1/provider-groups/pool", "name", "pool", "no such provider group"},
		{"model price", "/api/v1/model-prices", "/api/v1/model-prices/meta-llama/Llama-3.1-8B-Instruct", "model",
			"meta-llama/Llama-3.1-8B-Instruct", "no such model in the price catalog"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			testwait.For(t, 5*time.Second, tc.kind+" replicated", func() bool {
				return call(t, api, http.MethodGet, tc.one, superToken, "").code == http.StatusOK
			})
			r := call(t, api, http.MethodGet, tc.one, superToken, "")
			if r.body[tc.field] != tc.want {
				t.Errorf("GET %s: %s", tc.one, r.raw)
			}
			l := call(t, api, http.MethodGet, tc.list, superToken, "")
			data, _ := l.body["data"].([]any)
			var names []string
			for _, e := range data {
				names = append(names, fmt.Sprint(e.(map[string]any)[tc.field]))
			}
			if l.code != http.StatusOK || !slices.Contains(names, tc.want) || !slices.IsSorted(names) {
				t.Errorf("GET %s: %d, names %v", tc.list, l.code, names)
			}
			miss := call(t, api, http.MethodGet, tc.list+"/nope", superToken, "")
			e, _ := miss.body["error"].(map[string]any)
			if miss.code != http.StatusNotFound || e["code"] != "not_found" || e["type"] != "invalid_request_error" || errMessage(miss) != tc.missing {
				t.Errorf("GET %s/nope: %d %s", tc.list, miss.code, miss.raw)
			}
		})
	}
}
