package adminapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rolter/rolter/adaptive"
	"github.com/rolter/rolter/routestats"
)

// statsSource is a TelemetrySource with route stats from a real ring.
type statsSource struct{ ring *routestats.Ring }

func (s statsSource) AdaptiveTelemetry() []adaptive.RouteTelemetry { return nil }
func (s statsSource) RouteStats() []routestats.Route               { return s.ring.Report() }
func (s statsSource) ConfigVersion() uint64                        { return 41 }

// Two routers' pushes add up in GET /api/v1/route-stats on either of
// them, and each router's build and admin address reach GET
// /api/v1/cluster through the same channel.
func TestRouteStatsAcrossRouters(t *testing.T) {
	m := newMesh(t)
	var srvs []*httptest.Server
	for _, api := range m.apis[:2] {
		s := httptest.NewServer(api)
		t.Cleanup(s.Close)
		srvs = append(srvs, s)
	}
	peers := urls{srvs[0].URL, srvs[1].URL}
	rings := []*routestats.Ring{routestats.NewRing(m.clock.Now), routestats.NewRing(m.clock.Now)}
	for range 6 {
		rings[0].Record("plain", "vllm-a", "vllm-a/plain", routestats.Attempt{OK: true, Latency: 40 * time.Millisecond})
	}
	for range 4 {
		rings[1].Record("plain", "vllm-b", "vllm-b/plain", routestats.Attempt{OK: true, Latency: 40 * time.Millisecond})
	}
	rings[1].Record("plain", "vllm-a", "vllm-a/plain", routestats.Attempt{Retry: true, OK: false})
	ids := []string{m.c.Node(0).Info().NodeID, m.c.Node(1).Info().NodeID}
	for i := range 2 {
		p := &Pusher{NodeID: ids[i], InternalToken: internalToken, Source: statsSource{rings[i]}, Peers: peers,
			Build: "v1.2.3", AdminAddr: []string{"10.0.0.1:4000", "10.0.0.2:4000"}[i]}
		p.PushOnce(context.Background())
	}
	for i, api := range m.apis[:2] {
		r := call(t, api, http.MethodGet, "/api/v1/route-stats", superToken, "")
		var v routestats.View
		if err := json.Unmarshal([]byte(r.raw), &v); err != nil || r.code != 200 {
			t.Fatalf("router %d: %d %s", i, r.code, r.raw)
		}
		if len(v.Routes) != 1 || len(v.Routes[0].Nodes) != 2 {
			t.Fatalf("router %d: %s", i, r.raw)
		}
		w := v.Routes[0].Windows["5m"]
		if w.Requests != 10 || w.Retries != 1 || w.Errors != 1 || len(w.Targets) != 2 || w.Targets[0].Attempts != 7 {
			t.Errorf("router %d: requests %d retries %d errors %d targets %+v", i, w.Requests, w.Retries, w.Errors, w.Targets)
		}
		c := call(t, api, http.MethodGet, "/api/v1/cluster", superToken, "")
		for _, rv := range c.body["routers"].([]any) {
			row := rv.(map[string]any)
			switch row["node_id"] {
			case ids[0], ids[1]:
				if row["build"] != "v1.2.3" || row["admin_addr"] == nil {
					t.Errorf("router %d's cluster row %v lacks the reported build or admin address", i, row)
				}
				if row["node_id"] != ids[i] && row["config_version"] != 41.0 {
					t.Errorf("router %d's row for another router %v lacks the config version it reported", i, row)
				}
			}
		}
	}
	// Reports older than the fresh window no longer count.
	m.clock.Add(FreshWindow + time.Second)
	r := call(t, m.apis[0], http.MethodGet, "/api/v1/route-stats", superToken, "")
	if routes, _ := r.body["routes"].([]any); len(routes) != 0 {
		t.Errorf("stale reports still served: %s", r.raw)
	}
}

func TestWhoami(t *testing.T) {
	m := newMesh(t)
	api := m.apis[0]
	viewer := createToken(t, api, "ops-viewer", "viewer")
	for _, tc := range []struct{ token, name, role string }{{viewer, "ops-viewer", "viewer"}, {superToken, "", "superadmin"}} {
		r := call(t, api, http.MethodGet, "/api/v1/whoami", tc.token, "")
		if r.code != 200 || r.body["role"] != tc.role || (tc.name != "" && r.body["name"] != tc.name) {
			t.Errorf("whoami as %s: %d %s", tc.role, r.code, r.raw)
		}
	}
	if r := call(t, api, http.MethodGet, "/api/v1/whoami", "nope", ""); r.code != http.StatusUnauthorized {
		t.Errorf("whoami with a bad token: %d", r.code)
	}
}
