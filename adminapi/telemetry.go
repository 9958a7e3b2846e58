package adminapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/rolter/rolter/adaptive"
	"github.com/rolter/rolter/routestats"
)

// Telemetry limits and windows (compat.md).
const (
	FreshWindow       = 60 * time.Second
	PruneAfter        = time.Hour
	PushInterval      = 15 * time.Second
	MaxReportRoutes   = 500
	MaxReportTargets  = 256
	maxTelemetryBytes = 4 << 20
)

// Report is the body of POST /internal/adaptive-telemetry: the current
// state of every adaptive route on the reporting router (empty: it has
// none any more), its route stats (GET /api/v1/route-stats) and who it
// is (GET /api/v1/cluster shows the build and admin address).
type Report struct {
	Routes []adaptive.RouteTelemetry `json:"routes"`
	// Stats is the router's routestats ring (omitted: no traffic).
	Stats []routestats.Route `json:"route_stats,omitempty"`
	// Build and AdminAddr describe the reporting router; ConfigVersion is
	// the config_version its data plane runs (0: not known).
	Build         string `json:"build,omitempty"`
	AdminAddr     string `json:"admin_addr,omitempty"`
	ConfigVersion uint64 `json:"config_version,omitempty"`
	// Admission is the router's admission state (omitted: [admission] off).
	Admission *AdmissionReport `json:"admission,omitempty"`
}

// AdmissionReport is one router's admission state as GET /api/v1/cluster
// shows it per router: its queue depth per pool and band, and each
// engine's saturation as it sees it (1: saturated; docs/admission.md).
type AdmissionReport struct {
	Queues     map[string]BandDepths `json:"queues"`
	Saturation map[string]float64    `json:"engine_saturation"`
}

// BandDepths is one pool's queue on one router.
type BandDepths struct {
	Critical  int `json:"critical"`
	Standard  int `json:"standard"`
	Sheddable int `json:"sheddable"`
}

// AdmissionSource is an optional capability of a TelemetrySource: the
// router's admission state for its reports.
type AdmissionSource interface {
	AdmissionState() *AdmissionReport
}

// Telemetry is the in-memory table of the newest report per (node,
// route), plus each node's newest route stats and self-description. Safe
// for concurrent use.
type Telemetry struct {
	now func() time.Time
	mu  sync.Mutex
	// rows[node][model]
	rows map[string]map[string]row
	// nodes[node]: the rest of the node's newest report.
	nodes map[string]nodeReport
}

type nodeReport struct {
	stats            []routestats.Route
	build, adminAddr string
	configVersion    uint64
	admission        *AdmissionReport
	reportedAt       time.Time
}

type row struct {
	sample     adaptive.RouteTelemetry
	reportedAt time.Time
}

// NewTelemetry returns an empty table reading time from now.
func NewTelemetry(now func() time.Time) *Telemetry {
	if now == nil {
		now = time.Now
	}
	return &Telemetry{now: now, rows: map[string]map[string]row{}, nodes: map[string]nodeReport{}}
}

