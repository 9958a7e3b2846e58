package router

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/rolter/rolter/internal/testwait"
	"github.com/rolter/rolter/router/admission"
)

// gatedEngine answers each chat request once the test lets it through,
// recording the order in which requests arrived (by message content).
type gatedEngine struct {
	*fakeEngine
	release chan struct{}
	mu      sync.Mutex
	arrived []string
}

func newGatedEngine(t *testing.T) *gatedEngine {
	g := &gatedEngine{release: make(chan struct{}, 64)}
	g.fakeEngine = newEngine(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		if body == nil {
			return // health
		}
		msgs, _ := body["messages"].([]any)
		m, _ := msgs[0].(map[string]any)
		g.mu.Lock()
		g.arrived = append(g.arrived, m["content"].(string))
		g.mu.Unlock()
		select {
		case <-g.release:
		case <-r.Context().Done():
			return
		}
		okChat(w, r, body)
	})
	return g
}

func (g *gatedEngine) order() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.arrived...)
}

type labelledReply struct {
	label  string
	status int
	header http.Header
	body   string
}

// send posts a chat request labelled label with the given priority in the
// background; its reply goes to out.
func (h *harness) send(ctx context.Context, label, priority string, out chan<- labelledReply, hdr ...string) {
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.api.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":`+quote(label)+`}]}`))
		req.Header.Set("Content-Type", "application/json")
		if priority != "" {
			req.Header.Set(admission.Header, priority)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := h.api.Client().Do(req)
		if err != nil {
			out <- labelledReply{label: label, status: -1}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out <- labelledReply{label, resp.StatusCode, resp.Header, string(b)}
	}()
}

func (h *harness) queueDepth(band string) float64 {
	var m dto.Metric
	_ = h.srv.admissionMetrics.depth.WithLabelValues("m", band).Write(&m)
	return m.GetGauge().GetValue()
}

func (h *harness) admissions(band, outcome string) float64 {
	var m dto.Metric
	_ = h.srv.admissionMetrics.outcome.WithLabelValues("m", band, outcome).Write(&m)
	return m.GetCounter().GetValue()
}

const admissionTOML = `
[[routes]]
model = "m"
strategy = "power_of_two"
targets = [{ provider = "e1", model = "m" }]

[admission]
enabled = true
max_engine_load = 1
retry_after = "3s"
[admission.sheddable]
max_queue = 2
ttl = "10s"
`

func TestAdmissionQueuesByBandWhenSaturated(t *testing.T) {
	eng := newGatedEngine(t)
	h := newHarness(t, providers("e1", eng.URL)+admissionTOML, nil)
	out := make(chan labelledReply, 16)
	ctx := t.Context()

	h.send(ctx, "first", "", out)
	testwait.For(t, 5*time.Second, "first request on the engine", func() bool { return len(eng.order()) == 1 })
	// The engine holds one request: the pool is saturated, so these wait
	// in the router, in this order.
	h.send(ctx, "shed-1", "sheddable", out)
	testwait.For(t, 5*time.Second, "shed-1 queued", func() bool { return h.queueDepth("sheddable") == 1 })
	h.send(ctx, "shed-2", "sheddable", out)
	testwait.For(t, 5*time.Second, "shed-2 queued", func() bool { return h.queueDepth("sheddable") == 2 })
	h.send(ctx, "std-1", "standard", out)
	h.send(ctx, "crit-1", "critical", out)
	testwait.For(t, 5*time.Second, "standard and critical queued", func() bool {
		return h.queueDepth("standard") == 1 && h.queueDepth("critical") == 1
	})

	// The sheddable band is full: 429, Retry-After, OpenAI shape, and the
	// engine never saw it.
	h.send(ctx, "shed-3", "sheddable", out)
	r := <-out
	if r.label != "shed-3" || r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "3" {
		t.Fatalf("full band: %s got %d Retry-After %q, want shed-3 429 3", r.label, r.status, r.header.Get("Retry-After"))
	}
	if code := errorCode(t, r.body); code != "queue_full" {
		t.Fatalf("code %q, want queue_full", code)
	}

	// One slot at a time: the queue drains critical, standard, then the
	// sheddable ones in arrival order.
	for i := range 5 {
		eng.release <- struct{}{}
		if r := <-out; r.status != http.StatusOK {
			t.Fatalf("release %d: %s got %d %s", i, r.label, r.status, r.body)
		}
	}
	want := "first crit-1 std-1 shed-1 shed-2"
	if got := strings.Join(eng.order(), " "); got != want {
		t.Fatalf("engine saw %q, want %q", got, want)
	}
	if n := h.admissions("sheddable", "rejected_full"); n != 1 {
		t.Fatalf("rejected_full %v, want 1", n)
	}
	if n := h.admissions("critical", "admitted"); n != 1 {
		t.Fatalf("critical admitted %v, want 1", n)
	}
}

func TestAdmissionClientLeavesQueue(t *testing.T) {
	eng := newGatedEngine(t)
	h := newHarness(t, providers("e1", eng.URL)+admissionTOML, nil)
	out := make(chan labelledReply, 4)
	h.send(t.Context(), "first", "", out)
	testwait.For(t, 5*time.Second, "first request on the engine", func() bool { return len(eng.order()) == 1 })
	ctx, cancel := context.WithCancel(t.Context())
	h.send(ctx, "leaver", "", out)
	testwait.For(t, 5*time.Second, "queued", func() bool { return h.queueDepth("standard") == 1 })
	cancel()
	testwait.For(t, 5*time.Second, "the queue empty after the client left", func() bool { return h.queueDepth("standard") == 0 })
	if n := h.admissions("standard", "cancelled"); n != 1 {
		t.Fatalf("cancelled %v, want 1", n)
	}
	eng.release <- struct{}{}
	if r := <-out; r.label == "first" && r.status != http.StatusOK {
		t.Fatalf("first: %d", r.status)
	}
	if got := eng.order(); len(got) != 1 {
		t.Fatalf("engine saw %v: the cancelled request reached it", got)
	}
}

func TestAdmissionExpiresWith503(t *testing.T) {
	eng := newGatedEngine(t)
	h := newHarness(t, providers("e1", eng.URL)+admissionTOML, nil)
	out := make(chan labelledReply, 4)
	h.send(t.Context(), "first", "", out)
	testwait.For(t, 5*time.Second, "first request on the engine", func() bool { return len(eng.order()) == 1 })
	h.send(t.Context(), "late", "sheddable", out)
	testwait.For(t, 5*time.Second, "queued", func() bool { return h.queueDepth("sheddable") == 1 })
	h.clock.Advance(10 * time.Second) // the sheddable TTL
	r := <-out
	if r.label != "late" || r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "3" {
		t.Fatalf("%s got %d Retry-After %q, want late 503 3", r.label, r.status, r.header.Get("Retry-After"))
	}
	if code := errorCode(t, r.body); code != "queue_timeout" {
		t.Fatalf("code %q, want queue_timeout", code)
	}
	eng.release <- struct{}{}
	<-out
}

func TestAdmissionKeyCapsBand(t *testing.T) {
	env := map[string]string{"K1": "secret-one", "K2": "secret-two"}
	eng := newGatedEngine(t)
	h := newHarness(t, providers("e1", eng.URL)+admissionTOML+`
[[keys]]
name = "batch"
secret_env = "K1"
max_priority = "sheddable"

[[keys]]
name = "interactive"
secret_env = "K2"
max_priority = "critical"
`, env)
	out := make(chan labelledReply, 8)
	ctx := t.Context()
	batch := []string{"Authorization", "Bearer secret-one"}
	inter := []string{"Authorization", "Bearer secret-two"}
	h.send(ctx, "first", "", out, inter...)
	testwait.For(t, 5*time.Second, "first request on the engine", func() bool { return len(eng.order()) == 1 })
	h.send(ctx, "batch-crit", "critical", out, batch...)
	testwait.For(t, 5*time.Second, "batch queued as sheddable", func() bool { return h.queueDepth("sheddable") == 1 })
	h.send(ctx, "inter-std", "", out, inter...)
	testwait.For(t, 5*time.Second, "interactive queued as standard", func() bool { return h.queueDepth("standard") == 1 })
	for range 3 {
		eng.release <- struct{}{}
		<-out
	}
	if got := strings.Join(eng.order(), " "); got != "first inter-std batch-crit" {
		t.Fatalf("engine saw %q: the batch key's critical should be capped to sheddable", got)
	}
}

func TestAdmissionOffForwardsEverything(t *testing.T) {
	eng := newGatedEngine(t)
	h := newHarness(t, providers("e1", eng.URL)+strings.Replace(admissionTOML, "enabled = true", "enabled = false", 1), nil)
	out := make(chan labelledReply, 8)
	for _, l := range []string{"a", "b", "c"} {
		h.send(t.Context(), l, "sheddable", out)
	}
	testwait.For(t, 5*time.Second, "all three on the engine", func() bool { return len(eng.order()) == 3 })
	for range 3 {
		eng.release <- struct{}{}
		<-out
	}
}

// refusingTransport refuses every connection until up is set, then
// forwards.
type refusingTransport struct {
	up   atomic.Bool
	next http.RoundTripper
}

func (r *refusingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !r.up.Load() {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	return r.next.RoundTrip(req)
}

// With every engine refusing connections, a request waits (up to its TTL)
// instead of failing, and goes out once an engine answers.
func TestAdmissionWaitsWhileNoTargetAnswers(t *testing.T) {
	eng := newEngine(t, okChat)
	tr := &refusingTransport{next: eng.Client().Transport}
	h := newHarnessWith(t, providers("e1", eng.URL)+admissionTOML+"\n[breaker]\nfailures = 2\nopen = \"5s\"\n", nil,
		func(o *Options) { o.Transport = tr })
	out := make(chan labelledReply, 1)
	h.send(t.Context(), "patient", "", out)
	testwait.For(t, 5*time.Second, "the request queued after its attempts were refused", func() bool { return h.queueDepth("standard") == 1 })
	select {
	case r := <-out:
		t.Fatalf("answered %d %s while no engine answers", r.status, r.body)
	default:
	}
	tr.up.Store(true)
	h.clock.Advance(5 * time.Second) // the breaker's open period ends: one probe may go
	r := <-out
	if r.status != http.StatusOK {
		t.Fatalf("status %d %s, want 200 once the engine answers", r.status, r.body)
	}
}

// The admin API's view of this router's admission: queue depth per pool
// and band, and each engine's saturation.
func TestAdmissionStateReportsQueueAndSaturation(t *testing.T) {
	eng := newGatedEngine(t)
	h := newHarness(t, providers("e1", eng.URL)+admissionTOML, nil)
	out := make(chan labelledReply, 4)
	h.send(t.Context(), "first", "", out)
	testwait.For(t, 5*time.Second, "first request on the engine", func() bool { return len(eng.order()) == 1 })
	h.send(t.Context(), "waits", "critical", out)
	testwait.For(t, 5*time.Second, "queued", func() bool { return h.queueDepth("critical") == 1 })
	queues, sat, on := h.srv.AdmissionState()
	if !on || queues["m"][admission.Critical] != 1 || queues["m"][admission.Standard] != 0 {
		t.Fatalf("queues %v on %v", queues, on)
	}
	if sat["e1/m"] != 1 {
		t.Fatalf("saturation %v, want e1/m at 1 (load 1 of max_engine_load 1)", sat)
	}
	for range 2 {
		eng.release <- struct{}{}
		<-out
	}
}

// A lower band fills the engines only up to its share of the thresholds,
// so a critical request arriving while sheddable ones wait goes to the
// engine at once, ahead of them.
func TestAdmissionCriticalPassesWaitingLowerBands(t *testing.T) {
	eng := newGatedEngine(t)
	h := newHarness(t, providers("e1", eng.URL)+`
[[routes]]
model = "m"
strategy = "power_of_two"
targets = [{ provider = "e1", model = "m" }]

[admission]
enabled = true
max_engine_load = 4
[admission.sheddable]
fill = 0.5
`, nil)
	out := make(chan labelledReply, 8)
	ctx := t.Context()
	h.send(ctx, "shed-1", "sheddable", out)
	testwait.For(t, 5*time.Second, "shed-1 on the engine", func() bool { return len(eng.order()) == 1 })
	h.send(ctx, "shed-2", "sheddable", out)
	testwait.For(t, 5*time.Second, "shed-2 on the engine", func() bool { return len(eng.order()) == 2 })
	// The engine holds 2 of 4: full for sheddable (fill 0.5), not for
	// critical.
	h.send(ctx, "shed-3", "sheddable", out)
	testwait.For(t, 5*time.Second, "shed-3 queued", func() bool { return h.queueDepth("sheddable") == 1 })
	h.send(ctx, "crit-1", "critical", out)
	testwait.For(t, 5*time.Second, "crit-1 on the engine", func() bool { return len(eng.order()) == 3 })
	// shed-1 and shed-2 were sent together, so either may reach the engine
	// first; crit-1 must come third, ahead of shed-3.
	if got := eng.order(); got[2] != "crit-1" || !slices.Contains(got[:2], "shed-1") || !slices.Contains(got[:2], "shed-2") {
		t.Fatalf("engine saw %q, want the critical request ahead of the waiting sheddable one", strings.Join(got, " "))
	}
	if d := h.queueDepth("sheddable"); d != 1 {
		t.Fatalf("sheddable queue %v, want shed-3 still waiting", d)
	}
	if n := h.admissions("critical", "admitted"); n != 1 {
		t.Fatalf("critical admitted %v, want 1", n)
	}
	for range 4 {
		eng.release <- struct{}{}
		if r := <-out; r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", r.label, r.status, r.body)
		}
	}
}

// A request the gate admits goes to an engine with room, even when the
// route's strategy would pick a full one.
func TestAdmissionPickKeepsToEnginesWithRoom(t *testing.T) {
	a, b := newGatedEngine(t), newGatedEngine(t)
	h := newHarness(t, providers("a", a.URL, "b", b.URL)+`
[[routes]]
model = "m"
strategy = "round_robin"
targets = [{ provider = "a", model = "m" }, { provider = "b", model = "m" }]

[admission]
enabled = true
max_engine_load = 1
max_queued_prefill_tokens = 0
`, nil)
	out := make(chan labelledReply, 8)
	ctx := t.Context()
	h.send(ctx, "r1", "critical", out)
	testwait.For(t, 5*time.Second, "r1 on an engine", func() bool { return len(a.order())+len(b.order()) == 1 })
	full, free := a, b
	if len(b.order()) == 1 {
		full, free = b, a
	}
	// Round-robin's next turn is the free engine; take it, then free it.
	h.send(ctx, "r2", "critical", out)
	testwait.For(t, 5*time.Second, "r2 on the other engine", func() bool { return len(free.order()) == 1 })
	free.release <- struct{}{}
	if r := <-out; r.label != "r2" || r.status != http.StatusOK {
		t.Fatalf("%s: %d", r.label, r.status)
	}
	// Round-robin's turn is the full engine now; admission sends r3 to
	// the one with room.
	h.send(ctx, "r3", "critical", out)
	testwait.For(t, 5*time.Second, "r3 on an engine", func() bool { return len(a.order())+len(b.order()) == 3 })
	if got := full.order(); len(got) != 1 {
		t.Fatalf("the full engine saw %v, want r1 alone", got)
	}
	full.release <- struct{}{}
	free.release <- struct{}{}
	<-out
	<-out
}
