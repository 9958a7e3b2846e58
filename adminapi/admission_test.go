package adminapi

import (
	"net/http"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
)

// PUT /api/v1/admission is superadmin-only, validated, replicated to every
// router and audited.
func TestAdmissionEndpoint(t *testing.T) {
	m := newMesh(t)
	api := m.apis[m.follower()]
	admin := createToken(t, api, "ops-admin", "admin")
	body := `{"enabled":true,"max_engine_load":24,"standard":{"max_queue":64,"ttl":"12s"},"sheddable":{"fill":0.4}}`
	if r := call(t, api, http.MethodPut, "/api/v1/admission", admin, body); r.code != http.StatusForbidden {
		t.Fatalf("admin PUT: %d %s, want 403", r.code, r.raw)
	}
	if r := call(t, api, http.MethodPut, "/api/v1/admission", superToken, `{"max_kv_usage":1.5}`); r.code != http.StatusBadRequest {
		t.Fatalf("max_kv_usage 1.5: %d %s, want 400", r.code, r.raw)
	}
	if r := call(t, api, http.MethodPut, "/api/v1/admission", superToken, `{"critical":{"fill":1.5}}`); r.code != http.StatusBadRequest {
		t.Fatalf("critical fill 1.5: %d %s, want 400", r.code, r.raw)
	}
	r := call(t, api, http.MethodPut, "/api/v1/admission", superToken, body)
	if r.code != http.StatusOK || r.body["enabled"] != true || r.body["managed_by"] != "api" {
		t.Fatalf("superadmin PUT: %d %s", r.code, r.raw)
	}
	for i := range 3 {
		testwait.For(t, 5*time.Second, "the section on every router", func() bool {
			a := m.c.Node(i).State().Admission
			return a.Enabled && a.MaxEngineLoad == 24 && a.Standard.MaxQueue == 64 && a.Standard.TTL.Duration == 12*time.Second &&
				a.Sheddable.Fill == 0.4 && a.Standard.Fill == 0.75 && // left out: the default
				a.Critical.MaxQueue == 256
		})
	}
	audit := call(t, api, http.MethodGet, "/api/v1/audit?limit=1", superToken, "")
	e := audit.body["data"].([]any)[0].(map[string]any)
	if e["action"] != "admission.update" || e["outcome"] != "ok" {
		t.Fatalf("audit %v", e)
	}
	if g := call(t, api, http.MethodGet, "/api/v1/admission", superToken, ""); g.body["max_engine_load"] != float64(24) {
		t.Fatalf("GET %s", g.raw)
	}
}

func TestKeyPriorityEndpoint(t *testing.T) {
	m := newMesh(t)
	api := m.apis[m.follower()]
	r := call(t, api, http.MethodPost, "/api/v1/keys", superToken, `{"name":"batch","max_priority":"sheddable"}`)
	if r.code != http.StatusCreated || r.body["max_priority"] != "sheddable" {
		t.Fatalf("create: %d %s", r.code, r.raw)
	}
	if r := call(t, api, http.MethodPut, "/api/v1/keys/batch/priority", superToken, `{"max_priority":"urgent"}`); r.code != http.StatusBadRequest {
		t.Fatalf("unknown band: %d %s", r.code, r.raw)
	}
	r = call(t, api, http.MethodPut, "/api/v1/keys/batch/priority", superToken, `{"max_priority":"critical","fairness_header":true}`)
	if r.code != http.StatusOK || r.body["max_priority"] != "critical" || r.body["fairness_header"] != true {
		t.Fatalf("set: %d %s", r.code, r.raw)
	}
	if r := call(t, api, http.MethodPut, "/api/v1/keys/nobody/priority", superToken, `{"max_priority":"critical"}`); r.code != http.StatusNotFound {
		t.Fatalf("unknown key: %d %s", r.code, r.raw)
	}
}

// A router's reported admission state shows on its row of GET
// /api/v1/cluster.
func TestClusterViewShowsEachRoutersQueue(t *testing.T) {
	m := newMesh(t)
	api := m.apis[0]
	node := m.c.Node(1).NodeID()
	body := `{"routes":[],"admin_addr":"127.0.0.1:9","admission":{"queues":{"chat":{"critical":1,"standard":2,"sheddable":7}},` +
		`"engine_saturation":{"e1/m":1.25}}}`
	if r := call(t, api, http.MethodPost, "/internal/adaptive-telemetry", internalToken, body, NodeIDHeader, node); r.code != http.StatusNoContent {
		t.Fatalf("report: %d %s", r.code, r.raw)
	}
	r := call(t, api, http.MethodGet, "/api/v1/cluster", superToken, "")
	for _, v := range r.body["routers"].([]any) {
		rv := v.(map[string]any)
		if rv["node_id"] != node {
			if rv["admission"] != nil {
				t.Errorf("router %v shows an admission state it never reported", rv["node_id"])
			}
			continue
		}
		adm, _ := rv["admission"].(map[string]any)
		q, _ := adm["queues"].(map[string]any)["chat"].(map[string]any)
		if q["sheddable"] != 7.0 || q["critical"] != 1.0 || adm["engine_saturation"].(map[string]any)["e1/m"] != 1.25 {
			t.Fatalf("router %s: %v", node, rv)
		}
		return
	}
	t.Fatalf("no row for %s in %s", node, r.raw)
}
