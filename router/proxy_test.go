package router

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/rolter/rolter/internal/testwait"
	"go.uber.org/goleak"
)

func TestStreamedChunksReachClientBeforeUpstreamFinishes(t *testing.T) {
	release := make(chan struct{})
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"model\":%q,\"choices\":[{\"delta\":{\"content\":\"one\"}}]}\n\n", body["model"])
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"two\"}}]}\n\n")
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":2,\"total_tokens\":4}}\n\n")
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	h := newHarness(t, providers("a", eng.URL)+`
[[routes]]
model = "llama"
targets = [{provider = "a", model = "meta/llama-8b"}]
`, nil)
	req, _ := http.NewRequest(http.MethodPost, h.api.URL+"/v1/chat/completions", strings.NewReader(
		`{"model":"llama","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`))
	resp, err := h.api.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content-type %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	// The upstream is still blocked on release: the first event got here
	// on its own.
	select {
	case <-release:
		t.Fatal("released too early")
	default:
	}
	if !strings.Contains(line, `"one"`) || !strings.Contains(line, `"meta/llama-8b"`) {
		t.Fatalf("first event %q: want content one from the upstream model", line)
	}
	close(release)
	rest := sseEvents(br)
	if len(rest) != 3 || rest[2] != "[DONE]" || !strings.Contains(rest[1], `"usage"`) {
		t.Fatalf("rest of stream: %q", rest)
	}
	so, _ := eng.lastBody()["stream_options"].(map[string]any)
	if so["include_usage"] != true {
		t.Errorf("stream_options.include_usage not preserved upstream: %v", eng.lastBody())
	}
}

func TestRetriesBeforeFirstByte(t *testing.T) {
	dead := newEngine(t, okChat)
	deadURL := dead.URL
	dead.Close() // connection refused from now on
	cases := []struct {
		name    string
		first   string
		failure string // target outcome label of the failed attempt
	}{
		{"503", "", "http_503"},
		{"502", "", "http_502"},
		{"408", "", "http_408"},
		{"connect error", deadURL, "connect_error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var bad *fakeEngine
			badURL := tc.first
			if badURL == "" {
				var code int
				fmt.Sscan(tc.name, &code)
				bad = newEngine(t, status(code))
				badURL = bad.URL
			}
			good := newEngine(t, okChat)
			h := newHarness(t, providers("bad", badURL, "good", good.URL)+`
[[routes]]
model = "m"
targets = [{provider = "bad"}, {provider = "good"}]
`, nil)
			code, _, body := h.chat("m")
			if code != 200 || !strings.Contains(body, `"hi"`) {
				t.Fatalf("got %d %s, want the good target's answer", code, body)
			}
			if good.hits.Load() != 1 {
				t.Errorf("good target hits %d", good.hits.Load())
			}
			if got := h.counter("retries", "m"); got != 1 {
				t.Errorf("rolter_retries_total %v, want 1", got)
			}
			if got := h.counter("targets", "bad", "bad/m", tc.failure); got != 1 {
				t.Errorf("bad target outcome %s counted %v", tc.failure, got)
			}
			if len(h.sleeps) != 1 || h.sleeps[0] < 0 || h.sleeps[0] > 100*time.Millisecond {
				t.Errorf("backoff sleeps %v, want one in [0, 100ms]", h.sleeps)
			}
		})
	}
	t.Run("400 is not retried", func(t *testing.T) {
		bad := newEngine(t, status(400))
		good := newEngine(t, okChat)
		h := newHarness(t, providers("bad", bad.URL, "good", good.URL)+`
[[routes]]
model = "m"
targets = [{provider = "bad"}, {provider = "good"}]
`, nil)
		if code, _, _ := h.chat("m"); code != 400 || good.hits.Load() != 0 {
			t.Fatalf("got %d and %d hits on the other target, want the 400 relayed", code, good.hits.Load())
		}
	})
}

