package router

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

const adaptiveTOML = `
[[routes]]
model = "adapt"
strategy = "adaptive"
targets = [{ provider = "a", model = "m" }, { provider = "b", model = "m" }]

[[routes]]
model = "plain"
strategy = "round_robin"
targets = [{ provider = "a", model = "m" }]

[[provider_groups]]
name = "Fleet"
slug = "fleet"
strategy = "adaptive"
members = [{ provider = "a" }, { provider = "b" }]

[adaptive_routing]
enabled = true
min_samples = 2
exploration_ratio = 0
`

// TestAdaptiveTelemetryAndMetrics: every adaptive pool (route and group),
// and only those, reports telemetry and the rolter_adaptive_routing_*
// series, which follow the traffic.
func TestAdaptiveTelemetryAndMetrics(t *testing.T) {
	a, b := newEngine(t, okChat), newEngine(t, okChat)
	h := newHarness(t, providers("a", a.URL, "b", b.URL)+adaptiveTOML, nil)

	got := h.srv.AdaptiveTelemetry()
	if len(got) != 2 || got[0].Model != "adapt" || got[1].Model != "fleet/*" || len(got[0].Targets) != 2 {
		t.Fatalf("adaptive pools: %+v", got)
	}
	if got[0].Engaged || got[0].Observed != 0 {
		t.Fatalf("engaged before any traffic: %+v", got[0])
	}
	for range 10 {
		if code, _, body := h.chat("adapt"); code != http.StatusOK {
			t.Fatalf("chat: %d %s", code, body)
		}
	}
	got = h.srv.AdaptiveTelemetry()
	d := got[0].Decisions
	if !got[0].Engaged || got[0].Observed != 10 || d.Blend+d.Exploration+d.Fallback != 10 || d.Blend == 0 {
		t.Fatalf("after 10 requests: %+v", got[0])
	}

	mfs, err := h.srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]float64{} // name{labels} → value
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "rolter_adaptive_routing_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			series[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	// 2 pools × (1 engaged + 3 modes + 2 targets).
	if len(series) != 12 {
		t.Fatalf("%d adaptive series, want 12: %v", len(series), series)
	}
	for k, want := range map[string]float64{
		"rolter_adaptive_routing_engaged{model=adapt}":                       1,
		"rolter_adaptive_routing_engaged{model=fleet/*}":                     0,
		"rolter_adaptive_routing_decisions_total{mode=blend,model=adapt}":    float64(d.Blend),
		"rolter_adaptive_routing_decisions_total{mode=fallback,model=adapt}": float64(d.Fallback),
	} {
		if v, ok := series[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
	if v := series["rolter_adaptive_routing_target_score{model=adapt,target=a/m}"]; v <= 0 || v > 1 {
		t.Errorf("target score of a/m %v, want in (0, 1]", v)
	}
}

// TestAdminHooks: Options.Ready gates /readyz and Options.AdminExtra
// serves the admin paths the router does not own.
func TestAdminHooks(t *testing.T) {
	a := newEngine(t, okChat)
	var notReady error = errors.New("no raft leader")
	h := newHarnessWith(t, providers("a", a.URL), nil, func(o *Options) {
		o.Ready = func() error { return notReady }
		o.AdminExtra = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "extra "+r.URL.Path)
		})
	})
	admin := httptest.NewServer(h.srv.AdminHandler())
	defer admin.Close()
	get := func(path string) (int, string) {
		resp, err := admin.Client().Get(admin.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		name, path string
		ready      error
		code       int
		body       string
	}{
		{"readyz waits for the hook", "/readyz", notReady, http.StatusServiceUnavailable, "no raft leader"},
		{"readyz once the hook agrees", "/readyz", nil, http.StatusOK, "ready"},
		{"readyz serves on, degraded", "/readyz", fmt.Errorf("%w: no raft leader", ErrDegraded), http.StatusOK, "ready, degraded: no raft leader"},
		{"extra paths reach AdminExtra", "/api/v1/routes", nil, http.StatusOK, "extra /api/v1/routes"},
		{"healthz stays the router's", "/healthz", notReady, http.StatusOK, "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			notReady = tc.ready
			code, body := get(tc.path)
			if code != tc.code || !strings.Contains(body, tc.body) {
				t.Fatalf("%s: %d %q, want %d %q", tc.path, code, body, tc.code, tc.body)
			}
		})
	}
}
