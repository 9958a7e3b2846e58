package router

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
)

// healthEngine answers /v1/models and /health with the codes held in
// models and health, and chat requests with okChat.
func healthEngine(t *testing.T, models, health *atomic.Int64) *fakeEngine {
	return newEngine(t, func(w http.ResponseWriter, r *http.Request, b map[string]any) {
		switch r.URL.Path {
		case "/v1/models":
			w.WriteHeader(int(models.Load()))
		case "/health":
			w.WriteHeader(int(health.Load()))
		default:
			okChat(w, r, b)
		}
	})
}

const healthRoute = `
[[routes]]
model = "m"
targets = [{provider = "a"}]
[health]
enabled = true
`

func TestHealthDownAfterThreeFailuresUpAfterTwo(t *testing.T) {
	var models, health atomic.Int64
	models.Store(500)
	health.Store(500)
	eng := healthEngine(t, &models, &health)
	h := newHarness(t, providers("a", eng.URL)+healthRoute, nil)
	p := h.srv.snap.Load().providers["a"]
	ctx := context.Background()
	steps := []struct {
		probeOK bool
		serves  bool
	}{
		{false, true}, {false, true}, {false, false}, // down after the 3rd failure
		{true, false}, {true, true}, // up after the 2nd success
		{false, true}, {true, true}, {false, true}, {false, true}, // failures must be consecutive
	}
	for i, st := range steps {
		code := int64(500)
		if st.probeOK {
			code = 200
		}
		models.Store(code)
		health.Store(code)
		h.srv.probe(ctx, p)
		status, _, body := h.chat("m")
		if st.serves != (status == 200) {
			t.Fatalf("step %d: status %d %s, want serving=%v", i, status, body, st.serves)
		}
		if !st.serves && !strings.Contains(body, "unhealthy") {
			t.Fatalf("step %d: 503 should say why: %s", i, body)
		}
	}
}

func TestHealthFallsBackToHealthEndpoint(t *testing.T) {
	var models, health atomic.Int64
	models.Store(404)
	health.Store(200)
	eng := healthEngine(t, &models, &health)
	h := newHarness(t, providers("a", eng.URL)+healthRoute, nil)
	p := h.srv.snap.Load().providers["a"]
	for range 5 {
		h.srv.probe(context.Background(), p)
	}
	if !p.up.healthy.Load() {
		t.Fatal("an engine answering /health must stay healthy")
	}
}

func TestHealthLoopRunsPerProviderAndStops(t *testing.T) {
	var models, health atomic.Int64
	models.Store(503)
	health.Store(503)
	eng := healthEngine(t, &models, &health)
	ticks := make(chan time.Time)
	var mu sync.Mutex
	var intervals []time.Duration
	h := newHarnessWith(t, providers("a", eng.URL)+healthRoute, nil, func(o *Options) {
		o.NewTicker = func(d time.Duration) (<-chan time.Time, func()) {
			mu.Lock()
			intervals = append(intervals, d)
			mu.Unlock()
			return ticks, func() {}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.srv.Run(ctx); close(done) }()
	for range 3 {
		ticks <- time.Time{}
	}
	up := h.srv.snap.Load().providers["a"].up
	testwait.For(t, 5*time.Second, "provider marked down", func() bool { return !up.healthy.Load() })
	// 10 s while healthy, then the 2 s recovery cadence once it is down.
	testwait.For(t, 5*time.Second, "recovery cadence", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(intervals) == 2
	})
	mu.Lock()
	if intervals[0] != 10*time.Second || intervals[1] != 2*time.Second {
		t.Errorf("probe intervals %v, want [10s 2s] (the defaults)", intervals)
	}
	mu.Unlock()
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

// An engine that fails requests but answers its health checks: once the
// breaker is open, a successful health check ends the open period at once,
// so the next request probes the engine instead of waiting [breaker] open
// (30 s) for it (finding D).
func TestHealthCheckEndsOpenBreaker(t *testing.T) {
	var models, health, chat atomic.Int64
	models.Store(200)
	health.Store(200)
	chat.Store(500)
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, b map[string]any) {
		switch r.URL.Path {
		case "/v1/models":
			w.WriteHeader(int(models.Load()))
		case "/health":
			w.WriteHeader(int(health.Load()))
		default:
			if c := int(chat.Load()); c != 200 {
				status(c)(w, r, b)
				return
			}
			okChat(w, r, b)
		}
	})
	h := newHarness(t, providers("a", eng.URL)+healthRoute+"[retry]\nattempts = 0\n", nil)
	p := h.srv.snap.Load().providers["a"]
	for range 5 {
		h.chat("m")
	}
	if code, _, body := h.chat("m"); code != 503 || !strings.Contains(body, "breaker_open") {
		t.Fatalf("after 5 failures: %d %s, want the breaker open", code, body)
	}
	chat.Store(200) // the engine recovers; no time passes
	h.srv.probe(context.Background(), p)
	if code, _, body := h.chat("m"); code != 200 {
		t.Fatalf("after a successful health check: %d %s, want the half-open probe to pass", code, body)
	}
	if code, _, _ := h.chat("m"); code != 200 {
		t.Fatalf("breaker not closed after its probe succeeded: %d", code)
	}
	// A failing health check leaves an open breaker open.
	chat.Store(500)
	for range 5 {
		h.chat("m")
	}
	models.Store(500)
	health.Store(500)
	h.srv.probe(context.Background(), p)
	if code, _, body := h.chat("m"); code != 503 || !strings.Contains(body, "breaker_open") {
		t.Fatalf("after a failed health check: %d %s, want the breaker still open", code, body)
	}
}