func TestNoRetryAfterFirstByteEndsWithSSEError(t *testing.T) {
	broken := newEngine(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"partial\"}}]}\n\n")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the engine dies mid-stream
	})
	other := newEngine(t, okChat)
	h := newHarness(t, providers("broken", broken.URL, "other", other.URL)+`
[[routes]]
model = "m"
targets = [{provider = "broken"}, {provider = "other"}]
`, nil)
	code, _, body := h.post("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`)
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	events := sseEvents(strings.NewReader(body))
	if len(events) != 2 || !strings.Contains(events[0], "partial") {
		t.Fatalf("events %q", events)
	}
	if errorCode(t, events[1]) != "upstream_stream_error" {
		t.Errorf("last event %q", events[1])
	}
	if strings.Contains(body, "[DONE]") {
		t.Error("a failed stream must not end with [DONE]")
	}
	if other.hits.Load() != 0 {
		t.Errorf("retried after the first byte: other target hit %d times", other.hits.Load())
	}
	if got := h.counter("targets", "broken", "broken/m", "stream_error"); got != 1 {
		t.Errorf("stream_error outcome counted %v", got)
	}
}

func TestParkingHonoursRetryAfter(t *testing.T) {
	cases := []struct {
		retryAfter string
		parked     time.Duration
	}{
		{"10", 10 * time.Second},
		{"1", 5 * time.Second},      // clamped up to park_min
		{"9999", 300 * time.Second}, // clamped down to park_max
	}
	for _, tc := range cases {
		t.Run("Retry-After "+tc.retryAfter, func(t *testing.T) {
			var limited atomic.Bool
			limited.Store(true)
			eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, b map[string]any) {
				if limited.Load() {
					w.Header().Set("Retry-After", tc.retryAfter)
					status(429)(w, r, b)
					return
				}
				okChat(w, r, b)
			})
			h := newHarness(t, providers("a", eng.URL)+`
[[routes]]
model = "m"
targets = [{provider = "a"}]
`, nil)
			if code, _, _ := h.chat("m"); code != 429 {
				t.Fatalf("first request %d, want the upstream's 429 relayed", code)
			}
			limited.Store(false)
			h.clock.Advance(tc.parked - time.Second)
			code, hdr, body := h.chat("m")
			if code != 503 || errorCode(t, body) != "no_eligible_target" || !strings.Contains(body, "parked") {
				t.Fatalf("while parked: %d %s", code, body)
			}
			if hdr.Get("Retry-After") != "1" {
				t.Errorf("Retry-After %q, want 1 (one second of parking left)", hdr.Get("Retry-After"))
			}
			if eng.hits.Load() != 1 {
				t.Errorf("parked target was called: %d hits", eng.hits.Load())
			}
			h.clock.Advance(time.Second)
			if code, _, _ := h.chat("m"); code != 200 {
				t.Fatalf("after parking: %d", code)
			}
		})
	}
}

func TestBreakerOpensAfterFiveFailuresAndHalfOpens(t *testing.T) {
	mode := make(chan string, 1)
	mode <- "fail"
	hold := make(chan struct{})
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, b map[string]any) {
		m := <-mode
		mode <- m
		switch m {
		case "fail":
			status(500)(w, r, b)
		case "hold":
			<-hold
			okChat(w, r, b)
		default:
			okChat(w, r, b)
		}
	})
	set := func(m string) { <-mode; mode <- m }
	h := newHarness(t, providers("a", eng.URL)+`
[[routes]]
model = "m"
targets = [{provider = "a"}]
[retry]
attempts = 0
`, nil)
	for i := range 5 {
		if code, _, _ := h.chat("m"); code != 500 {
			t.Fatalf("failure %d: status %d", i+1, code)
		}
	}
	code, _, body := h.chat("m")
	if code != 503 || !strings.Contains(body, "breaker_open") || eng.hits.Load() != 5 {
		t.Fatalf("after 5 failures: %d %s (hits %d), want 503 breaker_open", code, body, eng.hits.Load())
	}
	h.clock.Advance(29 * time.Second)
	if code, _, _ := h.chat("m"); code != 503 {
		t.Fatalf("breaker closed early: %d", code)
	}
	h.clock.Advance(time.Second)
	// Half-open: a failing probe reopens it for another 30 s.
	if code, _, _ := h.chat("m"); code != 500 || eng.hits.Load() != 6 {
		t.Fatalf("probe: %d hits %d", code, eng.hits.Load())
	}
	if code, _, _ := h.chat("m"); code != 503 {
		t.Fatalf("failed probe must reopen the breaker: %d", code)
	}
	h.clock.Advance(30 * time.Second)
	// Half-open again: exactly one probe passes while it is in flight.
	set("hold")
	probe := make(chan int)
	go func() { c, _, _ := h.chat("m"); probe <- c }()
	testwait.For(t, 5*time.Second, "probe reaches the upstream", func() bool { return eng.hits.Load() == 7 })
	if code, _, body := h.chat("m"); code != 503 || !strings.Contains(body, "half_open") {
		t.Fatalf("second request during the probe: %d %s", code, body)
	}
	close(hold)
	if c := <-probe; c != 200 {
		t.Fatalf("probe status %d", c)
	}
	set("ok")
	for range 3 {
		if code, _, _ := h.chat("m"); code != 200 {
			t.Fatalf("breaker should be closed after a good probe: %d", code)
		}
	}
}

