package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rolter/rolter/adaptive"
	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/strategies"
)

// fakeAdmin is an in-test admin API implementing the contract the
// dashboard's api.js assumes, with the real policy validation
// (config.ValidatePolicy). Tests mutate its state under mu and read what
// the page sent.

type fakeRouter struct {
	NodeID               string `json:"node_id"`
	Address              string `json:"address"`
	Build                string `json:"build"`
	RaftRole             string `json:"raft_role"`
	AppliedConfigVersion int    `json:"applied_config_version"`
	// Admission is the router's admission state (nil: off), as adminapi's
	// AdmissionReport.
	Admission map[string]any `json:"admission,omitempty"`
}

type fakeEngine struct {
	NodeID           string   `json:"node_id"`
	EngineURL        string   `json:"engine_url"`
	Models           []string `json:"models"`
	State            string   `json:"state"`
	AgeMS            int      `json:"age_ms"`
	ResidentBlocks   int      `json:"resident_blocks"`
	Running          int      `json:"running"`
	Waiting          int      `json:"waiting"`
	KVUsage          float64  `json:"kv_usage"`
	LMCacheOccupancy *float64 `json:"lmcache_occupancy"`
	Adapters         []string `json:"adapters"`
	KVEvents         bool     `json:"kv_events"`
	LMCache          bool     `json:"lmcache"`
	HitRate          *float64 `json:"prefix_cache_hit_rate"`
	QueuedPrefill    int      `json:"queued_prefill_tokens"`
}

type fakeTarget struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
	Weight   int    `json:"weight"`
}

type fakeRoute struct {
	Model    string       `json:"model"`
	Strategy string       `json:"strategy"`
	Targets  []fakeTarget `json:"targets"`
	Discover bool         `json:"discover"`
	ReadOnly bool         `json:"readonly"`
}

type fakeGroup struct {
	Name     string       `json:"name"`
	Slug     string       `json:"slug"`
	Strategy string       `json:"strategy"`
	Members  []fakeTarget `json:"members"`
	ReadOnly bool         `json:"readonly"`
}

type fakeProvider struct {
	Name            string  `json:"name"`
	APIBase         string  `json:"api_base"`
	PriceInPerMtok  float64 `json:"price_in_per_mtok"`
	PriceOutPerMtok float64 `json:"price_out_per_mtok"`
	ReadOnly        bool    `json:"readonly"`
}

type fakeAudit struct {
	Seq           int    `json:"seq"`
	Time          string `json:"time"`
	Actor         string `json:"actor"`
	Action        string `json:"action"`
	Resource      string `json:"resource"`
	Outcome       string `json:"outcome"`
	ConfigVersion int    `json:"config_version"`
	Detail        any    `json:"detail,omitempty"`
}

type fakeTelemetryTarget struct {
	Target          string   `json:"target"`
	Provider        string   `json:"provider"`
	UpstreamModel   string   `json:"upstream_model"`
	Score           float64  `json:"score"`
	LatencyScore    float64  `json:"latency_score"`
	CostScore       float64  `json:"cost_score"`
	LoadScore       float64  `json:"load_score"`
	LatencyMS       *float64 `json:"latency_ms"`
	CostPerMtok     float64  `json:"cost_per_mtok"`
	InFlight        int      `json:"in_flight"`
	Samples         int      `json:"samples"`
	LastSampleAgeMS int      `json:"last_sample_age_ms"`
}

type fakeTelemetryNode struct {
	NodeID     string                `json:"node_id"`
	Engaged    bool                  `json:"engaged"`
	Observed   int                   `json:"observed"`
	Decisions  map[string]int        `json:"decisions"`
	Policy     adaptive.Policy       `json:"policy"`
	ReportedAt string                `json:"reported_at"`
	Targets    []fakeTelemetryTarget `json:"targets"`
}

type fakeTelemetryRoute struct {
	Model   string              `json:"model"`
	Engaged bool                `json:"engaged"`
	Nodes   []fakeTelemetryNode `json:"nodes"`
}