// A breaker that opens wakes its provider's health loop: the engine is
// probed at once and then every recovery_interval, by the router rather
// than by client requests (finding C).
func TestOpenBreakerIsProbedInBackground(t *testing.T) {
	var probes atomic.Int64
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, b map[string]any) {
		if r.Method == http.MethodGet {
			probes.Add(1)
			w.WriteHeader(200)
			return
		}
		status(503)(w, r, b)
	})
	var mu sync.Mutex
	var intervals []time.Duration
	never := make(chan time.Time) // no tick: every probe below is a wake-up
	h := newHarnessWith(t, providers("a", eng.URL)+healthRoute+"[retry]\nattempts = 0\n", nil, func(o *Options) {
		o.NewTicker = func(d time.Duration) (<-chan time.Time, func()) {
			mu.Lock()
			intervals = append(intervals, d)
			mu.Unlock()
			return never, func() {}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.srv.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	testwait.For(t, 5*time.Second, "health loop started", func() bool { mu.Lock(); defer mu.Unlock(); return len(intervals) == 1 })
	for range 5 {
		if code, _, _ := h.chat("m"); code != 503 {
			t.Fatalf("status %d", code)
		}
	}
	testwait.For(t, 5*time.Second, "a probe right after the breaker opened", func() bool { return probes.Load() == 1 })
	testwait.For(t, 5*time.Second, "the recovery cadence", func() bool { mu.Lock(); defer mu.Unlock(); return len(intervals) == 2 })
	mu.Lock()
	if intervals[0] != 10*time.Second || intervals[1] != 2*time.Second {
		t.Errorf("probe intervals %v, want [10s 2s]", intervals)
	}
	mu.Unlock()
	// The probe succeeded: the breaker's open period is over without any
	// time passing, and the next request is its half-open probe.
	if code, _, _ := h.chat("m"); code != 503 || eng.hits.Load() != 6 {
		t.Fatalf("half-open probe: status %d, %d requests at the engine, want the 6th", code, eng.hits.Load())
	}
}

// Only a breaker that opens from closed asks for a probe at once. One that
// reopens after a failed half-open probe waits for the recovery cadence:
// otherwise an engine that passes health checks but fails every request
// would make every request a half-open probe.
func TestOnlyAFreshlyOpenedBreakerWakesItsProbe(t *testing.T) {
	u := newUpstream("a")
	now := time.Unix(0, 0)
	for range 5 {
		u.failure(now, 5, 30*time.Second)
	}
	if len(u.wake) != 1 {
		t.Fatal("opening the breaker did not ask for a probe")
	}
	<-u.wake
	if u.healthCheckOK(now.Add(-time.Millisecond), now) {
		t.Fatal("a health check that began before the breaker opened ended the open period")
	}
	if !u.healthCheckOK(now, now) {
		t.Fatal("a successful health check did not end the open period")
	}
	if ok, trial := u.admit(now); !ok || !trial {
		t.Fatalf("admit = %v, %v: want the half-open probe", ok, trial)
	}
	if !u.failure(now, 5, 30*time.Second) {
		t.Fatal("a failed half-open probe must reopen the breaker")
	}
	if len(u.wake) != 0 {
		t.Error("a failed half-open probe asked for another probe at once")
	}
}
