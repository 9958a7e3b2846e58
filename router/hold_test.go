package router

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/strategies"
)

// roundTrip is an in-memory upstream: no sockets, so synctest's virtual
// clock can run the whole exchange.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func okUpstream(r *http.Request) (*http.Response, error) {
	body := `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
}

const holdConfig = `
[[providers]]
name = "a"
api_base = "http://engine.invalid"
[[routes]]
model = "m"
targets = [{ provider = "a" }]
[health]
enabled = false
`

type held struct {
	code  int
	hdr   http.Header
	body  string
	after time.Duration
}

// send runs one chat request through srv in the background.
func send(srv *Server, path string) <-chan held {
	out := make(chan held, 1)
	go func() {
		start := time.Now()
		method, body := http.MethodPost, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
		if path == "/v1/models" {
			method, body = http.MethodGet, ""
		}
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
		out <- held{rec.Code, rec.Header(), rec.Body.String(), time.Since(start)}
	}()
	return out
}

// A request that arrives a moment before the first config is served once
// it is applied, instead of failing with 503.
func TestRequestBeforeFirstConfigWaitsForIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := config.Parse("rolter.toml", []byte(holdConfig), func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		srv := New(Options{Transport: roundTrip(okUpstream), Rand: strategies.NewRand(1)})
		chat, models := send(srv, "/v1/chat/completions"), send(srv, "/v1/models")
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		select {
		case r := <-chat:
			t.Fatalf("answered before any config: %d %s", r.code, r.body)
		default:
		}
		if err := srv.Apply(cfg); err != nil {
			t.Fatal(err)
		}
		for name, ch := range map[string]<-chan held{"chat": chat, "models": models} {
			r := <-ch
			if r.code != http.StatusOK || r.after != 1500*time.Millisecond {
				t.Errorf("%s: %d after %v (%s), want 200 once the config arrived at 1.5s", name, r.code, r.after, r.body)
			}
		}
	})
}

// With no config in time the wait is bounded: 503 in the OpenAI shape
// with Retry-After, after ConfigWait and no later.
func TestRequestWithoutConfigGets503AfterTheBoundedWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := New(Options{Transport: roundTrip(okUpstream)})
		for _, path := range []string{"/v1/chat/completions", "/v1/models"} {
			r := <-send(srv, path)
			if r.code != http.StatusServiceUnavailable || r.hdr.Get("Retry-After") == "" || errorCode(t, r.body) != "not_ready" {
				t.Errorf("%s: %d Retry-After %q %s, want 503 not_ready with Retry-After", path, r.code, r.hdr.Get("Retry-After"), r.body)
			}
			if r.after != DefaultConfigWait {
				t.Errorf("%s: answered after %v, want the bounded wait %v", path, r.after, DefaultConfigWait)
			}
		}
		short := New(Options{Transport: roundTrip(okUpstream), ConfigWait: 300 * time.Millisecond})
		if r := <-send(short, "/v1/chat/completions"); r.code != http.StatusServiceUnavailable || r.after != 300*time.Millisecond {
			t.Errorf("ConfigWait 300ms: %d after %v", r.code, r.after)
		}
		none := New(Options{Transport: roundTrip(okUpstream), ConfigWait: -1})
		if r := <-send(none, "/v1/chat/completions"); r.code != http.StatusServiceUnavailable || r.after != 0 {
			t.Errorf("ConfigWait -1: %d after %v, want an immediate 503", r.code, r.after)
		}
	})
}
