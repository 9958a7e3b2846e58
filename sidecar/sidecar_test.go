package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/internal/testwait"
	"github.com/rolter/rolter/scrape"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a Publisher that keeps everything, applying deltas to a view
// the way a router would.
type recorder struct {
	t        *testing.T
	mu       sync.Mutex
	view     *view
	statuses []EngineStatus
	snaps    []Snapshot
	inFlight atomic.Int32 // detects concurrent calls
}

func newRecorder(t *testing.T) *recorder { return &recorder{t: t, view: newView()} }

func (r *recorder) enter() func() {
	if r.inFlight.Add(1) > 1 {
		r.t.Error("publisher called concurrently")
	}
	return func() { r.inFlight.Add(-1) }
}

func (r *recorder) PublishResidency(d Delta) {
	defer r.enter()()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.view.apply(r.t, []Delta{d})
}

func (r *recorder) PublishStatus(s EngineStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.statuses = append(r.statuses, s)
}

func (r *recorder) PublishSnapshot(s Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snaps = append(r.snaps, s)
}

func (r *recorder) lastStatus() (EngineStatus, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.statuses) == 0 {
		return EngineStatus{}, false
	}
	return r.statuses[len(r.statuses)-1], true
}

func (r *recorder) keys() ([]uint64, mesh.ResidencyState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.view.sorted(), r.view.state
}

// fakeEngineHTTP serves /metrics from a file and can be told to fail.
type fakeEngineHTTP struct {
	failing atomic.Bool
	body    []byte
}

