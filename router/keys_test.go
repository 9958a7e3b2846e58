package router

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
)

func sha(s string) string { b := sha256.Sum256([]byte(s)); return hex.EncodeToString(b[:]) }

func TestKeysAndAllowlist(t *testing.T) {
	eng := newEngine(t, okChat)
	h := newHarness(t, providers("a", eng.URL)+`
[[routes]]
model = "llama"
targets = [{provider = "a"}]
[[routes]]
model = "qwen"
targets = [{provider = "a"}]
[[provider_groups]]
name = "fleet"
slug = "fleet"
members = [{provider = "a"}]
[[keys]]
name = "team-a"
sha256 = "`+sha("sk-team-a")+`"
models = ["llama", "fleet/*"]
[[keys]]
name = "admin"
secret_env = "ADMIN_KEY"
`, map[string]string{"ADMIN_KEY": "sk-admin"})
	cases := []struct {
		name, auth, model string
		status            int
		code              string
	}{
		{"no key", "", "llama", 401, "invalid_api_key"},
		{"not bearer", "Basic c2stdGVhbS1h", "llama", 401, "invalid_api_key"},
		{"wrong key", "Bearer sk-wrong", "llama", 401, "invalid_api_key"},
		{"allowed model", "Bearer sk-team-a", "llama", 200, ""},
		{"model outside allowlist", "Bearer sk-team-a", "qwen", 403, "model_not_allowed"},
		{"group wildcard", "Bearer sk-team-a", "fleet/any", 200, ""},
		{"provider pin not allowed", "Bearer sk-team-a", "a/llama", 403, "model_not_allowed"},
		{"key without allowlist", "Bearer sk-admin", "qwen", 200, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var hdr []string
			if tc.auth != "" {
				hdr = []string{"Authorization", tc.auth}
			}
			code, _, body := h.chat(tc.model, hdr...)
			if code != tc.status {
				t.Fatalf("status %d (%s), want %d", code, body, tc.status)
			}
			if tc.code != "" && errorCode(t, body) != tc.code {
				t.Fatalf("body %s, want code %s", body, tc.code)
			}
			// The hint reads as written, not HTML-escaped.
			if tc.name == "no key" && !strings.Contains(body, "Bearer <key>") {
				t.Fatalf("body %s, want the hint `Bearer <key>`", body)
			}
		})
	}
	for _, auth := range eng.auth {
		if strings.Contains(auth, "sk-") {
			t.Fatalf("a client key was forwarded upstream: %q", auth)
		}
	}
	// /v1/models lists what the key may use.
	req, _ := http.NewRequest(http.MethodGet, h.api.URL+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer sk-team-a")
	resp, err := h.api.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list modelList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "fleet/*,llama" {
		t.Errorf("/v1/models for team-a: %v", ids)
	}
}

func TestProviderKeyIsSentUpstream(t *testing.T) {
	eng := newEngine(t, okChat)
	h := newHarness(t, `
[[providers]]
name = "a"
api_base = "`+eng.URL+`/v1"
api_key_env = "A_KEY"
[[routes]]
model = "m"
targets = [{provider = "a"}]
`, map[string]string{"A_KEY": "upstream-secret"})
	if code, _, body := h.chat("m", "Authorization", "Bearer whatever"); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	if eng.auth[0] != "Bearer upstream-secret" {
		t.Fatalf("upstream saw Authorization %q", eng.auth[0])
	}
	for _, path := range []string{"/v1/completions", "/v1/embeddings"} {
		if code, _, body := h.post(path, `{"model":"m","input":"x","prompt":"x"}`); code != 200 {
			t.Fatalf("%s: %d %s", path, code, body)
		}
	}
	// api_base ends in /v1: the API path is not given a second one.
	if got := strings.Join(eng.paths, " "); got != "/v1/chat/completions /v1/completions /v1/embeddings" {
		t.Fatalf("upstream paths %s", got)
	}
}

