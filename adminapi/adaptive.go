package adminapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/rolter/rolter/adaptive"
	"github.com/rolter/rolter/cluster"
	gossip "github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/config"
)

// policyView is the GET /api/v1/adaptive-routing-policy body (compat.md).
type policyView struct {
	Enabled          bool       `json:"enabled"`
	LatencyWeight    float64    `json:"latency_weight"`
	CostWeight       float64    `json:"cost_weight"`
	LoadWeight       float64    `json:"load_weight"`
	ExplorationRatio float64    `json:"exploration_ratio"`
	MinSamples       int        `json:"min_samples"`
	UpdatedAt        *time.Time `json:"updated_at"`
	AffectedRoutes   []string   `json:"affected_routes"`
}

func viewOf(st *cluster.State) policyView {
	p := st.Policy
	v := policyView{Enabled: p.Enabled, LatencyWeight: p.LatencyWeight, CostWeight: p.CostWeight, LoadWeight: p.LoadWeight,
		ExplorationRatio: p.ExplorationRatio, MinSamples: p.MinSamples, AffectedRoutes: st.AffectedRoutes()}
	if !p.UpdatedAt.IsZero() {
		t := p.UpdatedAt.UTC()
		v.UpdatedAt = &t
	}
	return v
}

func (a *API) getPolicy(w http.ResponseWriter, _ *http.Request, _ principal) {
	writeJSON(w, http.StatusOK, viewOf(a.d.Store.State()))
}

// parsePolicy reads the PUT body: all six fields required, numbers parsed
// without JSON's range errors so a non-finite value reaches the rule that
// names it.
func parsePolicy(body []byte) (adaptive.Policy, error) {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return adaptive.Policy{}, fmt.Errorf("invalid JSON body: %v", err)
	}
	var p adaptive.Policy
	fields := []string{"enabled", "latency_weight", "cost_weight", "load_weight", "exploration_ratio", "min_samples"}
	for _, f := range fields {
		if _, ok := raw[f]; !ok {
			return p, fmt.Errorf("%s is required", f)
		}
	}
	for k := range raw {
		known := false
		for _, f := range fields {
			known = known || k == f
		}
		if !known && k != "updated_at" && k != "affected_routes" {
			return p, fmt.Errorf("unknown field %q", k)
		}
	}
	if err := json.Unmarshal(raw["enabled"], &p.Enabled); err != nil {
		return p, fmt.Errorf("enabled must be true or false")
	}
	num := func(f string) (float64, error) {
		var n json.Number
		if err := json.Unmarshal(raw[f], &n); err != nil {
			return 0, fmt.Errorf("%s must be a number", f)
		}
		v, err := strconv.ParseFloat(n.String(), 64)
		if err != nil && !math.IsInf(v, 0) {
			return 0, fmt.Errorf("%s must be a number", f)
		}
		return v, nil
	}
	var err error
	if p.LatencyWeight, err = num("latency_weight"); err != nil {
		return p, err
	}
	if p.CostWeight, err = num("cost_weight"); err != nil {
		return p, err
	}
	if p.LoadWeight, err = num("load_weight"); err != nil {
		return p, err
	}
	if p.ExplorationRatio, err = num("exploration_ratio"); err != nil {
		return p, err
	}
	ms, err := num("min_samples")
	if err != nil {
		return p, err
	}
	if ms != math.Trunc(ms) || math.IsInf(ms, 0) {
		return p, fmt.Errorf("min_samples must be an integer")
	}
	if ms < math.MinInt32 || ms > math.MaxInt32 {
		return p, fmt.Errorf("min_samples must be in [0, 1000000]")
	}
	p.MinSamples = int(ms)
	return p, config.ValidatePolicy(p)
}

func (a *API) putPolicy(w http.ResponseWriter, r *http.Request, pr principal) {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, maxBody)); err != nil {
		badRequest(w, "cannot read body: "+err.Error())
		return
	}
	p, err := parsePolicy(buf.Bytes())
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	_, err = a.d.Store.SetPolicy(r.Context(), a.author(r, pr), p)
	if a.written(w, "adaptive routing policy", err) {
		writeJSON(w, http.StatusOK, viewOf(a.d.Store.State()))
	}
}

// ---- audit and cluster

func (a *API) getAudit(w http.ResponseWriter, r *http.Request, _ principal) {
	limit := 100
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > cluster.AuditCapacity {
			badRequest(w, fmt.Sprintf("limit must be an integer in [1, %d]", cluster.AuditCapacity))
			return
		}
		limit = n
	}
	entries := a.d.Store.State().Audit
	out := make([]cluster.AuditEntry, 0, min(limit, len(entries)))
	for i := len(entries) - 1; i >= 0 && len(out) < limit; i-- {
		out = append(out, entries[i])
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": out})
}