func (f *fakeEngineHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.failing.Load() {
		http.Error(w, "engine down", http.StatusServiceUnavailable)
		return
	}
	switch r.URL.Path {
	case "/metrics":
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(f.body)
	case "/v1/models":
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"meta-llama/Llama-3.1-8B-Instruct","object":"model","root":"meta-llama/Llama-3.1-8B-Instruct","parent":null},{"id":"loaded-adapter","object":"model","root":"/adapters/x","parent":"meta-llama/Llama-3.1-8B-Instruct"}]}`)
	case "/lmcache":
		_, _ = io.WriteString(w, `{"occupancy":0.3,"cache_available":true}`)
	default:
		http.NotFound(w, r)
	}
}

func TestSidecarEndToEnd(t *testing.T) {
	body, err := os.ReadFile("testdata/vllm-metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	eng := &fakeEngineHTTP{body: body}
	srv := httptest.NewServer(eng)
	defer srv.Close()

	src := NewMemSource(64, 10000)
	pub := newRecorder(t)
	cfg := Config{
		Engine: srv.URL, LMCache: srv.URL + "/lmcache", NodeID: "sc-1", BlockSize: 16,
		ScrapeInterval: 20 * time.Millisecond, LMCacheInterval: 20 * time.Millisecond, ModelsInterval: 20 * time.Millisecond,
		FlushInterval: 10 * time.Millisecond, StaleAfter: time.Second, FullStateInterval: time.Hour,
	}
	sc, err := New(cfg, pub, Options{Logger: discardLog(), Source: src, Replayer: src, Client: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- sc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v", err)
		}
	}()

	engine := newFakeEngine(t, 77, 0)
	for i := 0; i < 400; i++ {
		m := engine.step()
		if i%25 == 24 {
			src.Record(m) // lost on the wire; replay has it
			continue
		}
		if err := src.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := src.Publish(ctx, engine.step()); err != nil {
		t.Fatal(err)
	}
	want := engine.truth()
	testwait.For(t, 10*time.Second, "the published view to equal the engine", func() bool {
		got, state := pub.keys()
		return state == mesh.StateExact && slices.Equal(got, want)
	})
	testwait.For(t, 10*time.Second, "a fresh engine status", func() bool {
		s, ok := pub.lastStatus()
		return ok && s.MetricsOK && s.LMCacheOK && s.Running == 5 && s.LMCacheOccupancy == 0.3 &&
			slices.Equal(s.Adapters, []string{"chat-adapter", "loaded-adapter", "sql-adapter", "summarize"}) &&
			slices.Equal(s.Models, []string{"meta-llama/Llama-3.1-8B-Instruct"}) && s.NumGPUBlocks == 27264
	})

	// Own /metrics and /healthz.
	rec := httptest.NewRecorder()
	sc.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	text := rec.Body.String()
	for _, want := range []string{
		`rolter_kv_events_total{type="BlockStored"}`,
		`rolter_kv_events_malformed_total 0`,
		"rolter_kv_event_gaps_total 16\n",
		"rolter_kv_event_gaps_repaired_total 16\n",
		`rolter_cache_telemetry_age_seconds{provider="sc-1",source="kv_events"}`,
		`rolter_cache_telemetry_age_seconds{provider="sc-1",source="lmcache"}`,
		`rolter_kv_residency_state{state="EXACT"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	rec = httptest.NewRecorder()
	sc.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	var hz struct {
		Status    string `json:"status"`
		Residency string `json:"residency"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &hz); err != nil || rec.Code != 200 || hz.Status != "ok" || hz.Residency != "EXACT" {
		t.Fatalf("/healthz %d %s", rec.Code, rec.Body.String())
	}

	// The engine's /metrics fails: the status turns neutral.
	eng.failing.Store(true)
	testwait.For(t, 10*time.Second, "a failed scrape to turn the status neutral", func() bool {
		s, ok := pub.lastStatus()
		return ok && !s.MetricsOK && !s.LMCacheOK && len(s.Adapters) == 0
	})
}

func TestStatusGoesStale(t *testing.T) {
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	sc, err := New(Config{Engine: "http://127.0.0.1:1", NodeID: "n", StaleAfter: 5 * time.Second}, newRecorder(t), Options{Now: clock, Logger: discardLog()})
	if err != nil {
		t.Fatal(err)
	}
	sc.tel.metrics.Store(&polled[scrape.EngineMetrics]{v: scrape.EngineMetrics{Running: 3}, at: clock(), lastOK: true})
	sc.tel.lmcache.Store(&polled[scrape.LMCacheSignal]{v: scrape.LMCacheSignal{Occupancy: 0.5, Available: true}, at: clock(), lastOK: true})
	if s := sc.Status(); !s.MetricsOK || !s.LMCacheOK || s.Running != 3 {
		t.Fatalf("fresh status %+v", s)
	}
	mu.Lock()
	now = now.Add(6 * time.Second)
	mu.Unlock()
	if s := sc.Status(); s.MetricsOK || s.LMCacheOK {
		t.Fatalf("status older than StaleAfter must not be OK: %+v", s)
	}
}

func TestSnapshotsPublishedPeriodically(t *testing.T) {
	srv := httptest.NewServer(&fakeEngineHTTP{body: []byte("vllm:num_requests_running 1\n")})
	defer srv.Close()
	src := NewMemSource(8, 0)
	pub := newRecorder(t)
	cfg := Config{Engine: srv.URL, NodeID: "n", FlushInterval: 5 * time.Millisecond, FullStateInterval: 20 * time.Millisecond}
	sc, err := New(cfg, pub, Options{Logger: discardLog(), Source: src})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- sc.Run(ctx) }()
	engine := newFakeEngine(t, 5, 0)
	for i := 0; i < 30; i++ {
		if err := src.Publish(ctx, engine.step()); err != nil {
			t.Fatal(err)
		}
	}
	want := engine.truth()
	testwait.For(t, 10*time.Second, "a snapshot holding the engine's keys", func() bool {
		pub.mu.Lock()
		defer pub.mu.Unlock()
		for _, s := range pub.snaps {
			keys := slices.Sorted(slices.Values(s.Keys))
			if slices.Equal(keys, want) && s.State == mesh.StateExact && s.Version == pub.view.version {
				return true
			}
		}
		return false
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestRegisterFlagsAndValidate(t *testing.T) {
	fs := flag.NewFlagSet("sidecar", flag.ContinueOnError)
	cfg := &Config{}
	cfg.RegisterFlags(fs)
	err := fs.Parse([]string{"--engine", "http://127.0.0.1:8000", "--kv-events", "tcp://127.0.0.1:5557",
		"--kv-events-replay", "tcp://127.0.0.1:5558", "--kv-events-bind", "--topic", "kv@", "--lmcache", "http://127.0.0.1:9000/signal",
		"--node-id", "engine-a", "--block-size", "32"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if !cfg.KVEventsBind || cfg.Topic != "kv@" || cfg.BlockSize != 32 || cfg.MetricsAddr != "127.0.0.1:9101" || cfg.NodeID != "engine-a" {
		t.Fatalf("parsed %+v", cfg)
	}
	bad := []Config{
		{Engine: "127.0.0.1:8000"},
		{Engine: "http://e", LMCache: "ftp://x"},
		{Engine: "http://e", KVEvents: "127.0.0.1:5557"},
		{Engine: "http://e", KVEventsReplay: "tcp://127.0.0.1:5558"},
	}
	for _, c := range bad {
		c.NodeID = "n"
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: want ErrConfig, got %v", c, err)
		}
	}
	t.Setenv("ROLTER_NODE_ID", "from-env")
	c := Config{Engine: "http://e"}
	if err := c.Validate(); err != nil || c.NodeID != "from-env" {
		t.Fatalf("node id %q, %v", c.NodeID, err)
	}
}
