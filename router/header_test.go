package router

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
)

// TestFieldsAcrossTheProxy: on either front, the engine gets the
// client's own fields but never its hop-by-hop ones, its credentials or
// its encodings, and gets the provider's key and the router's request id;
// the client gets the engine's fields, a repeated one (Set-Cookie) with
// its values in the engine's order, minus the hop-by-hop ones, and the
// routing headers the engine cannot forge.
func TestFieldsAcrossTheProxy(t *testing.T) {
	for _, fr := range fronts {
		t.Run(fr.name, func(t *testing.T) {
			var mu sync.Mutex
			var got http.Header
			eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
				mu.Lock()
				got = r.Header.Clone()
				mu.Unlock()
				h := w.Header()
				h["Set-Cookie"] = []string{"a=1", "b=2"}
				h["X-Engine"] = []string{"one", "two"}
				h.Set("Keep-Alive", "timeout=5")
				h.Set("X-Rolter-Attempts", "99")
				h.Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"choices":[{"message":{"content":"hi"}}]}`)
			})
			f := fr.serveFront(t, providers("a", eng.URL)+"api_key_env = \"KEY\"\n"+route("round_robin"),
				func(o *Options) {
					o.Getenv = func(k string) string {
						if k == "KEY" {
							return "sk-engine"
						}
						return ""
					}
				}, nil, nil)
			code, hdr, body := f.post(t.Context(), chatHi, "Authorization", "Bearer sk-client", "X-Custom", "kept",
				"Te", "trailers", "Keep-Alive", "timeout=1", "Proxy-Authorization", "Basic eDp5", "Accept-Encoding", "gzip",
				"X-Request-Id", "client-chosen-id-1", "User-Agent", "client/1.0", "Cookie", "session=abc")
			if code != http.StatusOK {
				t.Fatalf("status %d: %s", code, body)
			}
			mu.Lock()
			e := got
			mu.Unlock()
			for k, want := range map[string]string{
				"Authorization":       "Bearer sk-engine",
				"X-Custom":            "kept",
				"User-Agent":          "client/1.0",
				"Cookie":              "session=abc",
				"Content-Type":        "application/json",
				"X-Request-Id":        hdr.Get("X-Request-Id"),
				"Te":                  "",
				"Keep-Alive":          "",
				"Proxy-Authorization": "",
				"Accept-Encoding":     "",
			} {
				if v := e.Get(k); v != want {
					t.Errorf("engine got %s %q, want %q", k, v, want)
				}
			}
			if v := e.Values("Authorization"); len(v) != 1 {
				t.Errorf("engine got Authorization %q: want the provider's key alone", v)
			}
			if v := hdr.Values("Set-Cookie"); !slices.Equal(v, []string{"a=1", "b=2"}) {
				t.Errorf("client got Set-Cookie %q, want both in the engine's order", v)
			}
			if v := hdr.Values("X-Engine"); !slices.Equal(v, []string{"one", "two"}) {
				t.Errorf("client got X-Engine %q, want both in order", v)
			}
			if v := hdr.Get("Keep-Alive"); v != "" {
				t.Errorf("client got the engine's hop-by-hop Keep-Alive %q", v)
			}
			if v := hdr.Values("X-Rolter-Attempts"); !slices.Equal(v, []string{"1"}) {
				t.Errorf("client got X-Rolter-Attempts %q: the router's, not the engine's", v)
			}
		})
	}
}

// TestTimeBoundsEndTheEnginesRequest: the first-byte timeout answers the
// client in the OpenAI shape and closes the engine's request, and the
// request's deadline cuts a stream with a terminal error event and
// closes it too, on either front.
func TestTimeBoundsEndTheEnginesRequest(t *testing.T) {
	for _, fr := range fronts {
		t.Run(fr.name+"/first byte", func(t *testing.T) {
			ended := make(chan struct{})
			eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
				<-r.Context().Done() // never answers
				close(ended)
			})
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin")+"[timeouts]\nfirst_byte = \"200ms\"\n", nil, nil, nil)
			code, hdr, body := f.post(t.Context(), chatHi)
			if code != http.StatusBadGateway || errorCode(t, body) != "upstream_error" || hdr.Get("Content-Type") != "application/json" {
				t.Fatalf("%d %q %s", code, hdr.Get("Content-Type"), body)
			}
			select {
			case <-ended:
			case <-time.After(5 * time.Second):
				t.Fatal("the engine still holds the request 5 s after the first-byte timeout")
			}
			testwait.For(t, 5*time.Second, "in-flight back to zero", func() bool { return f.srv.tracker.Target("a/m").InFlight() == 0 })
		})
		t.Run(fr.name+"/deadline", func(t *testing.T) {
			ended := make(chan struct{})
			eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n")
				w.(http.Flusher).Flush()
				<-r.Context().Done() // then silent
				close(ended)
			})
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin")+
				"[timeouts]\nfirst_byte = \"200ms\"\nrequest = \"600ms\"\n", nil, nil, nil)
			code, _, body := f.post(t.Context(), `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			if code != http.StatusOK || !strings.Contains(body, "Hel") || !strings.Contains(body, "deadline") {
				t.Fatalf("%d %s", code, body)
			}
			select {
			case <-ended:
			case <-time.After(5 * time.Second):
				t.Fatal("the engine still holds the stream 5 s after the request's deadline")
			}
		})
	}
}