type fakeAdmin struct {
	token string
	// viewerToken may read everything but the superadmin-only adaptive
	// routing endpoints (403 there), as adminapi's viewer role.
	viewerToken string

	mu            sync.Mutex
	configVersion int
	leader        string
	routers       []fakeRouter
	engines       []fakeEngine
	pinned        map[string][2]int // node id -> running, waiting, fixed by a test
	routes        []fakeRoute
	groups        []fakeGroup
	providers     []fakeProvider
	policy        adaptive.Policy
	policyUpdated time.Time
	telemetry     []fakeTelemetryRoute
	audit         []fakeAudit
	noStrategies  bool
	routePuts     []map[string]any
	policyPuts    int
	clusterPolls  int
	tick          int
}

func ptr[T any](v T) *T { return &v }

// newFakeAdmin returns a mesh of three routers and five engines with the
// routes and groups the tests and the screenshots use.
func newFakeAdmin(token string) *fakeAdmin {
	const llama, qwen = "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct"
	f := &fakeAdmin{
		token:         token,
		configVersion: 42,
		leader:        "router-1",
		pinned:        map[string][2]int{},
		policy:        adaptive.DefaultPolicy(),
		policyUpdated: time.Date(2026, 11, 28, 9, 30, 0, 0, time.UTC),
	}
	f.routers = []fakeRouter{
		{NodeID: "router-1", Address: "10.0.0.11:4001", Build: "v0.4.0 (3f9c2e1)", RaftRole: "leader", AppliedConfigVersion: 42},
		{NodeID: "router-2", Address: "10.0.0.12:4001", Build: "v0.4.0 (3f9c2e1)", RaftRole: "follower", AppliedConfigVersion: 42},
		{NodeID: "router-3", Address: "10.0.0.13:4001", Build: "v0.4.0 (3f9c2e1)", RaftRole: "follower", AppliedConfigVersion: 41},
	}
	f.engines = []fakeEngine{
		{NodeID: "gpu-a1", EngineURL: "http://10.0.1.21:8000", Models: []string{llama}, State: "EXACT", AgeMS: 420, KVEvents: true,
			Adapters: []string{"sql-lora", "support-v3"}, ResidentBlocks: 18432, QueuedPrefill: 12800},
		{NodeID: "gpu-a2", EngineURL: "http://10.0.1.22:8000", Models: []string{llama}, State: "EXACT", AgeMS: 810, KVEvents: true,
			Adapters: []string{"support-v3"}, ResidentBlocks: 16120},
		{NodeID: "gpu-a3", EngineURL: "http://10.0.1.23:8000", Models: []string{llama}, State: "STALE", AgeMS: 94000, KVEvents: false,
			ResidentBlocks: 0}, // as the real API reports a silent sidecar: residency dropped
		{NodeID: "gpu-b1", EngineURL: "http://10.0.2.31:8000", Models: []string{qwen}, State: "DEGRADED", AgeMS: 2300, KVEvents: true,
			LMCache: true, LMCacheOccupancy: ptr(0.62), ResidentBlocks: 12003},
		{NodeID: "gpu-b2", EngineURL: "http://10.0.2.32:8000", Models: []string{qwen}, State: "DEGRADED", AgeMS: 300, KVEvents: false, // no KV-event stream
			LMCache: true, LMCacheOccupancy: ptr(0.31), ResidentBlocks: 0},
	}
	f.providers = []fakeProvider{
		{Name: "gpu-a1", APIBase: "http://10.0.1.21:8000/v1", ReadOnly: true},
		{Name: "gpu-a2", APIBase: "http://10.0.1.22:8000/v1", ReadOnly: true},
		{Name: "gpu-a3", APIBase: "http://10.0.1.23:8000/v1", ReadOnly: true},
		{Name: "gpu-b1", APIBase: "http://10.0.2.31:8000/v1"},
		{Name: "gpu-b2", APIBase: "http://10.0.2.32:8000/v1"},
		{Name: "hosted-api", APIBase: "https://api.example.com/v1", PriceInPerMtok: 0.15, PriceOutPerMtok: 0.6},
	}
	f.routes = []fakeRoute{
		{Model: "llama-3.1-8b", Strategy: "precise_cache_aware", Targets: []fakeTarget{
			{Provider: "gpu-a1", Model: llama, Weight: 1}, {Provider: "gpu-a2", Model: llama, Weight: 1}, {Provider: "gpu-a3", Model: llama, Weight: 1}}},
		{Model: "chat-adaptive", Strategy: "adaptive", Targets: []fakeTarget{
			{Provider: "gpu-a1", Model: llama, Weight: 3}, {Provider: "hosted-api", Model: "gpt-4o-mini", Weight: 1}}},
		{Model: "support-bot", Strategy: "adaptive", Targets: []fakeTarget{
			{Provider: "gpu-a2", Model: llama, Weight: 1}, {Provider: "hosted-api", Model: "gpt-4o-mini", Weight: 1}}},
		{Model: "qwen-7b", Strategy: "weighted", Targets: []fakeTarget{
			{Provider: "gpu-b1", Model: qwen, Weight: 3}, {Provider: "gpu-b2", Model: qwen, Weight: 1}}},
		{Model: qwen, Strategy: "lmcache_aware", Discover: true},
		{Model: "embed-small", Strategy: "round_robin", ReadOnly: true, Targets: []fakeTarget{
			{Provider: "gpu-b1", Model: "bge-small", Weight: 2}, {Provider: "gpu-b2", Model: "bge-small", Weight: 1}}},
	}
	f.groups = []fakeGroup{
		{Name: "Llama fleet", Slug: "llama-fleet", Strategy: "cache_aware", Members: []fakeTarget{
			{Provider: "gpu-a1", Weight: 1}, {Provider: "gpu-a2", Weight: 1}, {Provider: "gpu-a3", Weight: 1}}},
		{Name: "Batch pool", Slug: "batch", Strategy: "adaptive", Members: []fakeTarget{
			{Provider: "gpu-b1", Weight: 2}, {Provider: "hosted-api", Model: "gpt-4o-mini", Weight: 1}}},
	}
	f.audit = []fakeAudit{
		{Seq: 1, Time: "2026-11-28T08:12:41Z", Actor: "ops", Action: "provider.create", Resource: "providers/hosted-api", Outcome: "ok", ConfigVersion: 41},
		{Seq: 2, Time: "2026-11-28T09:30:00Z", Actor: "ops", Action: "route.update", Resource: "routes/qwen-7b", Outcome: "ok", ConfigVersion: 42,
			Detail: map[string]any{"strategy": "weighted"}},
	}
	return f
}

