package scrape

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/internal/testwait"
	"github.com/rolter/rolter/router"
	"github.com/rolter/rolter/strategies"
)

// fakeEngine serves /metrics with a settable queue and an LMCache signal.
type fakeEngine struct {
	*httptest.Server
	running, waiting atomic.Int64
	occupancy        atomic.Value // string, JSON number
	down             atomic.Bool
	chats            atomic.Int64
}

func newFakeEngine(t *testing.T) *fakeEngine {
	t.Helper()
	e := &fakeEngine{}
	e.occupancy.Store("0.25")
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		switch r.URL.Path {
		case "/metrics":
			fmt.Fprintf(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} %d\n"+
				"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} %d\n", e.running.Load(), e.waiting.Load())
		case "/lmcache":
			fmt.Fprintf(w, `{"occupancy": %s, "cache_available": true}`, e.occupancy.Load())
		case "/v1/chat/completions":
			e.chats.Add(1)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(e.Close)
	return e
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func scrapeConfig(t *testing.T, tomlText string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("rolter.toml", []byte(tomlText), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestPollerFollowsTheEnginesQueueAndLMCache(t *testing.T) {
	e := newFakeEngine(t)
	e.running.Store(3)
	e.waiting.Store(4)
	cfg := scrapeConfig(t, fmt.Sprintf(`
[[providers]]
name = "a"
api_base = "%s/v1"
[providers.lmcache]
url = "%s/lmcache"
interval = "10ms"

[[routes]]
model = "m"
targets = [{ provider = "a" }]

[metrics_scrape]
interval = "10ms"
stale_after = "1s"
`, e.URL, e.URL))
	clk := &clock{t: time.Unix(1_000_000, 0)}
	var own atomic.Uint64
	own.Store(2)
	base := e.URL + "/v1"
	p := NewPoller(Options{Now: clk.Now, Inflight: func() map[string]uint64 { return map[string]uint64{base: own.Load()} }})
	p.Set(cfg, cfg.LMCacheTables())
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { stop(); <-done }()

	testwait.For(t, 5*time.Second, "the scraped queue beyond our own 2 requests", func() bool { q, ok := p.Load(base); return ok && q == 5 })
	if !p.KnowsLoads() {
		t.Error("a poller scraping an engine says it knows no load")
	}
	_, cache, _ := p.Sources([]string{base})
	testwait.For(t, 5*time.Second, "the LMCache occupancy", func() bool { o, avail, ok := cache.Occupancy(0); return ok && avail && o == 0.25 })
	if _, ok := p.Load("http://elsewhere:8000"); ok {
		t.Error("an engine nobody scrapes reported a load")
	}

	// An engine that stops answering keeps its last value until it is
	// stale, then is neutral.
	e.down.Store(true)
	testwait.For(t, 5*time.Second, "a failed scrape and LMCache poll", func() bool {
		en := (*p.engines.Load())[base]
		return en.metricsFailing.Load() && en.lmcacheFailing.Load()
	})
	if q, ok := p.Load(base); !ok || q != 5 {
		t.Fatalf("a failed scrape dropped the fresh value at once: %d %v", q, ok)
	}
	clk.Add(2 * time.Second)
	if _, ok := p.Load(base); ok {
		t.Error("a stale scrape still counts")
	}
	if _, _, ok := cache.Occupancy(0); ok {
		t.Error("a stale LMCache signal still counts")
	}

	// Without [metrics_scrape] and [providers.lmcache] nothing is polled.
	off := scrapeConfig(t, fmt.Sprintf("[[providers]]\nname = \"a\"\napi_base = %q\n[[routes]]\nmodel = \"m\"\ntargets = [{ provider = \"a\" }]\n", base))
	p.Set(off, off.LMCacheTables())
	if _, c, _ := p.Sources([]string{base}); c != nil {
		t.Error("a pool without [providers.lmcache] got an LMCache signal")
	}
	if p.KnowsLoads() {
		t.Error("a poller with nothing to poll says it knows loads: every pick would ask it target by target")
	}
	if _, ok := p.Load(base); ok {
		t.Error("load reported without [metrics_scrape]")
	}
}

// The user-visible point of [metrics_scrape]: a standalone router with no
// sidecar sends power_of_two traffic away from the engine whose scheduler
// queue is deep, although its own in-flight counts are equal (zero).
func TestScrapedQueueSteersPowerOfTwo(t *testing.T) {
	busy, idle := newFakeEngine(t), newFakeEngine(t)
	busy.running.Store(8)
	busy.waiting.Store(40)
	cfg := scrapeConfig(t, fmt.Sprintf(`
[[providers]]
name = "busy"
api_base = %q
[[providers]]
name = "idle"
api_base = %q

[[routes]]
model = "m"
strategy = "power_of_two"
targets = [{ provider = "busy" }, { provider = "idle" }]

[metrics_scrape]
interval = "10ms"

[health]
enabled = false
`, busy.URL, idle.URL))
	var srv *router.Server
	p := NewPoller(Options{Inflight: func() map[string]uint64 { return srv.InflightByBase() }})
	srv = router.New(router.Options{Engine: p, Sources: p, Rand: strategies.NewRand(3)})
	p.Set(cfg, cfg.LMCacheTables())
	if err := srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { stop(); <-done }()
	testwait.For(t, 5*time.Second, "both engines scraped", func() bool {
		_, ok1 := p.Load(busy.URL)
		_, ok2 := p.Load(idle.URL)
		return ok1 && ok2
	})
	api := httptest.NewServer(srv.Handler())
	defer api.Close()
	for range 20 {
		resp, err := http.Post(api.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if busy.chats.Load() != 0 || idle.chats.Load() != 20 {
		t.Fatalf("busy engine (queue 48) got %d requests, idle got %d: the scraped queue is not in the load view",
			busy.chats.Load(), idle.chats.Load())
	}
}

func TestPollerReadsDoNotAllocate(t *testing.T) {
	cfg := scrapeConfig(t, `
[[providers]]
name = "a"
api_base = "http://127.0.0.1:1"
[providers.lmcache]
url = "http://127.0.0.1:1/lmcache"
[[routes]]
model = "m"
targets = [{ provider = "a" }]
[metrics_scrape]
`)
	p := NewPoller(Options{})
	p.Set(cfg, cfg.LMCacheTables())
	_, cache, _ := p.Sources([]string{"http://127.0.0.1:1"})
	if n := testing.AllocsPerRun(100, func() { p.Load("http://127.0.0.1:1"); cache.Occupancy(0) }); n != 0 {
		t.Fatalf("Load and Occupancy allocate %v times per call", n)
	}
}