type routerView struct {
	NodeID        string  `json:"node_id"`
	RaftAddr      string  `json:"raft_addr,omitempty"`
	AdminAddr     string  `json:"admin_addr,omitempty"`
	Build         string  `json:"build,omitempty"`
	RaftRole      string  `json:"raft_role"`
	Voter         bool    `json:"voter"`
	Alive         *bool   `json:"alive,omitempty"`
	ConfigVersion *uint64 `json:"config_version"`
	// Admission is the router's admission queue and engine saturation as
	// it last reported them (omitted: not reported or [admission] off);
	// AdmissionAt is when.
	Admission   *AdmissionReport `json:"admission,omitempty"`
	AdmissionAt *time.Time       `json:"admission_reported_at,omitempty"`
}

func (a *API) getCluster(w http.ResponseWriter, _ *http.Request, _ principal) {
	in := a.d.Cluster.Info()
	byID := map[string]*routerView{}
	for _, s := range in.Servers {
		role := "follower"
		if s.Leader {
			role = "leader"
		} else if !s.Voter {
			role = "nonvoter"
		}
		byID[s.ID] = &routerView{NodeID: s.ID, RaftAddr: s.Addr, RaftRole: role, Voter: s.Voter}
	}
	self, ok := byID[in.NodeID]
	if !ok {
		self = &routerView{NodeID: in.NodeID, RaftAddr: in.RaftAddr}
		byID[in.NodeID] = self
	}
	self.RaftRole = in.Role
	v := in.ConfigVersion
	self.ConfigVersion = &v
	if a.d.Inventory != nil {
		for _, ri := range a.d.Inventory.Routers() {
			rv, ok := byID[ri.NodeID]
			if !ok {
				rv = &routerView{NodeID: ri.NodeID, RaftRole: "none"}
				byID[ri.NodeID] = rv
			}
			alive := ri.Alive
			rv.Alive, rv.AdminAddr, rv.Build = &alive, ri.AdminAddr, ri.Build
			if ri.NodeID != in.NodeID && ri.ConfigVersion > 0 { // 0: not known here
				cv := ri.ConfigVersion
				rv.ConfigVersion = &cv
			}
		}
	}
	// What each router says about itself over the telemetry channel
	// fills what Raft and gossip do not know, so every row has an admin
	// address, a build and an applied config version, gossip or not.
	for id, m := range a.d.Telemetry.Nodes() {
		rv, ok := byID[id]
		if !ok {
			continue
		}
		if rv.AdminAddr == "" {
			rv.AdminAddr = m.AdminAddr
		}
		if rv.Build == "" {
			rv.Build = m.Build
		}
		if rv.ConfigVersion == nil && m.ConfigVersion > 0 {
			cv := m.ConfigVersion
			rv.ConfigVersion = &cv
		}
		if m.Admission != nil {
			at := m.ReportedAt.UTC()
			rv.Admission, rv.AdmissionAt = m.Admission, &at
		}
	}
	routers := make([]routerView, 0, len(byID))
	for _, rv := range byID {
		routers = append(routers, *rv)
	}
	sort.Slice(routers, func(i, j int) bool { return routers[i].NodeID < routers[j].NodeID })
	engines := []gossip.EngineSnapshot{}
	if a.d.Engines != nil {
		engines = append(engines, a.d.Engines.Engines()...)
	}
	parked := []ParkedTarget{}
	if a.d.Parked != nil {
		parked = append(parked, a.d.Parked.ParkedTargets()...)
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"leader": in.Leader, "node_id": in.NodeID, "config_version": in.ConfigVersion, "routers": routers,
		"engines": engines, "parked_targets": parked,
	})
}

func (a *API) getRouteStats(w http.ResponseWriter, _ *http.Request, _ principal) {
	writeJSON(w, http.StatusOK, a.d.Telemetry.RouteStats())
}

// whoami tells the caller its token's name and role, so the dashboard can
// say what it may change before the server refuses.
func (a *API) whoami(w http.ResponseWriter, _ *http.Request, p principal) {
	writeJSON(w, http.StatusOK, map[string]string{"name": p.name, "role": p.role.String()})
}

func sortBy[T any](s []T, key func(T) string) {
	sort.Slice(s, func(i, j int) bool { return key(s[i]) < key(s[j]) })
}