// advance moves the engines' load along smooth, deterministic curves so the
// charts have something to draw; pinned engines keep the values a test set.
func (f *fakeAdmin) advance() {
	f.tick++
	for i := range f.engines {
		e := &f.engines[i]
		phase := float64(i) * 1.3
		x := float64(f.tick)/6 + phase
		e.Running = 6 + int(math.Round(4*math.Sin(x)))
		e.Waiting = max(0, int(math.Round(3*math.Sin(x*0.7+1)+float64(i%3))))
		e.KVUsage = 0.45 + 0.3*math.Sin(x*0.5)*0.5 + 0.08*float64(i)
		if e.KVEvents && e.State != "STALE" {
			e.HitRate = ptr(0.55 + 0.25*math.Sin(x*0.4+phase) + 0.03*float64(i))
		} else {
			e.HitRate = nil
		}
		if p, ok := f.pinned[e.NodeID]; ok {
			e.Running, e.Waiting = p[0], p[1]
		}
		if e.State == "STALE" { // the real view reports no load for a silent sidecar
			e.Running, e.Waiting, e.KVUsage = 0, 0, 0
		}
	}
}

func (f *fakeAdmin) affectedRoutes() []string {
	out := []string{}
	for _, r := range f.routes {
		if r.Strategy == "adaptive" {
			out = append(out, r.Model)
		}
	}
	sort.Strings(out)
	return out
}

func (f *fakeAdmin) policyView() map[string]any {
	p := f.policy
	return map[string]any{
		"enabled": p.Enabled, "latency_weight": p.LatencyWeight, "cost_weight": p.CostWeight, "load_weight": p.LoadWeight,
		"exploration_ratio": p.ExplorationRatio, "min_samples": p.MinSamples,
		"updated_at": f.policyUpdated.Format(time.RFC3339), "affected_routes": f.affectedRoutes(),
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg, typ, code string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"message": msg, "type": typ, "code": code}})
}

