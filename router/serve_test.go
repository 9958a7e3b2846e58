package router

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/internal/testwait"
)

func TestServeDrainsStreamsOnShutdown(t *testing.T) {
	release := make(chan struct{})
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprint(w, "data: {\"n\":2}\n\ndata: [DONE]\n\n")
	})
	cfg, err := config.Parse("rolter.toml", []byte(providers("a", eng.URL)+`
[[routes]]
model = "m"
targets = [{provider = "a"}]
[health]
enabled = false
`), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{})
	if err := s.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	api, _ := net.Listen("tcp", "127.0.0.1:0")
	admin, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, api, admin) }()
	base, adminBase := "http://"+api.Addr().String(), "http://"+admin.Addr().String()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()

	get := func(url string) int {
		resp, err := client.Get(url)
		if err != nil {
			return -1
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get(adminBase + "/readyz"); c != 200 {
		t.Fatalf("/readyz %d before shutdown", c)
	}
	resp, err := client.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	stop() // SIGTERM
	testwait.For(t, 5*time.Second, "/readyz turns 503 while draining", func() bool { return get(adminBase+"/readyz") == 503 })
	// Serve marks itself draining, then closes the API's listener: a dial
	// in between is still accepted, so the refusal is waited for.
	testwait.For(t, 5*time.Second, "the API refuses new connections while draining", func() bool {
		c, err := net.DialTimeout("tcp", api.Addr().String(), time.Second)
		if err != nil {
			return true
		}
		c.Close()
		return false
	})
	close(release)
	rest, _ := io.ReadAll(br)
	resp.Body.Close()
	if !strings.Contains(string(rest), `{"n":2}`) || !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("the in-flight stream did not finish: %q", rest)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after the drain")
	}
}

func TestMetricsUseCompatNames(t *testing.T) {
	eng := newEngine(t, okChat)
	h := newHarness(t, providers("a", eng.URL)+"[[routes]]\nmodel = \"m\"\ntargets = [{provider = \"a\"}]\n", nil)
	if code, _, _ := h.chat("m"); code != 200 {
		t.Fatal(code)
	}
	rec := httptest.NewRecorder()
	h.srv.AdminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, want := range []string{
		`rolter_requests_total{code="200",model="m"} 1`,
		`rolter_target_requests_total{outcome="success",provider="a",target="a/m"} 1`,
		`rolter_request_latency_ms_count{model="m"} 1`,
		`rolter_request_ttft_ms_count{model="m"} 1`,
		`rolter_config_version 1`,
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