func TestRetryBudgetBoundsAllFailingFleet(t *testing.T) {
	var engines []*fakeEngine
	var toml string
	for i := range 3 {
		e := newEngine(t, status(503))
		engines = append(engines, e)
		toml += providers(fmt.Sprintf("e%d", i), e.URL)
	}
	h := newHarness(t, toml+`
[[routes]]
model = "m"
targets = [{provider = "e0"}, {provider = "e1"}, {provider = "e2"}]
[breaker]
failures = 1000
`, nil)
	const requests = 60
	for range requests {
		if code, _, _ := h.chat("m"); code != 503 {
			t.Fatalf("status %d", code)
		}
	}
	var attempts int64
	for _, e := range engines {
		attempts += e.hits.Load()
	}
	if limit := int64(1.2*requests) + maxRetryBurst; attempts > limit {
		t.Fatalf("%d upstream attempts for %d requests, budget allows %d", attempts, requests, limit)
	}
	if attempts <= requests {
		t.Fatalf("%d attempts: the budget should still allow some retries", attempts)
	}
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	// fasthttp's pool cleaner (one per engine host, not per request)
	// outlives the idle connections by up to its sleep.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"))
	canceled := make(chan struct{})
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			close(canceled)
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
		strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	resp, err := h.api.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	select {
	case <-canceled:
	case <-time.After(5 * time.Second):
		t.Fatal("upstream request was not cancelled after the client left")
	}
	testwait.For(t, 5*time.Second, "in-flight back to zero", func() bool { return h.srv.tracker.Target("a/m").InFlight() == 0 })
	testwait.For(t, 5*time.Second, "canceled outcome", func() bool { return h.counter("targets", "a", "a/m", "canceled") == 1 })
	h.api.Client().CloseIdleConnections()
	h.api.Close()
	h.srv.transport.CloseIdleConnections()
	eng.Close()
}

func TestBadInputGetsAClearAnswer(t *testing.T) {
	eng := newEngine(t, okChat)
	h := newHarness(t, providers("a", eng.URL)+`
[[routes]]
model = "m"
targets = [{provider = "a"}]
`, nil)
	cases := []struct {
		name, path, body string
		status           int
		code             string
	}{
		{"malformed JSON", "/v1/chat/completions", `{"model":"m",`, 400, "invalid_request"},
		{"invalid UTF-8", "/v1/chat/completions", "{\"model\":\"m\",\"messages\":[{\"content\":\"\xff\"}]}", 400, "invalid_request"},
		{"not an object", "/v1/chat/completions", `[1,2]`, 400, "invalid_request"},
		{"no model", "/v1/chat/completions", `{"messages":[]}`, 400, "invalid_request"},
		{"unknown model", "/v1/chat/completions", `{"model":"nope","messages":[]}`, 404, "model_not_found"},
		{"unknown group model pin", "/v1/completions", `{"model":"zzz/x","prompt":"a"}`, 404, "model_not_found"},
		{"unknown path", "/v1/images", `{}`, 404, "not_found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, body := h.post(tc.path, tc.body)
			if code != tc.status || errorCode(t, body) != tc.code {
				t.Fatalf("got %d %s, want %d %s", code, body, tc.status, tc.code)
			}
		})
	}
	if eng.hits.Load() != 0 {
		t.Errorf("bad input reached the upstream %d times", eng.hits.Load())
	}
	resp, err := h.api.Client().Get(h.api.URL + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 405 || errorCode(t, string(b)) != "method_not_allowed" {
		t.Errorf("GET on a POST endpoint: %d %s", resp.StatusCode, b)
	}
}