// Handler serves the dashboard at /ui/ and the fake admin API under /api/v1.
func (f *fakeAdmin) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/ui/", Handler())
	mux.Handle("/ui", Handler())
	api := func(pattern string, h func(http.ResponseWriter, *http.Request)) {
		superOnly := strings.Contains(pattern, "adaptive-routing")
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			auth := r.Header.Get("Authorization")
			switch {
			case auth == "Bearer "+f.token:
			case f.viewerToken != "" && auth == "Bearer "+f.viewerToken:
				if superOnly || r.Method != http.MethodGet {
					writeError(w, http.StatusForbidden, "this endpoint requires the superadmin role", "permission_error", "insufficient_role")
					return
				}
			default:
				writeError(w, http.StatusUnauthorized, "invalid admin token", "authentication_error", "invalid_token")
				return
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			h(w, r)
		})
	}
	api("GET /api/v1/cluster", func(w http.ResponseWriter, r *http.Request) {
		f.clusterPolls++
		f.advance()
		writeJSON(w, 200, map[string]any{"leader": f.leader, "config_version": f.configVersion, "routers": f.routers, "engines": f.engines})
	})
	api("GET /api/v1/routes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"data": f.routes})
	})
	api("PUT /api/v1/routes/{model...}", f.putRoute)
	api("GET /api/v1/providers", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"data": f.providers})
	})
	api("GET /api/v1/provider-groups", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"data": f.groups})
	})
	api("PUT /api/v1/provider-groups/{name}", f.putGroup)
	api("GET /api/v1/adaptive-routing-policy", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, f.policyView())
	})
	api("PUT /api/v1/adaptive-routing-policy", f.putPolicy)
	api("GET /api/v1/adaptive-routing-telemetry", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"generated_at": time.Now().UTC().Format(time.RFC3339), "fresh_window_secs": 60,
			"routes": append([]fakeTelemetryRoute{}, f.telemetry...)})
	})
	api("GET /api/v1/audit", func(w http.ResponseWriter, r *http.Request) {
		out := slices.Clone(f.audit) // newest first, as adminapi sends it
		slices.Reverse(out)
		writeJSON(w, 200, map[string]any{"data": out})
	})
	api("GET /api/v1/strategies", func(w http.ResponseWriter, r *http.Request) {
		if f.noStrategies {
			writeError(w, http.StatusNotFound, "not found", "not_found_error", "not_found")
			return
		}
		type s struct {
			Name           string  `json:"name"`
			UsesWeights    bool    `json:"uses_weights"`
			NeedsTelemetry *string `json:"needs_telemetry"`
		}
		var out []s
		for _, n := range compatStrategies {
			var need *string
			switch n {
			case "precise_cache_aware":
				need = ptr("kv_events")
			case "lmcache_aware":
				need = ptr("lmcache")
			}
			out = append(out, s{Name: n, UsesWeights: strategies.UsesWeights(n), NeedsTelemetry: need})
		}
		writeJSON(w, 200, map[string]any{"strategies": out})
	})
	return mux
}

// compatStrategies are the strategy names compat.md fixes.
var compatStrategies = []string{"round_robin", "random", "power_of_two", "consistent_hash", "cache_aware", "weighted",
	"pipeline", "cheapest", "fastest", "precise_cache_aware", "lmcache_aware", "adaptive", "lora_aware", "predicted_latency"}

var errBadTargets = errors.New("weight must be an integer ≥ 1")

// checkTargets applies adminapi's rule: an omitted (0) weight means 1, a
// negative one is refused.
func checkTargets(ts []fakeTarget) error {
	for i := range ts {
		t := &ts[i]
		if t.Weight == 0 {
			t.Weight = 1
		}
		if t.Weight < 1 {
			return fmt.Errorf("target %s: %w", t.Provider, errBadTargets)
		}
	}
	return nil
}

func (f *fakeAdmin) audited(action, resource string, detail any) {
	f.configVersion++
	for i := range f.routers {
		f.routers[i].AppliedConfigVersion = f.configVersion
	}
	f.audit = append(f.audit, fakeAudit{Seq: len(f.audit) + 1, Time: time.Now().UTC().Format(time.RFC3339), Actor: "test",
		Action: action, Resource: resource, Outcome: "ok", ConfigVersion: f.configVersion, Detail: detail})
}

