package routestats

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) Now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func ms(n int) time.Duration             { return time.Duration(n) * time.Millisecond }
func start() *clock                      { return &clock{t: time.Date(2026, 12, 1, 9, 0, 3, 0, time.UTC)} }
func within(got *float64, want, tol float64) bool {
	return got != nil && math.Abs(*got-want) <= want*tol
}

// viaWire sends reports through JSON, as the telemetry channel does.
func viaWire(t *testing.T, in map[string][]Route) map[string][]Route {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string][]Route
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSummarizeCountsSharesAndPercentiles(t *testing.T) {
	c := start()
	r := NewRing(c.Now)
	// 30 requests on a, 10 on b of which 2 failed and were retried on a.
	for i := range 30 {
		r.Record("chat", "a", "a/chat", Attempt{OK: true, Latency: ms(100 + i), TTFT: ms(20), FirstByte: true})
		c.advance(100 * time.Millisecond)
	}
	for range 8 {
		r.Record("chat", "b", "b/chat", Attempt{OK: true, Latency: ms(400), TTFT: ms(80), FirstByte: true})
	}
	for range 2 {
		r.Record("chat", "b", "b/chat", Attempt{OK: false, Latency: ms(5)})
		r.Record("chat", "a", "a/chat", Attempt{Retry: true, OK: true, Latency: ms(110), TTFT: ms(20), FirstByte: true})
	}
	v := Summarize(c.Now(), viaWire(t, map[string][]Route{"n1": r.Report()}))
	if len(v.Routes) != 1 || v.Routes[0].Pool != "chat" {
		t.Fatalf("routes = %+v", v.Routes)
	}
	for _, name := range []string{"5m", "60m"} {
		w := v.Routes[0].Windows[name]
		if w.Requests != 40 || w.Attempts != 42 || w.Retries != 2 || w.Errors != 2 {
			t.Errorf("%s: requests %d attempts %d retries %d errors %d, want 40 42 2 2", name, w.Requests, w.Attempts, w.Retries, w.Errors)
		}
		if len(w.Targets) != 2 {
			t.Fatalf("%s: targets %+v", name, w.Targets)
		}
		a, b := w.Targets[0], w.Targets[1]
		if a.Attempts != 32 || b.Attempts != 10 || math.Abs(a.Share-32.0/42) > 1e-9 || math.Abs(b.Share-10.0/42) > 1e-9 {
			t.Errorf("%s: shares a=%d %.3f b=%d %.3f", name, a.Attempts, a.Share, b.Attempts, b.Share)
		}
		if b.ErrorRate != 0.2 || a.ErrorRate != 0 {
			t.Errorf("%s: error rates a=%v b=%v", name, a.ErrorRate, b.ErrorRate)
		}
		if !within(a.LatencyP50, 115, 0.23) || !within(b.LatencyP90, 400, 0.23) || !within(a.TTFTP50, 20, 0.23) || !within(b.TTFTP50, 80, 0.23) {
			t.Errorf("%s: percentiles a p50 %v ttft %v, b p90 %v ttft %v", name, *a.LatencyP50, *a.TTFTP50, *b.LatencyP90, *b.TTFTP50)
		}
	}
	if w := v.Routes[0].Windows["5m"]; w.RequestsPerSec != 40.0/300 || len(w.Targets[0].Points) != 30 || w.StepSeconds != 10 {
		t.Errorf("5m: %v req/s, %d points, step %d", w.RequestsPerSec, len(w.Targets[0].Points), w.StepSeconds)
	}
}

func TestWindowsAgeOut(t *testing.T) {
	c := start()
	r := NewRing(c.Now)
	r.Record("chat", "a", "a/chat", Attempt{OK: true, Latency: ms(50)})
	c.advance(10 * time.Minute)
	r.Record("chat", "a", "a/chat", Attempt{OK: true, Latency: ms(50)})
	v := Summarize(c.Now(), map[string][]Route{"n1": r.Report()})
	if got := v.Routes[0].Windows["5m"].Requests; got != 1 {
		t.Errorf("5m requests = %d, want 1 (the older one is 10 min old)", got)
	}
	if got := v.Routes[0].Windows["60m"].Requests; got != 2 {
		t.Errorf("60m requests = %d, want 2", got)
	}
	c.advance(61 * time.Minute)
	if got := r.Report(); len(got) != 0 {
		t.Errorf("a pair idle for over an hour is still reported: %+v", got)
	}
}

