package adminapi

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/internal/testwait"
)

// meshFile is newMesh's seed as a rolter.toml at generation gen with
// vllm-a at apiBase.
func meshFile(gen, apiBase string) string {
	return "generation = " + gen + `
[[providers]]
name = "vllm-a"
api_base = "` + apiBase + `"

[[routes]]
model = "zeta"
strategy = "adaptive"
targets = [{ provider = "vllm-a" }]

[[routes]]
model = "alpha"
strategy = "adaptive"
targets = [{ provider = "vllm-a" }]

[[routes]]
model = "plain"
targets = [{ provider = "vllm-a" }]
`
}

func TestFileOwnedEntriesAreMarkedAndReadOnly(t *testing.T) {
	m := newMesh(t)
	api := m.apis[m.follower()]
	if r := call(t, api, http.MethodPost, "/api/v1/providers", superToken, `{"name":"mine","api_base":"http://127.0.0.1:9/v1"}`); r.code != http.StatusCreated {
		t.Fatalf("create: %d %s", r.code, r.raw)
	}
	r := call(t, api, http.MethodGet, "/api/v1/providers", superToken, "")
	managed := map[string]string{}
	for _, p := range r.body["data"].([]any) {
		p := p.(map[string]any)
		managed[p["name"].(string)] = p["managed_by"].(string)
	}
	if managed["vllm-a"] != "file" || managed["mine"] != "api" {
		t.Fatalf("managed_by: %v", managed)
	}
	if r := call(t, api, http.MethodGet, "/api/v1/routes/zeta", superToken, ""); r.body["managed_by"] != "file" {
		t.Fatalf("route zeta: %s", r.raw)
	}
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPut, "/api/v1/providers/vllm-a", `{"api_base":"http://127.0.0.1:9/v1"}`},
		{http.MethodDelete, "/api/v1/providers/vllm-a", ""},
		{http.MethodPut, "/api/v1/routes/zeta", `{"strategy":"round_robin","targets":[{"provider":"vllm-a"}]}`},
		{http.MethodDelete, "/api/v1/routes/plain", ""},
	} {
		r := call(t, api, c.method, c.path, superToken, c.body)
		e, _ := r.body["error"].(map[string]any)
		if r.code != http.StatusConflict || e["code"] != "readonly" || !strings.Contains(errMessage(r), "managed by rolter.toml") {
			t.Errorf("%s %s: %d %s; want 409 naming rolter.toml", c.method, c.path, r.code, r.raw)
		}
	}
	if r := call(t, api, http.MethodDelete, "/api/v1/providers/mine", superToken, ""); r.code != http.StatusNoContent {
		t.Errorf("an API-created provider stays editable: %d %s", r.code, r.raw)
	}
}

func TestConfigDiffAndApplyThroughTheClient(t *testing.T) {
	m := newMesh(t)
	idx := m.follower()
	api := m.apis[idx]
	srv := httptest.NewServer(api)
	defer srv.Close()
	ctx := context.Background()
	if r := call(t, api, http.MethodPost, "/api/v1/providers", superToken, `{"name":"mine","api_base":"http://127.0.0.1:9/v1"}`); r.code != http.StatusCreated {
		t.Fatalf("create: %d %s", r.code, r.raw)
	}
	cl := &Client{Admin: srv.URL, Token: superToken, HTTP: srv.Client()}
	v1 := []byte(meshFile("1", "http://127.0.0.1:8100/v1"))
	version := m.c.Node(idx).State().ConfigVersion

	diff, err := cl.Diff(ctx, v1)
	want := []string{"~ provider/vllm-a api_base: http://127.0.0.1:8000/v1 → http://127.0.0.1:8100/v1"}
	if err != nil || diff.Outcome != OutcomeWouldApply || !slices.Equal(diff.Changes, want) {
		t.Fatalf("diff: %+v %v", diff, err)
	}
	if got := m.c.Node(idx).State().Providers["vllm-a"].APIBase; got != "http://127.0.0.1:8000/v1" {
		t.Fatalf("diff changed the state: %q", got)
	}
	var out bytes.Buffer
	if err := diff.WriteText(&out); err != nil || !strings.Contains(out.String(), "1 change(s) would be applied") {
		t.Fatalf("diff text: %q %v", out.String(), err)
	}

	applied, err := cl.Apply(ctx, v1)
	if err != nil || applied.Outcome != "applied" || applied.ConfigVersion != version+1 || !slices.Equal(applied.Changes, want) {
		t.Fatalf("apply: %+v %v (config_version was %d)", applied, err, version)
	}
	for i := range 3 {
		testwait.For(t, 5*time.Second, "the new api_base on every router", func() bool {
			return m.c.Node(i).State().Providers["vllm-a"].APIBase == "http://127.0.0.1:8100/v1"
		})
	}
	if p := m.c.Node(idx).State().Providers["mine"]; p.APIBase != "http://127.0.0.1:9/v1" || p.ReadOnly {
		t.Errorf("the API-created provider changed: %+v", p)
	}
	audit := call(t, api, http.MethodGet, "/api/v1/audit?limit=1", superToken, "")
	last := audit.body["data"].([]any)[0].(map[string]any)
	if last["action"] != "config.file_sync" || last["actor"] != "bootstrap" || len(last["diff"].([]any)) != 1 {
		t.Errorf("audit: %v", last)
	}

	if again, err := cl.Apply(ctx, v1); err != nil || again.Outcome != "unchanged" {
		t.Errorf("re-apply: %+v %v", again, err)
	}
	_, err = cl.Apply(ctx, []byte(meshFile("0", "http://127.0.0.1:8000/v1")))
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Code != "file_refused" || !strings.Contains(ae.Message, "older") {
		t.Fatalf("older file: %v", err)
	}
	_, err = cl.Diff(ctx, []byte("[[providers]]\nname = \"x\"\n"))
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(ae.Message, "api_base: required") {
		t.Fatalf("invalid file: %v", err)
	}
	// The router's own [limits] bind a posted file, whatever its own say.
	strict := New(Deps{Store: m.c.Node(idx), Cluster: m.c.Node(idx), InternalToken: internalToken,
		Limits: config.Limits{AllowedSchemes: []string{"http"}, AllowedHosts: []string{"10.0.0.1"}}})
	sneaky := meshFile("5", "http://127.0.0.1:8100/v1") + "[limits]\nallowed_hosts = []\n"
	if r := call(t, strict, http.MethodPost, "/api/v1/config/apply", superToken, sneaky); r.code != http.StatusBadRequest ||
		!strings.Contains(errMessage(r), "this router's [limits]") {
		t.Fatalf("a file widening [limits]: %d %s", r.code, r.raw)
	}
	viewer := call(t, api, http.MethodPost, "/api/v1/admin-tokens", superToken, `{"name":"v","role":"viewer"}`)
	vc := &Client{Admin: srv.URL, Token: viewer.body["secret"].(string), HTTP: srv.Client()}
	if _, err := vc.Apply(ctx, v1); !errors.As(err, &ae) || ae.Status != http.StatusForbidden {
		t.Fatalf("viewer apply: %v", err)
	}
}

