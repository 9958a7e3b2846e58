package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// exportedMetrics are the rolter metrics compat.md fixes, with their
// labels; histograms also expose _bucket (with le), _sum and _count.
var exportedMetrics = map[string][]string{
	"rolter_requests_total":                   {"model", "code"},
	"rolter_retries_total":                    {"model"},
	"rolter_request_latency_ms":               {"model"},
	"rolter_request_ttft_ms":                  {"model"},
	"rolter_target_requests_total":            {"provider", "target", "outcome"},
	"rolter_config_version":                   {},
	"rolter_kv_events_total":                  {"type"},
	"rolter_kv_events_malformed_total":        {},
	"rolter_cache_telemetry_age_seconds":      {"provider", "source"},
	"rolter_adaptive_routing_target_score":    {"model", "target"},
	"rolter_adaptive_routing_decisions_total": {"model", "mode"},
	"rolter_adaptive_routing_engaged":         {"model"},
	// rolter.toml as code (cluster.FileSyncer), beyond compat.md.
	"rolter_config_file_sync_total":  {"result"},
	"rolter_config_file_out_of_sync": {},
	"rolter_router_stage_seconds":    {"stage"},
	"rolter_router_pick_seconds":     {"strategy"},
	// Admission (router/admission.go, docs/admission.md).
	"rolter_queue_depth":        {"model", "band"},
	"rolter_queue_wait_seconds": {"model", "band"},
	"rolter_admission_total":    {"model", "band", "outcome"},
	"rolter_pool_saturation":    {"model"},
	"rolter_pool_saturated":     {"model"},
	"rolter_engine_saturation":  {"target"},
}

var histograms = map[string]bool{"rolter_request_latency_ms": true, "rolter_request_ttft_ms": true,
	"rolter_router_stage_seconds": true, "rolter_router_pick_seconds": true, "rolter_queue_wait_seconds": true}

// targetLabels are added by Prometheus (and the Operator) to every series.
var targetLabels = []string{"job", "instance", "namespace", "pod", "container", "service", "endpoint"}

// metricLabels resolves a series name to its metric's labels.
func metricLabels(series string) ([]string, bool) {
	if l, ok := exportedMetrics[series]; ok {
		return l, true
	}
	for h := range histograms {
		switch series {
		case h + "_bucket":
			return append(slices.Clone(exportedMetrics[h]), "le"), true
		case h + "_sum", h + "_count":
			return exportedMetrics[h], true
		}
	}
	return nil, false
}

type grafanaPanel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource map[string]any `json:"datasource"`
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"`
}

