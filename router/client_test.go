package router

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
)

func TestClientLeavingBeforeTheFirstByteClosesTheEngineConnection(t *testing.T) {
	arrived, aborted := make(chan struct{}), make(chan struct{})
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		close(arrived)
		select { // a long prefill: nothing is written
		case <-r.Context().Done():
			close(aborted)
		case <-time.After(10 * time.Second):
		}
	})
	h := newHarness(t, providers("a", eng.URL)+`
[[routes]]
model = "m"
targets = [{provider = "a"}]
`, nil)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.api.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	errc := make(chan error, 1)
	go func() {
		resp, err := h.api.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-arrived
	cancel()
	<-errc
	select {
	case <-aborted:
	case <-time.After(5 * time.Second):
		t.Fatal("the engine still holds the request 5 s after the client left")
	}
	testwait.For(t, 5*time.Second, "canceled outcome", func() bool { return h.counter("targets", "a", "a/m", "canceled") == 1 })
	if got := h.counter("targets", "a", "a/m", "connect_error"); got != 0 {
		t.Fatalf("a client leaving counted as %v engine failures", got)
	}
}

func TestUpstreamGetsTheClientsHeadersMinusHopByHopOnes(t *testing.T) {
	var mu sync.Mutex
	var got *http.Request
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		mu.Lock()
		got = r
		mu.Unlock()
		w.Header()["X-Engine"] = []string{"one", "two"}
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"message":{"content":"hi"}}]}`)
	})
	h := newHarness(t, providers("a", eng.URL)+`api_key_env = "KEY"
[[routes]]
model = "m"
targets = [{provider = "a", model = "engine-model"}]
`, map[string]string{"KEY": "sk-engine"})
	body := `{"model":"m","messages":[{"role":"user","content":"hello"}]}`
	code, hdr, out := h.post("/v1/chat/completions", body,
		"X-Custom", "kept", "Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"Te", "trailers", "Connection", "keep-alive", "Authorization", "Bearer sk-client", "User-Agent", "client/1.0")
	if code != 200 {
		t.Fatalf("status %d: %s", code, out)
	}
	mu.Lock()
	r := got
	mu.Unlock()
	for k, want := range map[string]string{
		"X-Custom":      "kept",
		"Traceparent":   "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"Authorization": "Bearer sk-engine",
		"Content-Type":  "application/json",
		"User-Agent":    "client/1.0",
		"Te":            "",
	} {
		if v := r.Header.Get(k); v != want {
			t.Errorf("engine got %s %q, want %q", k, v, want)
		}
	}
	wantLen := int64(len(strings.Replace(body, `"m"`, `"engine-model"`, 1)))
	if r.ContentLength != wantLen || len(r.TransferEncoding) != 0 {
		t.Errorf("engine got Content-Length %d (transfer encoding %v), want %d", r.ContentLength, r.TransferEncoding, wantLen)
	}
	if v := hdr.Values("X-Engine"); len(v) != 2 || v[0] != "one" || v[1] != "two" {
		t.Errorf("client got X-Engine %q, want both values in order", v)
	}
	if v := hdr.Get("Keep-Alive"); v != "" {
		t.Errorf("client got the engine's hop-by-hop Keep-Alive %q", v)
	}
	if hdr.Get("Content-Type") != "application/json" {
		t.Errorf("client got Content-Type %q", hdr.Get("Content-Type"))
	}
}

func TestAConnectionTheEngineClosedWhileIdleIsRedialled(t *testing.T) {
	var closed atomic.Int64
	var hits atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"message":{"content":"hi"}}]}`)
	}))
	// The engine closes keep-alive connections idle 50 ms (uvicorn's is 5 s).
	srv.Config.IdleTimeout = 50 * time.Millisecond
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	h := newHarness(t, providers("a", srv.URL)+`
[[routes]]
model = "m"
targets = [{provider = "a"}]
`, nil)
	for i := range 3 {
		if code, _, body := h.chat("m"); code != 200 {
			t.Fatalf("request %d: status %d: %s", i, code, body)
		}
		testwait.For(t, 5*time.Second, "the engine closes the idle connection", func() bool { return closed.Load() == int64(i+1) })
	}
	if got := h.counter("targets", "a", "a/m", "connect_error"); got != 0 {
		t.Fatalf("%v requests failed on a connection the engine had closed", got)
	}
	if hits.Load() != 3 {
		t.Fatalf("engine served %d requests, want 3", hits.Load())
	}
	// A health probe (no body) on such a connection is sent again too.
	p := h.srv.snap.Load().providers["a"]
	for i := range 2 {
		if !h.srv.get(context.Background(), p, "/health", 5*time.Second) {
			t.Fatalf("probe %d failed on a connection the engine had closed", i)
		}
		testwait.For(t, 5*time.Second, "the engine closes the idle connection", func() bool { return closed.Load() == int64(4+i) })
	}
}

func TestHTTPSEngine(t *testing.T) {
	eng := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{`{"choices":[{"delta":{"content":"a"}}]}`, `{"choices":[{"delta":{"content":"b"}}]}`, "[DONE]"} {
			_, _ = io.WriteString(w, "data: "+ev+"\n\n")
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(eng.Close)
	roots := x509.NewCertPool()
	roots.AddCert(eng.Certificate())
	h := newHarnessWith(t, providers("a", eng.URL)+`
[[routes]]
model = "m"
targets = [{provider = "a"}]
`, nil, nil)
	// No request ran yet: the client's first https host takes this.
	h.srv.transport.tls = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	code, _, body := h.post("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if code != 200 || !strings.Contains(body, `"content":"b"`) || !strings.Contains(body, "[DONE]") {
		t.Fatalf("status %d: %s", code, body)
	}
}