// A [[models]] entry applied from a file is file-owned: listed as
// managed_by "file", refused with 409 readonly on PUT and DELETE, while a
// price created through the API stays editable.
func TestFileOwnedModelPricesAreReadOnly(t *testing.T) {
	m := newMesh(t)
	idx := m.follower()
	api := m.apis[idx]
	srv := httptest.NewServer(api)
	defer srv.Close()
	const model = "meta-llama/Llama-3.1-8B"
	if r := call(t, api, http.MethodPut, "/api/v1/model-prices/mine", superToken, `{"price_in_per_mtok":1,"price_out_per_mtok":2}`); r.code != http.StatusOK || r.body["managed_by"] != "api" {
		t.Fatalf("create: %d %s", r.code, r.raw)
	}
	cl := &Client{Admin: srv.URL, Token: superToken, HTTP: srv.Client()}
	file := meshFile("1", "http://127.0.0.1:8000/v1") + `
[[models]]
model = "` + model + `"
price_in_per_mtok = 0.2
price_out_per_mtok = 0.6
`
	applied, err := cl.Apply(context.Background(), []byte(file))
	want := []string{"+ model/" + model + " price_in_per_mtok=0.2 price_out_per_mtok=0.6"}
	if err != nil || applied.Outcome != "applied" || !slices.Equal(applied.Changes, want) {
		t.Fatalf("apply: %+v %v", applied, err)
	}
	testwait.For(t, 5*time.Second, "the file's price on this router", func() bool {
		return m.c.Node(idx).State().Models[model].ReadOnly
	})
	r := call(t, api, http.MethodGet, "/api/v1/model-prices", superToken, "")
	managed := map[string]string{}
	for _, e := range r.body["data"].([]any) {
		e := e.(map[string]any)
		managed[e["model"].(string)] = e["managed_by"].(string)
	}
	if managed[model] != "file" || managed["mine"] != "api" {
		t.Fatalf("managed_by: %v (%s)", managed, r.raw)
	}
	for _, c := range []struct{ method, body string }{
		{http.MethodPut, `{"price_in_per_mtok":9,"price_out_per_mtok":9}`},
		{http.MethodDelete, ""},
	} {
		r := call(t, api, c.method, "/api/v1/model-prices/"+model, superToken, c.body)
		e, _ := r.body["error"].(map[string]any)
		if r.code != http.StatusConflict || e["code"] != "readonly" || !strings.Contains(errMessage(r), "managed by rolter.toml") {
			t.Errorf("%s %s: %d %s; want 409 naming rolter.toml", c.method, model, r.code, r.raw)
		}
	}
	if got := m.c.Node(idx).State().Models[model].PriceInPerMtok; got != 0.2 {
		t.Errorf("the file's price changed to %v", got)
	}
	if r := call(t, api, http.MethodPut, "/api/v1/model-prices/mine", superToken, `{"price_in_per_mtok":3,"price_out_per_mtok":4}`); r.code != http.StatusOK {
		t.Errorf("an API-created price stays editable: %d %s", r.code, r.raw)
	}
}