func (f *fakeAdmin) putRoute(w http.ResponseWriter, r *http.Request) {
	model := r.PathValue("model")
	raw := map[string]any{}
	var rt fakeRoute
	body, err := readBody(r)
	if err == nil {
		err = json.Unmarshal(body, &raw)
	}
	if err == nil {
		err = json.Unmarshal(body, &rt)
	}
	if err != nil {
		writeError(w, 400, "invalid JSON: "+err.Error(), "invalid_request_error", "invalid_json")
		return
	}
	f.routePuts = append(f.routePuts, raw)
	i := slices.IndexFunc(f.routes, func(x fakeRoute) bool { return x.Model == model })
	switch {
	case i < 0:
		writeError(w, 404, "no route "+model, "not_found_error", "not_found")
	case f.routes[i].ReadOnly:
		writeError(w, 403, "route "+model+" is defined in rolter.toml and read-only", "permission_error", "readonly")
	case rt.Model != model:
		writeError(w, 400, "model in body does not match the path", "invalid_request_error", "invalid_route")
	case !slices.Contains(compatStrategies, rt.Strategy):
		writeError(w, 400, fmt.Sprintf("unknown strategy %q", rt.Strategy), "invalid_request_error", "invalid_route")
	case checkTargets(rt.Targets) != nil:
		writeError(w, 400, checkTargets(rt.Targets).Error(), "invalid_request_error", "invalid_route")
	default:
		f.routes[i] = rt
		f.audited("route.update", "routes/"+model, map[string]any{"strategy": rt.Strategy})
		writeJSON(w, 200, rt)
	}
}

func (f *fakeAdmin) putGroup(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var g fakeGroup
	body, err := readBody(r)
	if err == nil {
		err = json.Unmarshal(body, &g)
	}
	i := slices.IndexFunc(f.groups, func(x fakeGroup) bool { return x.Name == name })
	switch {
	case err != nil:
		writeError(w, 400, "invalid JSON: "+err.Error(), "invalid_request_error", "invalid_json")
	case i < 0:
		writeError(w, 404, "no provider group "+name, "not_found_error", "not_found")
	case g.Name != name:
		writeError(w, 400, "name: does not match the URL", "invalid_request_error", "invalid_value")
	case checkTargets(g.Members) != nil:
		writeError(w, 400, checkTargets(g.Members).Error(), "invalid_request_error", "invalid_group")
	default:
		f.groups[i] = g
		f.audited("provider_group.update", "provider-groups/"+name, map[string]any{"strategy": g.Strategy})
		writeJSON(w, 200, g)
	}
}

func (f *fakeAdmin) putPolicy(w http.ResponseWriter, r *http.Request) {
	f.policyPuts++
	var in struct {
		Enabled          *bool    `json:"enabled"`
		LatencyWeight    *float64 `json:"latency_weight"`
		CostWeight       *float64 `json:"cost_weight"`
		LoadWeight       *float64 `json:"load_weight"`
		ExplorationRatio *float64 `json:"exploration_ratio"`
		MinSamples       *int     `json:"min_samples"`
	}
	body, err := readBody(r)
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		err = dec.Decode(&in)
	}
	if err != nil {
		writeError(w, 400, "invalid JSON: "+err.Error(), "invalid_request_error", "invalid_policy")
		return
	}
	for name, missing := range map[string]bool{"enabled": in.Enabled == nil, "latency_weight": in.LatencyWeight == nil,
		"cost_weight": in.CostWeight == nil, "load_weight": in.LoadWeight == nil,
		"exploration_ratio": in.ExplorationRatio == nil, "min_samples": in.MinSamples == nil} {
		if missing {
			writeError(w, 400, name+" is required", "invalid_request_error", "invalid_policy")
			return
		}
	}
	p := adaptive.Policy{Enabled: *in.Enabled, LatencyWeight: *in.LatencyWeight, CostWeight: *in.CostWeight,
		LoadWeight: *in.LoadWeight, ExplorationRatio: *in.ExplorationRatio, MinSamples: *in.MinSamples}
	if err := config.ValidatePolicy(p); err != nil {
		writeError(w, 400, err.Error(), "invalid_request_error", "invalid_policy")
		return
	}
	f.policy = p
	f.policyUpdated = time.Now().UTC()
	f.audited("adaptive_routing_policy.update", "adaptive-routing-policy", p)
	writeJSON(w, 200, f.policyView())
}

