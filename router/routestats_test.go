package router

import (
	"testing"
	"time"

	"github.com/rolter/rolter/routestats"
)

// The route stats ring sees every attempt: the client requests, the
// retries a failing target caused, each target's share and latency.
func TestRouteStatsCountAttempts(t *testing.T) {
	good := newEngine(t, okChat)
	bad := newEngine(t, status(503))
	h := newHarness(t, providers("good", good.URL+"/v1", "bad", bad.URL+"/v1")+`
[[routes]]
model = "m"
strategy = "round_robin"
targets = [{provider = "good"}, {provider = "bad"}]

[retry]
attempts = 1
budget = 1.0
backoff_base = "1ms"
backoff_max = "1ms"

[breaker]
failures = 1000
`, nil)
	const sent = 10
	for range sent {
		if code, _, body := h.chat("m"); code != 200 {
			t.Fatalf("chat: %d %s", code, body)
		}
		h.clock.Advance(time.Second)
	}
	v := routestats.Summarize(h.clock.Now(), map[string][]routestats.Route{"r1": h.srv.RouteStats()})
	if len(v.Routes) != 1 || v.Routes[0].Pool != "m" {
		t.Fatalf("routes: %+v", v.Routes)
	}
	w := v.Routes[0].Windows["5m"]
	fails := bad.hits.Load()
	if w.Requests != sent || w.Retries != uint64(fails) || w.Errors != uint64(fails) || w.Attempts != sent+uint64(fails) {
		t.Fatalf("requests %d retries %d errors %d attempts %d; want %d, %d, %d, %d",
			w.Requests, w.Retries, w.Errors, w.Attempts, sent, fails, fails, sent+fails)
	}
	if fails == 0 {
		t.Fatal("round robin never tried the failing target")
	}
	byName := map[string]routestats.TargetView{}
	for _, tv := range w.Targets {
		byName[tv.Target] = tv
	}
	if g := byName["good/m"]; g.Attempts != sent || g.Errors != 0 || g.TTFTP50 == nil || g.Provider != "good" {
		t.Errorf("good/m: %+v", g)
	}
	if b := byName["bad/m"]; b.Attempts != uint64(fails) || b.ErrorRate != 1 || b.TTFTP50 != nil {
		t.Errorf("bad/m: %+v (no byte of a failed attempt reaches the client)", b)
	}
}
