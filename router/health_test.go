package router

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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
	var intervals atomic.Int64
	h := newHarnessWith(t, providers("a", eng.URL)+healthRoute, nil, func(o *Options) {
		o.NewTicker = func(d time.Duration) (<-chan time.Time, func()) {
			intervals.Store(int64(d))
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
	eventually(t, "provider marked down", func() bool { return !up.healthy.Load() })
	if time.Duration(intervals.Load()) != 10*time.Second {
		t.Errorf("probe interval %v, want the 10 s default", time.Duration(intervals.Load()))
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
