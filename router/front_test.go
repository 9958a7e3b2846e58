package router

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rolter/rolter/certs/certstest"
	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/internal/testwait"
)

// served is a router run the way `rolter router` runs it: Serve on real
// loopback listeners, with the config's limits and timeouts applied by
// Serve itself. The other router tests call Handler under httptest; these
// cover the front a client actually meets.
type served struct {
	srv    *Server
	base   string
	client *http.Client
	// stop ends Serve's context (SIGTERM); finished closes when Serve
	// returned (the test's cleanup checks its error).
	stop     func()
	finished <-chan struct{}
}

// front is which server carries the API in a TestServeFront case.
type front struct {
	name string
	kind frontKind
}

var fronts = []front{{"net/http", frontStd}, {"fasthttp", frontFast}}

// serveFront applies tomlText, starts Serve on a loopback listener with
// the front's server (wrapped by wrap when it is not nil, e.g. for TLS)
// and stops it with the test.
func (fr front) serveFront(t *testing.T, tomlText string, adjust func(*Options), wrap func(net.Listener) net.Listener, client *http.Client) *served {
	t.Helper()
	if !strings.Contains(tomlText, "[health]") {
		tomlText += "\n[health]\nenabled = false\n"
	}
	var o Options
	if adjust != nil {
		adjust(&o)
	}
	getenv := o.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	cfg, err := config.Parse("rolter.toml", []byte(tomlText), getenv)
	if err != nil {
		t.Fatal(err)
	}
	scheme := "http"
	if wrap != nil {
		o.WrapAPI, scheme = wrap, "https"
	}
	s := New(o)
	s.front = fr.kind
	if err := s.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var serveErr error
	finished := make(chan struct{})
	go func() { serveErr = s.Serve(ctx, ln, nil); close(finished) }()
	if client == nil {
		client = &http.Client{Transport: &http.Transport{}}
	}
	t.Cleanup(func() {
		client.CloseIdleConnections()
		stop()
		<-finished
		if serveErr != nil {
			t.Errorf("Serve: %v", serveErr)
		}
	})
	return &served{srv: s, base: scheme + "://" + ln.Addr().String(), client: client, stop: stop, finished: finished}
}

