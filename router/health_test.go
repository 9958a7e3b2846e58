package router

import (
	"context"
	"fmt"
	"net/http"
	"slices"
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
		return len(intervals) == 3
	})
	mu.Lock()
	// The provider's offset to its first probe, 10 s while healthy, then
	// the 2 s recovery cadence once it is down (the defaults).
	if want := []time.Duration{probeOffset("a", 10*time.Second), 10 * time.Second, 2 * time.Second}; !slices.Equal(intervals, want) {
		t.Errorf("probe intervals %v, want %v", intervals, want)
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
	testwait.For(t, 5*time.Second, "the recovery cadence", func() bool { mu.Lock(); defer mu.Unlock(); return len(intervals) == 3 })
	mu.Lock()
	// The provider's offset, the interval from the first probe (the wake-up
	// here), then the recovery cadence.
	if want := []time.Duration{probeOffset("a", 10*time.Second), 10 * time.Second, 2 * time.Second}; !slices.Equal(intervals, want) {
		t.Errorf("probe intervals %v, want %v", intervals, want)
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

// virtualTickers stands in for time.NewTicker in the health loops: time
// is virtual and moves only when the test fires the next tick due.
type virtualTickers struct {
	mu      sync.Mutex
	now     time.Duration
	tickers []*virtualTicker
}

type virtualTicker struct {
	next, every time.Duration
	c           chan time.Time
	stopped     bool
}

func (v *virtualTickers) newTicker(d time.Duration) (<-chan time.Time, func()) {
	v.mu.Lock()
	defer v.mu.Unlock()
	tk := &virtualTicker{next: v.now + d, every: d, c: make(chan time.Time, 1)}
	v.tickers = append(v.tickers, tk)
	return tk.c, func() { v.mu.Lock(); tk.stopped = true; v.mu.Unlock() }
}

// created is how many tickers the loops have asked for.
func (v *virtualTickers) created() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.tickers)
}

func (v *virtualTickers) time() time.Duration {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.now
}

// fire moves time to the earliest tick due and delivers it (dropped, as
// time.Ticker drops it, if the last one is still unread). It reports the
// ticker's period.
func (v *virtualTickers) fire() time.Duration {
	v.mu.Lock()
	defer v.mu.Unlock()
	var due *virtualTicker
	for _, tk := range v.tickers {
		if !tk.stopped && (due == nil || tk.next < due.next) {
			due = tk
		}
	}
	v.now = due.next
	due.next += due.every
	select {
	case due.c <- time.Time{}:
	default:
	}
	return due.every
}

// probeLog is an engine serving several providers, one per path prefix
// (api_base = engine/<name>), that notes the virtual time of each
// provider's probes.
type probeLog struct {
	mu     sync.Mutex
	at     map[string][]time.Duration
	probes int
}

func (l *probeLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.probes
}

func (l *probeLog) times(name string) []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.at[name])
}

// spreadConfig routes model m over providers p0..p(n-1) (and extra),
// each a path of base.
func spreadConfig(base string, n int, extra ...string) string {
	var kv, targets []string
	for i := range n {
		kv = append(kv, fmt.Sprintf("p%d", i), fmt.Sprintf("%s/p%d", base, i))
		targets = append(targets, fmt.Sprintf("{provider = %q}", fmt.Sprintf("p%d", i)))
	}
	for _, name := range extra {
		kv = append(kv, name, base+"/"+name)
		targets = append(targets, fmt.Sprintf("{provider = %q}", name))
	}
	return providers(kv...) + "[[routes]]\nmodel = \"m\"\ntargets = [" + strings.Join(targets, ", ") + "]\n[health]\nenabled = true\n"
}

// Every provider's probe used to fall due at the same instant (64
// targets: a 64-request burst every interval). Each provider now probes
// first at its own offset into the interval, then every interval; one
// added by Apply probes at its offset from then.
func TestHealthProbesSpreadOverTheInterval(t *testing.T) {
	const n, every = 16, 10 * time.Second
	vt := &virtualTickers{}
	log := &probeLog{at: map[string][]time.Duration{}}
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, b map[string]any) {
		name, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		log.mu.Lock()
		log.at[name] = append(log.at[name], vt.time())
		log.probes++
		log.mu.Unlock()
		w.WriteHeader(200)
	})
	h := newHarnessWith(t, spreadConfig(eng.URL, n), nil, func(o *Options) { o.NewTicker = vt.newTicker })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.srv.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	testwait.For(t, 5*time.Second, "every provider's loop started", func() bool { return vt.created() == n })

	// step fires the next tick and waits for its probe and, on a
	// provider's first tick, for its loop to set up the interval's ticker,
	// so virtual time moves on only once the loops are idle.
	step := func() {
		t.Helper()
		probes, tickers := log.count(), vt.created()
		period := vt.fire()
		testwait.For(t, 5*time.Second, "the probe of the tick", func() bool { return log.count() == probes+1 })
		if period != every {
			testwait.For(t, 5*time.Second, "the interval's ticker", func() bool { return vt.created() == tickers+1 })
		}
	}
	for vt.time() <= 2*every {
		step()
	}

	firsts := map[time.Duration]string{}
	perSecond := map[time.Duration]int{}
	for i := range n {
		name := fmt.Sprintf("p%d", i)
		at := log.times(name)
		if len(at) < 2 {
			t.Fatalf("%s probed at %v in two intervals, want twice", name, at)
		}
		if at[0] <= 0 || at[0] > every {
			t.Errorf("%s first probed at %v, want within the first interval", name, at[0])
		}
		if other, ok := firsts[at[0]]; ok {
			t.Errorf("%s and %s probe at the same instant %v", name, other, at[0])
		}
		firsts[at[0]] = name
		perSecond[at[0].Truncate(time.Second)]++
		if at[1]-at[0] != every {
			t.Errorf("%s probed at %v then %v, want %v apart", name, at[0], at[1], every)
		}
	}
	for sec, c := range perSecond {
		if c > n/2 {
			t.Errorf("%d of %d providers probe in the second from %v", c, n, sec)
		}
	}

	// A provider added by Apply starts at its offset from the Apply.
	tickers := vt.created()
	added := vt.time()
	h.apply(spreadConfig(eng.URL, n, "late"))
	testwait.For(t, 5*time.Second, "the added provider's loop", func() bool { return vt.created() == tickers+1 })
	for len(log.times("late")) == 0 {
		step()
	}
	if got, want := log.times("late")[0]-added, probeOffset("late", every); got != want {
		t.Errorf("the added provider first probed %v after the Apply, want its offset %v", got, want)
	}
}
