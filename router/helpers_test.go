package router

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/strategies"
)

// fakeClock is a manually advanced clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// upstream is a fake OpenAI-compatible engine that counts and records.
type fakeEngine struct {
	*httptest.Server
	hits   atomic.Int64
	mu     sync.Mutex
	bodies []map[string]any
	auth   []string
	paths  []string
}

func newEngine(t *testing.T, h func(w http.ResponseWriter, r *http.Request, body map[string]any)) *fakeEngine {
	t.Helper()
	u := &fakeEngine{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			h(w, r, nil)
			return
		}
		u.hits.Add(1)
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		u.mu.Lock()
		u.bodies = append(u.bodies, body)
		u.auth = append(u.auth, r.Header.Get("Authorization"))
		u.paths = append(u.paths, r.URL.Path)
		u.mu.Unlock()
		h(w, r, body)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *fakeEngine) lastBody() map[string]any {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.bodies) == 0 {
		return nil
	}
	return u.bodies[len(u.bodies)-1]
}

// okChat answers a chat request with a non-streaming completion naming
// the upstream model it received.
func okChat(w http.ResponseWriter, _ *http.Request, body map[string]any) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`, body["model"])
}

func status(code int) func(http.ResponseWriter, *http.Request, map[string]any) {
	return func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		http.Error(w, `{"error":{"message":"upstream says no"}}`, code)
	}
}

// harness is a router in front of fake upstreams.
type harness struct {
	t      *testing.T
	srv    *Server
	api    *httptest.Server
	clock  *fakeClock
	sleeps []time.Duration
	mu     sync.Mutex
}

// newHarness parses tomlText (with health checks off unless the text says
// otherwise) and serves it.
func newHarness(t *testing.T, tomlText string, env map[string]string) *harness {
	t.Helper()
	return newHarnessWith(t, tomlText, env, nil)
}

// newHarnessWith is newHarness with a hook to adjust the Server's Options.
func newHarnessWith(t *testing.T, tomlText string, env map[string]string, adjust func(*Options)) *harness {
	t.Helper()
	if !strings.Contains(tomlText, "[health]") {
		tomlText += "\n[health]\nenabled = false\n"
	}
	cfg, err := config.Parse("rolter.toml", []byte(tomlText), func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, clock: newFakeClock()}
	o := Options{
		Clock:  h.clock,
		Rand:   strategies.NewRand(7),
		Getenv: func(k string) string { return env[k] },
		Sleep: func(ctx context.Context, d time.Duration) error {
			h.mu.Lock()
			h.sleeps = append(h.sleeps, d)
			h.mu.Unlock()
			return ctx.Err()
		},
	}
	if adjust != nil {
		adjust(&o)
	}
	h.srv = New(o)
	if err := h.srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	h.api = httptest.NewServer(h.srv.Handler())
	t.Cleanup(func() {
		h.api.Close()
		h.srv.transport.CloseIdleConnections()
	})
	return h
}

// post sends body to path with optional headers and returns status, body.
func (h *harness) post(path, body string, hdr ...string) (int, http.Header, string) {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.api.URL+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := h.api.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func (h *harness) chat(model string, hdr ...string) (int, http.Header, string) {
	return h.post("/v1/chat/completions", `{"model":`+quote(model)+`,"messages":[{"role":"user","content":"hello"}]}`, hdr...)
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

// errorCode extracts error.code from an OpenAI error body, failing the
// test when the body is not that shape.
func errorCode(t *testing.T, body string) string {
	t.Helper()
	var e struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" || e.Error.Type == "" || e.Error.Code == "" {
		t.Fatalf("not an OpenAI error body: %q", body)
	}
	return e.Error.Code
}

func (h *harness) counter(name string, labels ...string) float64 {
	h.t.Helper()
	var c prometheus.Counter
	switch name {
	case "retries":
		c = h.srv.metrics.retries.WithLabelValues(labels...)
	case "targets":
		c = h.srv.metrics.targets.WithLabelValues(labels...)
	case "requests":
		c = h.srv.metrics.requests.WithLabelValues(labels...)
	default:
		h.t.Fatalf("unknown counter %s", name)
	}
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		h.t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// sseEvents reads "data:" payloads from r until EOF.
func sseEvents(r io.Reader) []string {
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// providers renders [[providers]] for the given name=url pairs.
func providers(kv ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, "[[providers]]\nname = %q\napi_base = %q\n\n", kv[i], kv[i+1])
	}
	return b.String()
}