// Put replaces node's rows with rep (an empty report clears them),
// applying the route and target caps.
func (t *Telemetry) Put(node string, rep Report) {
	now := t.now()
	routes := rep.Routes
	if len(routes) > MaxReportRoutes {
		routes = routes[:MaxReportRoutes]
	}
	m := make(map[string]row, len(routes))
	for _, r := range routes {
		if len(r.Targets) > MaxReportTargets {
			r.Targets = r.Targets[:MaxReportTargets]
		}
		m[r.Model] = row{sample: r, reportedAt: now}
	}
	stats := rep.Stats
	if len(stats) > MaxReportRoutes {
		stats = stats[:MaxReportRoutes]
	}
	for i := range stats {
		if len(stats[i].Targets) > MaxReportTargets {
			stats[i].Targets = stats[i].Targets[:MaxReportTargets]
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(m) == 0 {
		delete(t.rows, node)
	} else {
		t.rows[node] = m
	}
	if len(stats) > 0 || rep.Build != "" || rep.AdminAddr != "" {
		t.nodes[node] = nodeReport{stats: stats, build: rep.Build, adminAddr: rep.AdminAddr, configVersion: rep.ConfigVersion,
			admission: capAdmission(rep.Admission), reportedAt: now}
	} else {
		delete(t.nodes, node)
	}
	t.pruneLocked(now)
}

// RouteStats folds the route stats every router reported in the last
// FreshWindow into the mesh's view.
func (t *Telemetry) RouteStats() routestats.View {
	now := t.now()
	reports := map[string][]routestats.Route{}
	t.mu.Lock()
	for node, r := range t.nodes {
		if now.Sub(r.reportedAt) <= FreshWindow && len(r.stats) > 0 {
			reports[node] = r.stats
		}
	}
	t.mu.Unlock()
	return routestats.Summarize(now, reports)
}

// NodeMeta is what a router said about itself in its newest fresh report.
type NodeMeta struct {
	Build, AdminAddr string
	ConfigVersion    uint64 // 0: not reported
	// Admission is the node's reported admission state (nil: off).
	Admission *AdmissionReport
	// ReportedAt is when its newest report arrived.
	ReportedAt time.Time
}

// capAdmission bounds a reported admission state like the route caps.
func capAdmission(a *AdmissionReport) *AdmissionReport {
	if a == nil || (len(a.Queues) <= MaxReportRoutes && len(a.Saturation) <= MaxReportTargets) {
		return a
	}
	return nil // a report past the caps is dropped, not trimmed at random
}

// Nodes returns the self-description of every router that reported
// within FreshWindow.
func (t *Telemetry) Nodes() map[string]NodeMeta {
	now := t.now()
	out := map[string]NodeMeta{}
	t.mu.Lock()
	defer t.mu.Unlock()
	for node, r := range t.nodes {
		if now.Sub(r.reportedAt) <= FreshWindow {
			out[node] = NodeMeta{Build: r.build, AdminAddr: r.adminAddr, ConfigVersion: r.configVersion, Admission: r.admission,
				ReportedAt: r.reportedAt}
		}
	}
	return out
}

func (t *Telemetry) pruneLocked(now time.Time) {
	for node, m := range t.rows {
		for model, r := range m {
			if now.Sub(r.reportedAt) > PruneAfter {
				delete(m, model)
			}
		}
		if len(m) == 0 {
			delete(t.rows, node)
		}
	}
	for node, r := range t.nodes {
		if now.Sub(r.reportedAt) > PruneAfter {
			delete(t.nodes, node)
		}
	}
}

// nodeView and routeView shape GET /api/v1/adaptive-routing-telemetry.
type nodeView struct {
	NodeID     string                     `json:"node_id"`
	Engaged    bool                       `json:"engaged"`
	Observed   uint64                     `json:"observed"`
	Decisions  adaptive.Decisions         `json:"decisions"`
	Policy     adaptive.Policy            `json:"policy"`
	ReportedAt time.Time                  `json:"reported_at"`
	Targets    []adaptive.TargetTelemetry `json:"targets"`
}

type routeView struct {
	Model   string     `json:"model"`
	Engaged bool       `json:"engaged"`
	Nodes   []nodeView `json:"nodes"`
}

type telemetryView struct {
	GeneratedAt     time.Time   `json:"generated_at"`
	FreshWindowSecs int         `json:"fresh_window_secs"`
	Routes          []routeView `json:"routes"`
}

// View returns the fresh rows grouped by route (sorted by model, then
// node id); rows older than FreshWindow are left out.
func (t *Telemetry) View() telemetryView {
	now := t.now()
	byModel := map[string]*routeView{}
	t.mu.Lock()
	t.pruneLocked(now)
	for node, m := range t.rows {
		for model, r := range m {
			if now.Sub(r.reportedAt) > FreshWindow {
				continue
			}
			rv := byModel[model]
			if rv == nil {
				rv = &routeView{Model: model}
				byModel[model] = rv
			}
			targets := r.sample.Targets
			if targets == nil {
				targets = []adaptive.TargetTelemetry{}
			}
			rv.Engaged = rv.Engaged || r.sample.Engaged
			rv.Nodes = append(rv.Nodes, nodeView{NodeID: node, Engaged: r.sample.Engaged, Observed: r.sample.Observed,
				Decisions: r.sample.Decisions, Policy: r.sample.Policy, ReportedAt: r.reportedAt.UTC(), Targets: targets})
		}
	}
	t.mu.Unlock()
	out := telemetryView{GeneratedAt: now.UTC(), FreshWindowSecs: int(FreshWindow / time.Second), Routes: []routeView{}}
	for _, rv := range byModel {
		sort.Slice(rv.Nodes, func(i, j int) bool { return rv.Nodes[i].NodeID < rv.Nodes[j].NodeID })
		out.Routes = append(out.Routes, *rv)
	}
	sort.Slice(out.Routes, func(i, j int) bool { return out.Routes[i].Model < out.Routes[j].Model })
	return out
}

func (a *API) getTelemetry(w http.ResponseWriter, _ *http.Request, _ principal) {
	writeJSON(w, http.StatusOK, a.d.Telemetry.View())
}

// NodeIDHeader names the reporting router on node-to-node calls.
const NodeIDHeader = "x-rolter-node-id"

func (a *API) postTelemetry(w http.ResponseWriter, r *http.Request) {
	tok, ok := bearer(r)
	if !ok || a.d.InternalToken == "" || !tokenEqual(tok, a.d.InternalToken) {
		writeError(w, http.StatusUnauthorized, "invalid internal token", "authentication_error", "invalid_token")
		return
	}
	node := r.Header.Get(NodeIDHeader)
	if node == "" {
		badRequest(w, NodeIDHeader+" is required: set ROLTER_NODE_ID on the reporting router")
		return
	}
	var rep Report
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxTelemetryBytes))
	if err := dec.Decode(&rep); err != nil {
		badRequest(w, "invalid telemetry report: "+err.Error())
		return
	}
	a.d.Telemetry.Put(node, rep)
	w.WriteHeader(http.StatusNoContent)
}