// post sends a chat body and returns status, headers and body (-1 when
// the request failed, e.g. because ctx ended).
func (f *served) post(ctx context.Context, body string, hdr ...string) (int, http.Header, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return -1, nil, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return -1, nil, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// dial opens a raw connection to the API, closed with the test.
func (f *served) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(f.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// exchange writes raw to c and reads one answer: the response, its body
// read and closed.
func exchange(t *testing.T, c net.Conn, raw string) (*http.Response, []byte) {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}

const chatHi = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

func route(strategy string) string {
	return "\n[[routes]]\nmodel = \"m\"\nstrategy = \"" + strategy + "\"\ntargets = [{provider = \"a\"}]\n"
}

// TestServeFront runs the proxy's key behaviours through Serve on a real
// listener: answers, streams, the error shape, the config's limits, TLS,
// and a client's departure ending the request wherever it waits.
func TestServeFront(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, fr front)
	}{
		{"plain answer", func(t *testing.T, fr front) {
			eng := newEngine(t, okChat)
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin"), nil, nil, nil)
			code, h, body := f.post(t.Context(), chatHi)
			if code != http.StatusOK || !strings.Contains(body, `"chat.completion"`) {
				t.Fatalf("%d %s", code, body)
			}
			if h.Get("X-Request-Id") == "" || h.Get("Content-Length") != fmt.Sprint(len(body)) || h.Get("Date") == "" {
				t.Fatalf("headers %v: want a request id, the body's length and a date", h)
			}
			if v := h.Get("Server"); v != "" {
				t.Fatalf("Server %q: the router names no server of its own", v)
			}
			if h.Get("X-Rolter-Target") == "" || h.Get("X-Rolter-Attempts") != "1" {
				t.Fatalf("routing headers %v", h)
			}
		}},
		{"stream", func(t *testing.T, fr front) {
			eng := newEngine(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
				w.Header().Set("Content-Type", "text/event-stream")
				for _, tok := range []string{"Hel", "lo"} {
					fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":%q}}]}\n\n", tok)
					w.(http.Flusher).Flush()
				}
				fmt.Fprint(w, "data: [DONE]\n\n")
			})
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin"), nil, nil, nil)
			req, _ := http.NewRequest(http.MethodPost, f.base+"/v1/chat/completions",
				strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
			resp, err := f.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			events := sseEvents(resp.Body)
			if !isEventStream(resp.Header.Get("Content-Type")) || len(events) != 3 || events[2] != "[DONE]" ||
				!strings.Contains(events[0], "Hel") {
				t.Fatalf("content type %q, events %q", resp.Header.Get("Content-Type"), events)
			}
		}},
		{"error shape", func(t *testing.T, fr front) {
			eng := newEngine(t, okChat)
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin"), nil, nil, nil)
			code, h, body := f.post(t.Context(), `{"model":"nope","messages":[]}`)
			if code != http.StatusNotFound || errorCode(t, body) != "model_not_found" || h.Get("Content-Type") != "application/json" {
				t.Fatalf("%d %q %s", code, h.Get("Content-Type"), body)
			}
		}},
		{"models, unknown paths and methods", func(t *testing.T, fr front) {
			eng := newEngine(t, okChat)
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin"), nil, nil, nil)
			get := func(method, path string) (int, http.Header, string) {
				req, _ := http.NewRequest(method, f.base+path, nil)
				resp, err := f.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, resp.Header, string(b)
			}
			if code, h, body := get(http.MethodGet, "/v1/models"); code != http.StatusOK || !strings.Contains(body, `"id":"m"`) ||
				h.Get("Content-Type") != "application/json" {
				t.Fatalf("/v1/models: %d %q %s", code, h.Get("Content-Type"), body)
			}
			if code, _, body := get(http.MethodGet, "/v1/nothing"); code != http.StatusNotFound || errorCode(t, body) != "not_found" {
				t.Fatalf("unknown path: %d %s", code, body)
			}
			if code, h, body := get(http.MethodGet, "/v1/chat/completions"); code != http.StatusMethodNotAllowed ||
				h.Get("Allow") != http.MethodPost || errorCode(t, body) != "method_not_allowed" {
				t.Fatalf("GET of a POST path: %d Allow %q %s", code, h.Get("Allow"), body)
			}
		}},
		{"body over max_body_bytes", func(t *testing.T, fr front) {
			eng := newEngine(t, okChat)
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin")+"\n[limits]\nmax_body_bytes = 64\n", nil, nil, nil)
			code, _, body := f.post(t.Context(), `{"model":"m","messages":[{"role":"user","content":"`+strings.Repeat("x", 100)+`"}]}`)
			if code != http.StatusRequestEntityTooLarge || errorCode(t, body) != "request_too_large" {
				t.Fatalf("%d %s", code, body)
			}
			if n := eng.hits.Load(); n != 0 {
				t.Fatalf("the engine got %d requests", n)
			}
		}},
		{"headers over max_header_bytes", func(t *testing.T, fr front) {
			eng := newEngine(t, okChat)
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin")+"\n[limits]\nmax_header_bytes = 4096\n", nil, nil, nil)
			// net/http allows 4 KiB of slack over MaxHeaderBytes.
			code, h, body := f.post(t.Context(), chatHi, "X-Padding", strings.Repeat("p", 16<<10))
			if code != http.StatusRequestHeaderFieldsTooLarge {
				t.Fatalf("%d %s, want 431", code, body)
			}
			if errorCode(t, body) != "request_header_too_large" || h.Get("Content-Type") != "application/json" ||
				!strings.Contains(body, "the limit is 4096 bytes") {
				t.Fatalf("431 %q %s: want the OpenAI error naming the limit", h.Get("Content-Type"), body)
			}
			if code, _, body := f.post(t.Context(), chatHi, "X-Padding", strings.Repeat("p", 1<<10)); code != http.StatusOK {
				t.Fatalf("a header under the limit: %d %s", code, body)
			}
		}},
		{"chunked body over max_body_bytes", func(t *testing.T, fr front) {
			eng := newEngine(t, okChat)
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin")+"\n[limits]\nmax_body_bytes = 64\n", nil, nil, nil)
			body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 100) + `"}]}`
			req, _ := http.NewRequest(http.MethodPost, f.base+"/v1/chat/completions", io.MultiReader(strings.NewReader(body)))
			resp, err := f.client.Do(req) // no length: the client sends it chunked
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge || errorCode(t, string(b)) != "request_too_large" {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			req, _ = http.NewRequest(http.MethodPost, f.base+"/v1/chat/completions", io.MultiReader(strings.NewReader(`{"model":"m"}`)))
			resp, err = f.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("a chunked body under the limit: %d %s", resp.StatusCode, b)
			}
		}},
		{"a long plain body keeps its length", func(t *testing.T, fr front) {
			long := strings.Repeat("0123456789", 20<<10) // past what the handler reads whole
			eng := newEngine(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
				b := fmt.Sprintf(`{"object":"chat.completion","pad":%q}`, long)
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Length", fmt.Sprint(len(b)))
				_, _ = io.WriteString(w, b)
			})
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin"), nil, nil, nil)
			code, h, body := f.post(t.Context(), chatHi)
			if code != http.StatusOK || !strings.Contains(body, long) || h.Get("Content-Length") != fmt.Sprint(len(body)) {
				t.Fatalf("%d, %d bytes, Content-Length %q", code, len(body), h.Get("Content-Length"))
			}
		}},
		{"a plain body broken midway is not whole", func(t *testing.T, fr front) {
			eng := newEngine(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Length", "100")
				_, _ = io.WriteString(w, `{"object":"chat.completion",`)
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler)
			})
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin"), nil, nil, nil)
			req, _ := http.NewRequest(http.MethodPost, f.base+"/v1/chat/completions", strings.NewReader(chatHi))
			resp, err := f.client.Do(req)
			if err == nil {
				b, rerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				if rerr == nil {
					t.Fatalf("the client read %d %q as a whole answer", resp.StatusCode, b)
				}
			}
		}},
		{"Expect: 100-continue", func(t *testing.T, fr front) {
			eng := newEngine(t, okChat)
			client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Minute}}
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin"), nil, nil, client)
			// The body goes only once the router said 100 Continue: a
			// router that did not would hold the request for a minute.
			if code, _, body := f.post(t.Context(), chatHi, "Expect", "100-continue"); code != http.StatusOK {
				t.Fatalf("%d %s", code, body)
			}
		}},
		{"keep-alive and pipelining", func(t *testing.T, fr front) {
			eng := newEngine(t, okChat)
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin"), nil, nil, nil)
			c, err := net.Dial("tcp", strings.TrimPrefix(f.base, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			one := "POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\nContent-Length: " +
				fmt.Sprint(len(chatHi)) + "\r\n\r\n" + chatHi
			if _, err := io.WriteString(c, one+one+one); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			for i := range 3 {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("response %d: %v", i, err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"chat.completion"`) {
					t.Fatalf("response %d: %d %s", i, resp.StatusCode, b)
				}
			}
		}},
		{"stream broken midway", func(t *testing.T, fr front) {
			eng := newEngine(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
				play(w, helloA, die)
			})
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin"), nil, nil, nil)
			code, _, body := f.post(t.Context(), `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			events := sseEvents(strings.NewReader(body))
			if code != http.StatusOK || len(events) != 2 || events[0] != helloA || !strings.Contains(events[1], "upstream_stream_error") {
				t.Fatalf("%d, events %q: want the first event, then the error event and no [DONE]", code, events)
			}
		}},
		{"resumed stream", func(t *testing.T, fr front) {
			sc := newScripted(t, 2, []string{roleA, helloA, die},
				[]string{chunkB(`{"role":"assistant","content":""}`, "null"), chunkB(`{"content":" again"}`, `"stop"`), "[DONE]"})
			f := fr.serveFront(t, sc.toml(""), nil, nil, nil)
			code, _, body := f.post(t.Context(), `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			events := sseEvents(strings.NewReader(body))
			if code != http.StatusOK || len(events) != 4 || events[1] != helloA || !strings.Contains(events[2], `"content":" again"`) ||
				!strings.Contains(events[2], "chatcmpl-A") || events[3] != "[DONE]" {
				t.Fatalf("%d, events %q: want the stream continued from the second engine as one", code, events)
			}
		}},
		{"client leaves mid-stream", func(t *testing.T, fr front) {
			eng, gone := holdingEngine(t)
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin"), nil, nil, nil)
			req, _ := http.NewRequest(http.MethodPost, f.base+"/v1/chat/completions",
				strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
			resp, err := f.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.Contains(line, "Hello") {
				t.Fatalf("first event %q %v", line, err)
			}
			resp.Body.Close() // the client goes
			waitOn(t, gone, "the engine's request ended after the client left the stream")
			testwait.For(t, 5*time.Second, "the request counted as the client's departure", func() bool {
				return requestsByCode(t, f.srv)["499"] == 1
			})
		}},
		{"every request ends once", func(t *testing.T, fr front) {
			gone := make(chan struct{}, 1)
			eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, b map[string]any) {
				if b["stream"] != true {
					okChat(w, r, b)
					return
				}
				play(w, helloA)
				if b["user"] == "leaves" {
					<-r.Context().Done()
					gone <- struct{}{}
					return
				}
				play(w, "[DONE]")
			})
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin")+`
[[keys]]
name = "k"
sha256 = "`+sha("sk-k")+`"
[limits]
max_streams_per_key = 1
`, nil, nil, nil)
			auth := []string{"Authorization", "Bearer sk-k"}
			stream := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
			for range 2 {
				if code, _, body := f.post(t.Context(), stream, auth...); code != http.StatusOK {
					t.Fatalf("stream: %d %s", code, body)
				}
				if code, _, body := f.post(t.Context(), chatHi, auth...); code != http.StatusOK {
					t.Fatalf("plain: %d %s", code, body)
				}
				if code, _, _ := f.post(t.Context(), `{"model":"nope"}`, auth...); code != http.StatusNotFound {
					t.Fatalf("unknown model: %d", code)
				}
			}
			ctx, cancel := context.WithCancel(t.Context())
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.base+"/v1/chat/completions",
				strings.NewReader(`{"model":"m","stream":true,"user":"leaves","messages":[{"role":"user","content":"hi"}]}`))
			req.Header.Set(auth[0], auth[1])
			resp, err := f.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = bufio.NewReader(resp.Body).ReadString('\n')
			cancel()
			resp.Body.Close()
			waitOn(t, gone, "the engine's request ended")
			// The stream's slot came back, so the one stream the key may
			// have open is free again.
			testwait.For(t, 5*time.Second, "the departed stream counted", func() bool { return requestsByCode(t, f.srv)["499"] == 1 })
			if code, _, body := f.post(t.Context(), stream, auth...); code != http.StatusOK {
				t.Fatalf("a stream after the others ended: %d %s", code, body)
			}
			// A request is counted when it settles, just after its answer's
			// last bytes are flushed (fasthttp's front: the ConnState hook),
			// so the client can have the whole stream a moment before.
			want := map[string]float64{"200": 5, "404": 2, "499": 1}
			testwait.For(t, 5*time.Second, "the last stream counted", func() bool { return requestsByCode(t, f.srv)["200"] >= want["200"] })
			if got := requestsByCode(t, f.srv); !maps.Equal(got, want) {
				t.Fatalf("requests counted %v, want %v", got, want)
			}
		}},
		{"drain deadline cuts an open stream", func(t *testing.T, fr front) {
			eng, gone := holdingEngine(t)
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin")+"\n[timeouts]\ndrain = \"200ms\"\n", nil, nil, nil)
			req, _ := http.NewRequest(http.MethodPost, f.base+"/v1/chat/completions",
				strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
			resp, err := f.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, "Hello") {
				t.Fatalf("first event %q %v", line, err)
			}
			f.stop() // SIGTERM: the stream has the drain deadline, then its connection closes
			rest, err := io.ReadAll(br)
			if err == nil || strings.Contains(string(rest), "[DONE]") {
				t.Fatalf("after the drain deadline the stream read %q, %v: want it cut", rest, err)
			}
			waitOn(t, gone, "the engine's request ended with the cut stream")
			select {
			case <-f.finished:
			case <-time.After(10 * time.Second):
				t.Fatal("Serve did not return after the drain deadline")
			}
		}},
		{"a panicking request ends and the router serves on", func(t *testing.T, fr front) {
			eng := newEngine(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) { play(w, helloA, "[DONE]") })
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin")+`
[[keys]]
name = "k"
sha256 = "`+sha("sk-k")+`"
[limits]
max_streams_per_key = 1
`, func(o *Options) { o.Transport = panicOn{"X-Panic", &http.Transport{}} }, nil, nil)
			stream := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
			if code, _, _ := f.post(t.Context(), stream, "Authorization", "Bearer sk-k", "X-Panic", "1"); code != -1 {
				t.Fatalf("the panicking request got %d, want its connection closed", code)
			}
			// The panicking stream gave its slot back: the key's one open
			// stream is free.
			if code, _, body := f.post(t.Context(), stream, "Authorization", "Bearer sk-k"); code != http.StatusOK {
				t.Fatalf("the next stream: %d %s", code, body)
			}
		}},
		{"TLS", func(t *testing.T, fr front) {
			ca := certstest.NewCA(t, "front")
			leaf := ca.Valid(t, "router")
			cert, err := tls.LoadX509KeyPair(leaf.Cert, leaf.Key)
			if err != nil {
				t.Fatal(err)
			}
			started, gone := make(chan struct{}, 1), make(chan struct{}, 1)
			eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, b map[string]any) {
				if b["user"] != "leaves" {
					okChat(w, r, b)
					return
				}
				started <- struct{}{}
				<-r.Context().Done()
				gone <- struct{}{}
			})
			client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin"), nil, func(ln net.Listener) net.Listener {
				return tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})
			}, client)
			if code, _, body := f.post(t.Context(), chatHi); code != http.StatusOK {
				t.Fatalf("over TLS: %d %s", code, body)
			}
			// A departure is seen below TLS too.
			ctx, cancel := context.WithCancel(t.Context())
			replied := make(chan int, 1)
			go func() {
				code, _, _ := f.post(ctx, `{"model":"m","user":"leaves","messages":[{"role":"user","content":"hi"}]}`)
				replied <- code
			}()
			waitOn(t, started, "the request reached the engine")
			cancel()
			waitOn(t, gone, "the engine's request ended after the TLS client left")
			<-replied
		}},
		{"client leaves while the engine works", func(t *testing.T, fr front) {
			started, gone := make(chan struct{}, 1), make(chan struct{}, 1)
			eng := newEngine(t, func(_ http.ResponseWriter, r *http.Request, _ map[string]any) {
				started <- struct{}{}
				<-r.Context().Done()
				gone <- struct{}{}
			})
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin"), nil, nil, nil)
			ctx, cancel := context.WithCancel(t.Context())
			replied := make(chan int, 1)
			go func() { code, _, _ := f.post(ctx, chatHi); replied <- code }()
			waitOn(t, started, "the request reached the engine")
			cancel()
			waitOn(t, gone, "the engine's request ended after the client left")
			if code := <-replied; code != -1 {
				t.Fatalf("the departed client got %d", code)
			}
		}},
		{"client leaves during the mesh hold", func(t *testing.T, fr front) {
			var hits atomic.Int64
			eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, b map[string]any) {
				hits.Add(1)
				okChat(w, r, b)
			})
			l := &holdingLearner{held: make(chan struct{}, 1), release: make(chan struct{})}
			f := fr.serveFront(t, providers("a", eng.URL)+route("precise_cache_aware"), func(o *Options) { o.Learn = l }, nil, nil)
			ctx, cancel := context.WithCancel(t.Context())
			replied := make(chan int, 1)
			go func() { code, _, _ := f.post(ctx, chatHi); replied <- code }()
			waitOn(t, l.held, "the request was held")
			cancel()
			<-replied
			testwait.For(t, 5*time.Second, "the held request ended with its client", func() bool {
				return requestsByCode(t, f.srv)["499"] == 1
			})
			// The next request's hold is released. Had the departed one
			// still been waiting, the release would send it on too.
			go func() { <-l.held; close(l.release) }()
			if code, _, body := f.post(t.Context(), chatHi); code != http.StatusOK {
				t.Fatalf("released request: %d %s", code, body)
			}
			if n := hits.Load(); n != 1 {
				t.Fatalf("the engine served %d requests, want 1: the held request whose client left reached it", n)
			}
		}},
		{"client leaves the admission queue", func(t *testing.T, fr front) {
			eng := newGatedEngine(t)
			f := fr.serveFront(t, providers("e1", eng.URL)+admissionTOML, nil, nil, nil)
			h := &harness{t: t, srv: f.srv}
			first := make(chan int, 1)
			go func() {
				code, _, _ := f.post(t.Context(), `{"model":"m","messages":[{"role":"user","content":"first"}]}`)
				first <- code
			}()
			testwait.For(t, 5*time.Second, "the first request on the engine", func() bool { return len(eng.order()) == 1 })
			ctx, cancel := context.WithCancel(t.Context())
			left := make(chan int, 1)
			go func() {
				code, _, _ := f.post(ctx, `{"model":"m","messages":[{"role":"user","content":"leaver"}]}`)
				left <- code
			}()
			testwait.For(t, 5*time.Second, "the second request queued", func() bool { return h.queueDepth("standard") == 1 })
			cancel()
			testwait.For(t, 5*time.Second, "the queue empty after its client left", func() bool { return h.queueDepth("standard") == 0 })
			<-left
			eng.release <- struct{}{}
			if code := <-first; code != http.StatusOK {
				t.Fatalf("first: %d", code)
			}
			if got := eng.order(); len(got) != 1 {
				t.Fatalf("the engine saw %v: the request whose client left reached it", got)
			}
		}},
	} {
		for _, fr := range fronts {
			t.Run(fr.name+"/"+tc.name, func(t *testing.T) { tc.run(t, fr) })
		}
	}
}

// panicOn is a transport that panics on a request carrying header, and
// otherwise sends it with next.
type panicOn struct {
	header string
	next   http.RoundTripper
}

func (p panicOn) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get(p.header) != "" {
		panic("the transport fell over")
	}
	return p.next.RoundTrip(r)
}

// requestsByCode sums rolter_requests_total by status code.
func requestsByCode(t *testing.T, s *Server) map[string]float64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "rolter_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "code" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// waitOn waits for one value on ch, failing the test after 10 s.
// holdingEngine streams its first event and holds the stream open until
// its request ends, then says so on gone.
func holdingEngine(t *testing.T) (*fakeEngine, <-chan struct{}) {
	gone := make(chan struct{}, 1)
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		play(w, helloA)
		<-r.Context().Done()
		gone <- struct{}{}
	})
	return eng, gone
}

func waitOn(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting: %s", what)
	}
}

// TestFastAnswerDroppedBeforeItsBody covers the end of a request whose
// body fasthttp never wrote (its header write failed, or it dropped the
// response): the engine's request ends and the request is counted once,
// as the client's departure.
func TestFastAnswerDroppedBeforeItsBody(t *testing.T) {
	eng, gone := holdingEngine(t)
	h := newHarness(t, providers("a", eng.URL)+route("round_robin"), nil)
	var req fasthttp.Request
	req.Header.SetMethod(http.MethodPost)
	req.SetRequestURI("/v1/chat/completions")
	req.SetBodyString(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	var ctx fasthttp.RequestCtx
	ctx.Init(&req, nil, nil)
	h.srv.serveFast(&ctx)
	if ctx.Response.StatusCode() != http.StatusOK || !ctx.Response.IsBodyStream() {
		t.Fatalf("status %d, body stream %v: want the stream's head committed and its body to copy",
			ctx.Response.StatusCode(), ctx.Response.IsBodyStream())
	}
	ctx.Response.Reset() // what fasthttp does with a response it will not write
	waitOn(t, gone, "the engine's request ended")
	ctx.Response.Reset() // a second drop ends nothing again
	if got := requestsByCode(t, h.srv); !maps.Equal(got, map[string]float64{"499": 1}) {
		t.Fatalf("requests counted %v, want one 499", got)
	}
}