// A handle records on its pair until the Ring forgets the pair; then Add
// says so and records nothing, and a new handle starts the pair afresh,
// as Record would.
func TestHandleOfAForgottenPair(t *testing.T) {
	c := start()
	r := NewRing(c.Now)
	h := r.Handle("chat", "a", "a/chat")
	if !h.Add(Attempt{OK: true, Latency: ms(50)}) {
		t.Fatal("a new pair's handle did not record")
	}
	if got := Summarize(c.Now(), map[string][]Route{"n1": r.Report()}).Routes[0].Windows["5m"].Requests; got != 1 {
		t.Errorf("5m requests = %d through the handle, want 1", got)
	}
	c.advance(61 * time.Minute)
	if got := r.Report(); len(got) != 0 {
		t.Fatalf("a pair idle for over an hour is still reported: %+v", got)
	}
	if h.Add(Attempt{OK: true, Latency: ms(50)}) {
		t.Error("a forgotten pair's handle still records")
	}
	if !r.Handle("chat", "a", "a/chat").Add(Attempt{OK: true, Latency: ms(50)}) {
		t.Fatal("a new handle on the forgotten pair did not record")
	}
	if got := Summarize(c.Now(), map[string][]Route{"n1": r.Report()}).Routes[0].Windows["5m"].Requests; got != 1 {
		t.Errorf("5m requests = %d after the pair came back, want 1", got)
	}
}

func TestSummarizeAddsRouters(t *testing.T) {
	c := start()
	r1, r2 := NewRing(c.Now), NewRing(c.Now)
	for range 7 {
		r1.Record("fleet/*", "a", "a/*", Attempt{OK: true, Latency: ms(10)})
	}
	for range 3 {
		r2.Record("fleet/*", "a", "a/*", Attempt{OK: true, Latency: ms(1000), PromptTokens: 100, CachedTokens: 20})
		r2.Record("fleet/*", "b", "b/*", Attempt{OK: true, Latency: ms(1000)})
	}
	r1.Record("fleet/*", "a", "a/*", Attempt{OK: true, Latency: ms(10), PromptTokens: 100, CachedTokens: 80})
	v := Summarize(c.Now(), viaWire(t, map[string][]Route{"n1": r1.Report(), "n2": r2.Report()}))
	rv := v.Routes[0]
	if fmt.Sprint(rv.Nodes) != "[n1 n2]" {
		t.Errorf("nodes = %v", rv.Nodes)
	}
	w := rv.Windows["5m"]
	if w.Requests != 14 || w.Targets[0].Attempts != 11 || w.Targets[1].Attempts != 3 {
		t.Errorf("merged: %d requests, a %d, b %d; want 14, 11, 3", w.Requests, w.Targets[0].Attempts, w.Targets[1].Attempts)
	}
	// a's hit rate counts tokens across both routers: (80+60) / 400.
	if hr := w.Targets[0].PrefixCacheHitRate; hr == nil || *hr != 140.0/400 {
		t.Errorf("a hit rate %v, want 0.35", hr)
	}
	if w.Targets[1].PrefixCacheHitRate != nil {
		t.Error("b's engine reported no cached tokens, yet it has a hit rate")
	}
	// a's latencies: 8 × 10 ms on n1, 3 × 1 s on n2 — the mesh's p50 is
	// n1's, its p90 n2's, which no average of per-router percentiles gives.
	if a := w.Targets[0]; !within(a.LatencyP50, 10, 0.23) || !within(a.LatencyP90, 1000, 0.23) {
		t.Errorf("a p50 %v p90 %v, want ≈10 and ≈1000", *a.LatencyP50, *a.LatencyP90)
	}
}

func TestRingIsBounded(t *testing.T) {
	r := NewRing(start().Now)
	for i := range MaxSeries + 5 {
		r.Record("p", "x", fmt.Sprint("t", i), Attempt{OK: true})
	}
	if r.Dropped() != 5 {
		t.Errorf("dropped = %d, want 5", r.Dropped())
	}
	n := 0
	for _, rt := range r.Report() {
		n += len(rt.Targets)
	}
	if n != MaxSeries {
		t.Errorf("%d pairs reported, want %d", n, MaxSeries)
	}
}

func BenchmarkRecord(b *testing.B) {
	r := NewRing(nil)
	r.Record("chat", "a", "a/chat", Attempt{OK: true})
	at := time.Now() // the request path passes the time it already read
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Record("chat", "a", "a/chat", Attempt{OK: true, Latency: 120 * time.Millisecond, TTFT: 30 * time.Millisecond, FirstByte: true, At: at})
		}
	})
}