// TelemetrySource yields this router's current adaptive sample: one entry
// per route balanced adaptively (none: no adaptive route). Called from
// the push loop, never on the request path.
type TelemetrySource interface {
	AdaptiveTelemetry() []adaptive.RouteTelemetry
}

// StatsSource is a TelemetrySource that also reports route stats (checked
// by type assertion; router.Server's RouteStats has this shape).
type StatsSource interface {
	RouteStats() []routestats.Route
}

// VersionSource is a TelemetrySource that also reports the config_version
// its data plane runs (checked by type assertion, like router.Server's
// ConfigVersion).
type VersionSource interface {
	ConfigVersion() uint64
}

// Endpoints lists the admin base URLs ("http://host:port") of the routers
// to report to (from the gossip inventory).
type Endpoints interface {
	TelemetryEndpoints() []string
}

// Pusher reports this router's adaptive telemetry and route stats every
// PushInterval to its own table and to every other router.
type Pusher struct {
	NodeID        string
	InternalToken string
	Source        TelemetrySource
	// Build and AdminAddr describe this router in every report; a Pusher
	// with either set reports even when it has nothing else to say.
	Build, AdminAddr string
	// Local is this router's table (written directly); Peers the other
	// routers (may be nil).
	Local  *Telemetry
	Peers  Endpoints
	Client *http.Client
	Logger *slog.Logger

	hadContent bool
}

// Run pushes until ctx ends.
func (p *Pusher) Run(ctx context.Context) {
	t := time.NewTicker(PushInterval)
	defer t.Stop()
	for {
		p.PushOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// PushOnce takes one sample and reports it. A router with nothing to say
// (no adaptive route, no route stats, no Build or AdminAddr) sends
// nothing, except one empty report right after its last adaptive route or
// stats went away (clearing its rows everywhere).
func (p *Pusher) PushOnce(ctx context.Context) {
	log := p.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rep := Report{Routes: p.Source.AdaptiveTelemetry(), Build: p.Build, AdminAddr: p.AdminAddr}
	if ss, ok := p.Source.(StatsSource); ok {
		rep.Stats = ss.RouteStats()
	}
	if vs, ok := p.Source.(VersionSource); ok {
		rep.ConfigVersion = vs.ConfigVersion()
	}
	if as, ok := p.Source.(AdmissionSource); ok {
		rep.Admission = as.AdmissionState()
	}
	has := len(rep.Routes) > 0 || len(rep.Stats) > 0 || rep.Build != "" || rep.AdminAddr != ""
	if !has && !p.hadContent {
		return
	}
	p.hadContent = has
	if p.Local != nil && p.NodeID != "" {
		p.Local.Put(p.NodeID, rep)
	}
	if p.Peers == nil {
		return
	}
	body, err := json.Marshal(rep)
	if err != nil {
		log.Error("adaptive-routing telemetry report failed", "err", err)
		return
	}
	client := p.Client
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second}
	}
	for _, base := range p.Peers.TelemetryEndpoints() {
		if err := p.post(ctx, client, base, body); err != nil {
			log.Warn("adaptive-routing telemetry report failed", "endpoint", base, "err", err)
		}
	}
}

func (p *Pusher) post(ctx context.Context, c *http.Client, base string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/internal/adaptive-telemetry", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+p.InternalToken)
	req.Header.Set(NodeIDHeader, p.NodeID)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}