func TestFirstByteTimeoutIsRetried(t *testing.T) {
	silent := newEngine(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		<-r.Context().Done() // never answers; the router gives up first
	})
	good := newEngine(t, okChat)
	h := newHarness(t, providers("silent", silent.URL, "good", good.URL)+`
[[routes]]
model = "m"
targets = [{provider = "silent"}, {provider = "good"}]
[timeouts]
first_byte = "300ms"
`, nil)
	if code, _, body := h.chat("m"); code != 200 || good.hits.Load() != 1 {
		t.Fatalf("%d %s", code, body)
	}
	if got := h.counter("targets", "silent", "silent/m", "connect_error"); got != 1 {
		t.Fatalf("silent target outcome counted %v", got)
	}
}

func TestBrokenJSONBodyAbortsTheConnection(t *testing.T) {
	eng := newEngine(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "1000")
		fmt.Fprint(w, `{"id":"c1","choices":[`)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	h := newHarness(t, providers("a", eng.URL)+`
[[routes]]
model = "m"
targets = [{provider = "a"}]
`, nil)
	resp, err := h.api.Client().Post(h.api.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
	if err == nil {
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
	}
	if err == nil {
		t.Fatal("a truncated JSON body reached the client as if it were whole")
	}
}

// With two targets, one failing every request, no client sees its error:
// the retry budget holds the [breaker] failures retries the breaker needs
// to open (finding A), a retry does not move the rotation so only every
// other request pays a failed attempt (finding B), and the retry after the
// failed half-open probe is not charged to the budget.
func TestOneOfTwoFailingNeverReachesClients(t *testing.T) {
	// budget 0: no deposits, the burst alone pays for the breaker's 5
	// failures, and the half-open probe's retry must be free.
	for _, budget := range []string{"", "[retry]\nbudget = 0.0\n"} {
		t.Run("budget "+map[bool]string{true: "default", false: "0"}[budget == ""], func(t *testing.T) {
			bad := newEngine(t, status(503))
			good := newEngine(t, okChat)
			h := newHarness(t, providers("bad", bad.URL, "good", good.URL)+`
[[routes]]
model = "m"
strategy = "round_robin"
targets = [{provider = "bad"}, {provider = "good"}]
`+budget, nil)
			for i := range 45 {
				if code, _, body := h.chat("m"); code != 200 {
					t.Fatalf("request %d: %d %s, want every request served", i+1, code, body)
				}
				if i == 7 {
					if got := h.counter("retries", "m"); got != 4 {
						t.Errorf("%v retries over the first 8 requests, want 4 (every other request starts on the failing target)", got)
					}
				}
				h.clock.Advance(time.Second)
			}
			// 5 failures open the breaker (request 9, t = 8 s); it half-opens
			// 30 s later, the probe fails and is retried on the good target.
			if got := bad.hits.Load(); got != 6 {
				t.Errorf("the failing target saw %d attempts, want 5 + 1 half-open probe", got)
			}
		})
	}
}

// A 429 with Retry-After parks the target — the provider/model pair the
// attempt used — not the provider: the provider's other models keep
// serving, on this route and others, and the parked target's 503 and
// metric say why it is parked and until when.
func TestParkingIsPerTarget(t *testing.T) {
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, b map[string]any) {
		if b["model"] == "x" {
			w.Header().Set("Retry-After", "10")
			status(429)(w, r, b)
			return
		}
		okChat(w, r, b)
	})
	h := newHarness(t, providers("a", eng.URL)+`
[[routes]]
model = "only-x"
targets = [{provider = "a", model = "x"}]

[[routes]]
model = "only-y"
targets = [{provider = "a", model = "y"}]

[[routes]]
model = "both"
strategy = "round_robin"
targets = [{provider = "a", model = "x"}, {provider = "a", model = "y"}]

[retry]
attempts = 0
`, nil)
	if code, _, _ := h.chat("only-x"); code != 429 {
		t.Fatalf("first request %d, want the upstream's 429 relayed", code)
	}
	start := h.clock.Now()
	h.clock.Advance(2 * time.Second)
	code, _, body := h.chat("only-x")
	until := start.Add(10 * time.Second).UTC().Format(time.RFC3339)
	if code != 503 || errorCode(t, body) != "no_eligible_target" ||
		!strings.Contains(body, "a/x parked until "+until+" (HTTP 429 with Retry-After 10)") {
		t.Fatalf("while parked: %d %s", code, body)
	}
	for range 4 {
		if code, _, body := h.chat("only-y"); code != 200 {
			t.Fatalf("the provider's other model was parked too: %d %s", code, body)
		}
		if code, _, body := h.chat("both"); code != 200 || eng.lastBody()["model"] != "y" {
			t.Fatalf("route over both: %d %s, model %v", code, body, eng.lastBody()["model"])
		}
	}
	var m dto.Metric
	if err := h.srv.metrics.parkedUntil.WithLabelValues("a", "a/x").Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := int64(m.GetGauge().GetValue()); got != start.Add(10*time.Second).Unix() {
		t.Errorf("rolter_target_parked_until_seconds = %d, want %d", got, start.Add(10*time.Second).Unix())
	}
	pt := h.srv.ParkedTargets()
	if len(pt) != 1 || pt[0].Target != "a/x" || !pt[0].Until.Equal(start.Add(10*time.Second)) ||
		pt[0].Reason != "HTTP 429 with Retry-After 10" {
		t.Errorf("ParkedTargets = %+v", pt)
	}
	h.clock.Advance(8 * time.Second)
	if pt := h.srv.ParkedTargets(); len(pt) != 0 {
		t.Errorf("after the parking ended: %+v", pt)
	}
}