func readBody(r *http.Request) ([]byte, error) {
	defer r.Body.Close()
	return io.ReadAll(io.LimitReader(r.Body, 1<<20))
}

// sampleTelemetry is a realistic report: chat-adaptive blending on
// router-1 and still warming up on router-2; support-bot blending on
// router-1.
func sampleTelemetry(now time.Time, p adaptive.Policy) []fakeTelemetryRoute {
	ts := now.UTC().Add(-4 * time.Second).Format(time.RFC3339)
	const llama = "meta-llama/Llama-3.1-8B-Instruct"
	return []fakeTelemetryRoute{
		{Model: "chat-adaptive", Engaged: true, Nodes: []fakeTelemetryNode{
			{NodeID: "router-1", Engaged: true, Observed: 1840, ReportedAt: ts, Policy: p,
				Decisions: map[string]int{"blend": 1612, "exploration": 88, "fallback": 140},
				Targets: []fakeTelemetryTarget{
					{Target: "gpu-a1/" + llama, Provider: "gpu-a1", UpstreamModel: llama, Score: 0.781, LatencyScore: 0.92, CostScore: 1, LoadScore: 0.55,
						LatencyMS: ptr(412.0), CostPerMtok: 0, InFlight: 7, Samples: 1420, LastSampleAgeMS: 180},
					{Target: "hosted-api/gpt-4o-mini", Provider: "hosted-api", UpstreamModel: "gpt-4o-mini", Score: 0.512, LatencyScore: 0.48, CostScore: 0.62, LoadScore: 0.9,
						LatencyMS: ptr(1180.0), CostPerMtok: 0.6, InFlight: 2, Samples: 420, LastSampleAgeMS: 950},
				}},
			{NodeID: "router-2", Engaged: false, Observed: 31, ReportedAt: ts, Policy: p,
				Decisions: map[string]int{"blend": 0, "exploration": 8, "fallback": 23},
				Targets: []fakeTelemetryTarget{
					{Target: "gpu-a1/" + llama, Provider: "gpu-a1", UpstreamModel: llama, Score: 0.64, LatencyScore: 0.7, CostScore: 1, LoadScore: 0.4,
						LatencyMS: ptr(455.0), InFlight: 3, Samples: 23, LastSampleAgeMS: 2100},
					{Target: "hosted-api/gpt-4o-mini", Provider: "hosted-api", UpstreamModel: "gpt-4o-mini", Score: 0.5, LatencyScore: 0, CostScore: 0.62, LoadScore: 1,
						CostPerMtok: 0.6, InFlight: 0, Samples: 8, LastSampleAgeMS: 5400},
				}},
		}},
		{Model: "support-bot", Engaged: true, Nodes: []fakeTelemetryNode{
			{NodeID: "router-1", Engaged: true, Observed: 522, ReportedAt: ts, Policy: p,
				Decisions: map[string]int{"blend": 470, "exploration": 25, "fallback": 27},
				Targets: []fakeTelemetryTarget{
					{Target: "gpu-a2/" + llama, Provider: "gpu-a2", UpstreamModel: llama, Score: 0.43, LatencyScore: 0.4, CostScore: 1, LoadScore: 0.2,
						LatencyMS: ptr(980.0), InFlight: 11, Samples: 300, LastSampleAgeMS: 120},
					{Target: "hosted-api/gpt-4o-mini", Provider: "hosted-api", UpstreamModel: "gpt-4o-mini", Score: 0.66, LatencyScore: 0.7, CostScore: 0.62, LoadScore: 0.85,
						LatencyMS: ptr(640.0), CostPerMtok: 0.6, InFlight: 1, Samples: 222, LastSampleAgeMS: 400},
				}},
		}},
	}
}