func TestMaxStreamsPerKey(t *testing.T) {
	hold := make(chan struct{})
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, b map[string]any) {
		if b["stream"] != true {
			okChat(w, r, b)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {}\n\n")
		w.(http.Flusher).Flush()
		<-hold
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	h := newHarness(t, providers("a", eng.URL)+`
[[routes]]
model = "m"
targets = [{provider = "a"}]
[[keys]]
name = "k"
sha256 = "`+sha("sk-k")+`"
[limits]
max_streams_per_key = 1
`, nil)
	req, _ := http.NewRequest(http.MethodPost, h.api.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	req.Header.Set("Authorization", "Bearer sk-k")
	resp, err := h.api.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	code, _, body := h.post("/v1/chat/completions", `{"model":"m","stream":true}`, "Authorization", "Bearer sk-k")
	if code != 429 || errorCode(t, body) != "too_many_streams" {
		t.Fatalf("second stream: %d %s", code, body)
	}
	if code, _, _ := h.chat("m", "Authorization", "Bearer sk-k"); code != 200 {
		t.Fatalf("a non-streaming request is not capped: %d", code)
	}
	close(hold)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	testwait.For(t, 5*time.Second, "stream slot released", func() bool {
		c, _, _ := h.post("/v1/chat/completions", `{"model":"m","stream":true}`, "Authorization", "Bearer sk-k")
		return c == 200
	})
}

// countingReader produces n bytes of JSON-ish filler and counts reads.
type countingReader struct {
	left, read atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	left := c.left.Load()
	if left == 0 {
		return 0, io.EOF
	}
	n := min(int64(len(p)), left)
	for i := range p[:n] {
		p[i] = ' '
	}
	c.left.Add(-n)
	c.read.Add(n)
	return int(n), nil
}

func TestOversizedBodyIs413WithoutReadingIt(t *testing.T) {
	eng := newEngine(t, okChat)
	h := newHarness(t, providers("a", eng.URL)+`
[[routes]]
model = "m"
targets = [{provider = "a"}]
[limits]
max_body_bytes = 65536
`, nil)
	t.Run("declared Content-Length", func(t *testing.T) {
		// Announce 1 GiB, send 1 KiB: the answer must come without the
		// router waiting for the rest.
		conn, err := net.Dial("tcp", strings.TrimPrefix(h.api.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			1<<30, strings.Repeat(" ", 1024))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 413 || errorCode(t, string(b)) != "request_too_large" {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	})
	t.Run("chunked body", func(t *testing.T) {
		body := &countingReader{}
		body.left.Store(64 << 20)
		req, _ := http.NewRequest(http.MethodPost, h.api.URL+"/v1/chat/completions", io.NopCloser(body))
		req.ContentLength = -1 // chunked: no size announced
		resp, err := h.api.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 413 || errorCode(t, string(b)) != "request_too_large" {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		if body.read.Load() >= 32<<20 {
			t.Fatalf("client had to send %d bytes of a 64 MiB body", body.read.Load())
		}
	})
	if eng.hits.Load() != 0 {
		t.Fatal("an oversized body reached the upstream")
	}
}

// A key's provider allowlist is part of eligibility (seed 000: "allowed to
// the key"), for routes and groups alike: the key never lands on another
// provider, not even when its providers are parked or down, and a key
// with no eligible target at all gets 403 in the OpenAI error shape.
func TestKeyProviderAllowlist(t *testing.T) {
	open, closed := newEngine(t, okChat), newEngine(t, okChat)
	var limited atomic.Bool
	other := newEngine(t, func(w http.ResponseWriter, r *http.Request, b map[string]any) {
		if limited.Load() {
			w.Header().Set("Retry-After", "30")
			status(429)(w, r, b)
			return
		}
		okChat(w, r, b)
	})
	h := newHarness(t, providers("open", open.URL, "closed", closed.URL, "other", other.URL)+`
[[routes]]
model = "m"
strategy = "round_robin"
targets = [{provider = "open"}, {provider = "closed"}, {provider = "other"}]
[[routes]]
model = "closed-only"
targets = [{provider = "closed"}]
[[provider_groups]]
name = "fleet"
slug = "fleet"
strategy = "round_robin"
members = [{provider = "closed"}, {provider = "other"}, {provider = "open"}]
[[keys]]
name = "restricted"
sha256 = "`+sha("sk-r")+`"
providers = ["open", "other"]
[[keys]]
name = "any"
sha256 = "`+sha("sk-any")+`"
[retry]
attempts = 2
`, nil)
	auth := []string{"Authorization", "Bearer sk-r"}
	for range 12 {
		for _, model := range []string{"m", "fleet/x"} {
			if code, _, body := h.chat(model, auth...); code != 200 {
				t.Fatalf("%s: %d %s", model, code, body)
			}
		}
	}
	if closed.hits.Load() != 0 || open.hits.Load() == 0 || other.hits.Load() == 0 {
		t.Fatalf("hits: open %d closed %d other %d; the restricted key must never reach closed",
			open.hits.Load(), closed.hits.Load(), other.hits.Load())
	}
	// With "other" parked, the key still never spills onto "closed".
	limited.Store(true)
	for range 6 {
		if code, _, body := h.chat("m", auth...); code != 200 {
			t.Fatalf("with other parked: %d %s", code, body)
		}
	}
	if closed.hits.Load() != 0 {
		t.Fatalf("restricted key reached closed %d times once other was parked", closed.hits.Load())
	}
	code, _, body := h.chat("closed-only", auth...)
	if code != 403 || errorCode(t, body) != "provider_not_allowed" || !strings.Contains(body, "restricted") {
		t.Errorf("route with no allowed target: %d %s, want 403 provider_not_allowed", code, body)
	}
	if code, _, body := h.chat("closed-only", "Authorization", "Bearer sk-any"); code != 200 {
		t.Errorf("key without a provider allowlist: %d %s", code, body)
	}
}