// A passthrough group member forwards the caller's model, so the pair an
// attempt used is provider/requested model: a 429 for one adapter parks
// that adapter on the member, not the member.
func TestParkingOnPassthroughMembersIsPerRequestedModel(t *testing.T) {
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, b map[string]any) {
		if b["model"] == "lora-x" {
			w.Header().Set("Retry-After", "20")
			status(429)(w, r, b)
			return
		}
		okChat(w, r, b)
	})
	h := newHarness(t, providers("a", eng.URL)+`
[[provider_groups]]
name = "Fleet"
slug = "fleet"
members = [{provider = "a"}]

[retry]
attempts = 0
`, nil)
	if code, _, _ := h.chat("fleet/lora-x"); code != 429 {
		t.Fatalf("first request %d, want the 429 relayed", code)
	}
	code, _, body := h.chat("fleet/lora-x")
	if code != 503 || !strings.Contains(body, "a/lora-x parked until") {
		t.Errorf("parked adapter: %d %s", code, body)
	}
	if code, _, body := h.chat("fleet/lora-y"); code != 200 {
		t.Errorf("another adapter on the same member: %d %s", code, body)
	}
	if pt := h.srv.ParkedTargets(); len(pt) != 1 || pt[0].Target != "a/*" || pt[0].Model != "lora-x" {
		t.Errorf("ParkedTargets = %+v, want a/* parked for lora-x only", pt)
	}
}

// [timeouts] request bounds the whole answer, not only its first byte: a
// stream still open at the deadline is ended, the engine's request with it.
func TestRequestTimeoutEndsAnOpenStream(t *testing.T) {
	gone := make(chan struct{}, 1)
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		gone <- struct{}{}
	})
	h := newHarness(t, providers("a", eng.URL)+`
[[routes]]
model = "m"
targets = [{provider = "a"}]
[timeouts]
first_byte = "5s"
request = "300ms"
`, nil)
	resp, err := h.api.Client().Post(h.api.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := sseEvents(resp.Body) // returns once the router ends the stream
	waitOn(t, gone, "the engine's request ended at the deadline")
	if len(events) != 2 || !strings.Contains(events[1], "upstream_stream_error") {
		t.Fatalf("events %q: want the first token, then the error event", events)
	}
}