type grafanaDashboard struct {
	Title         string         `json:"title"`
	UID           string         `json:"uid"`
	SchemaVersion int            `json:"schemaVersion"`
	Panels        []grafanaPanel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

var (
	promSelector = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?\s*(\[)?`)
	promMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	promBy       = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	grafanaVar   = regexp.MustCompile(`\$\{?([a-zA-Z_][a-zA-Z0-9_]*)`)
	promWords    = []string{"sum", "max", "min", "avg", "count", "rate", "irate", "increase", "histogram_quantile", "by",
		"without", "or", "and", "unless", "vector", "scalar", "label_values", "count_values", "topk", "bottomk", "on", "ignoring",
		"group_left", "group_right", "clamp_min", "clamp_max", "abs", "time", "bool", "offset"}
)

// checkExpr returns the rolter metrics expr names and its problems: a name
// that looks like a series but is not a rolter metric, a label matcher or
// grouping label the metrics do not have, an undefined dashboard variable.
func checkExpr(expr string, vars map[string]bool) (names []string, problems []string) {
	stripped := regexp.MustCompile(`"[^"]*"`).ReplaceAllString(expr, `""`)
	stripped = regexp.MustCompile(`\[[^\]]*\]`).ReplaceAllString(stripped, "[]")
	labelsInExpr := slices.Clone(targetLabels)
	for _, m := range promSelector.FindAllStringSubmatch(stripped, -1) {
		name := m[1]
		if slices.Contains(promWords, name) {
			continue
		}
		labels, ok := metricLabels(name)
		if !ok {
			if strings.HasPrefix(name, "rolter_") || m[2] != "" || m[3] != "" {
				problems = append(problems, "names "+name+", which rolter does not export")
			}
			continue
		}
		names = append(names, name)
		labelsInExpr = append(labelsInExpr, labels...)
		for _, mm := range promMatcher.FindAllStringSubmatch(m[2], -1) {
			if !slices.Contains(labels, mm[1]) && !slices.Contains(targetLabels, mm[1]) {
				problems = append(problems, name+" has no label "+mm[1])
			}
		}
	}
	for _, m := range promBy.FindAllStringSubmatch(stripped, -1) {
		for l := range strings.SplitSeq(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !slices.Contains(labelsInExpr, l) {
				problems = append(problems, "groups by "+l+", a label none of its metrics has")
			}
		}
	}
	for _, m := range grafanaVar.FindAllStringSubmatch(expr, -1) {
		if !vars[m[1]] && !strings.HasPrefix(m[1], "__") {
			problems = append(problems, "uses $"+m[1]+", which the dashboard does not define")
		}
	}
	return names, problems
}

// TestGrafanaDashboard: the dashboard is valid JSON Grafana can lay out,
// and every query uses metrics and labels rolter really exports; every
// compat.md metric is on it.
func TestGrafanaDashboard(t *testing.T) {
	data, err := os.ReadFile("grafana/rolter-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("not valid JSON: %v", err)
	}
	if d.Title == "" || d.UID == "" || d.SchemaVersion == 0 {
		t.Errorf("title %q, uid %q, schemaVersion %d: all are required", d.Title, d.UID, d.SchemaVersion)
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	used := map[string]bool{}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		names, problems := checkExpr(v.Definition, vars)
		for _, p := range problems {
			t.Errorf("variable %s: %s", v.Name, p)
		}
		if len(names) == 0 {
			t.Errorf("variable %s: query %q names no rolter metric", v.Name, v.Definition)
		}
	}
	ids := map[int]bool{}
	var walk func(ps []grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel %q: duplicate id %d", p.Title, p.ID)
			}
			ids[p.ID] = true
			if g := p.GridPos; g.W < 1 || g.H < 1 || g.X < 0 || g.X+g.W > 24 {
				t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 || p.Datasource == nil {
				t.Errorf("panel %q: no query or no datasource", p.Title)
			}
			for _, tg := range p.Targets {
				names, problems := checkExpr(tg.Expr, vars)
				for _, pr := range problems {
					t.Errorf("panel %q query %s: %s", p.Title, tg.RefID, pr)
				}
				if len(names) == 0 {
					t.Errorf("panel %q query %s: %q names no rolter metric", p.Title, tg.RefID, tg.Expr)
				}
				for _, n := range names {
					used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")] = true
				}
			}
		}
	}
	walk(d.Panels)
	for m := range exportedMetrics {
		if !used[m] {
			t.Errorf("no panel shows %s", m)
		}
	}
}

// TestCheckExprCatchesMistakes keeps the dashboard check honest: each of
// these queries has one mistake a user would see as an empty panel.
func TestCheckExprCatchesMistakes(t *testing.T) {
	vars := map[string]bool{"model": true}
	for _, tc := range []struct{ name, expr string }{
		{"typo in metric", `sum(rate(rolter_request_total[5m]))`},
		{"other exporter's metric", `sum(vllm:num_requests_running{model_name="x"})`},
		{"unknown label", `sum(rate(rolter_retries_total{provider="a"}[5m]))`},
		{"grouping by a missing label", `sum by (mode) (rate(rolter_requests_total[5m]))`},
		{"undefined variable", `sum(rate(rolter_requests_total{model=~"$modle"}[5m]))`},
		{"bucket of a counter", `rolter_requests_total_bucket`},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			if _, problems := checkExpr(tc.expr, vars); len(problems) == 0 {
				t.Errorf("%q passed the check", tc.expr)
			}
		})
	}
	if _, problems := checkExpr(`histogram_quantile(0.99, sum by (model, le) (rate(rolter_request_ttft_ms_bucket{model=~"$model"}[$__rate_interval])))`, vars); len(problems) > 0 {
		t.Errorf("a correct query was rejected: %v", problems)
	}
}
