package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// stoppedClock is a wall clock that moves only when told.
type stoppedClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stoppedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *stoppedClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// With --client-clock a request arrives, on the engine's clock, when its
// client sent it: the time its HTTP path took counts as its wait, as it
// does for a client. Without the flag the header changes nothing.
func TestClientClockArrivesAtTheSendTime(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run("client clock "+strconv.FormatBool(on), func(t *testing.T) {
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			clock := &stoppedClock{t: t0}
			cfg := DefaultConfig()
			cfg.Engine.Instant, cfg.Speed, cfg.ClientClock = true, 2, on
			s := New(cfg, nil, clock, nil)
			var log lockedBuffer
			s.LogGenerations(&log)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); s.Run(ctx) }()
			ts := httptest.NewServer(s.Handler())
			defer func() { ts.Close(); cancel(); <-done }()

			// The request reaches the engine 3 s (wall) after it started;
			// its client sent it at 1 s. At speed 2 that is 2 s of engine
			// time against 6 s.
			clock.set(t0.Add(3 * time.Second))
			b, _ := json.Marshal(map[string]any{"prompt": []int{1, 2, 3, 4}, "max_tokens": 2, "stream": true})
			req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/completions", bytes.NewReader(b))
			req.Header.Set(SentAtHeader, strconv.FormatInt(t0.Add(time.Second).UnixNano(), 10))
			req.Header.Set("X-Request-Id", "r1")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			events := sse(t, resp.Body)
			resp.Body.Close()
			if len(events) == 0 || events[len(events)-1] != "[DONE]" {
				t.Fatalf("stream %q did not finish", events)
			}
			gens := log.lines(t)
			if len(gens) != 1 || gens[0].Engine == nil {
				t.Fatalf("generation log %+v: want one done line with the engine's times", gens)
			}
			e := gens[0].Engine
			want := 6 * time.Second
			if on {
				want = 2 * time.Second
			}
			if time.Duration(e.Arrival) != want || time.Duration(e.FirstToken) != want {
				t.Errorf("arrival %v, first token %v on the engine's clock; want both %v (instant model)",
					time.Duration(e.Arrival), time.Duration(e.FirstToken), want)
			}
			if e.Submitted != t0.Add(3*time.Second).UnixNano() {
				t.Errorf("submitted at %v, want the wall clock at receipt %v", time.Unix(0, e.Submitted).UTC(), t0.Add(3*time.Second))
			}
		})
	}
}

// A stream's headers leave when the engine takes the request, before its
// first token (as vLLM's do): a client can tell its request has arrived.
// The sim runs a millionth of real time here, so no token comes at all.
func TestStreamHeadersBeforeTheFirstToken(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Speed = 1e-6
	s := New(cfg, nil, &stoppedClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	ts := httptest.NewServer(s.Handler())
	defer func() { ts.Close(); cancel(); <-done }()
	b, _ := json.Marshal(map[string]any{"prompt": []int{1, 2, 3, 4}, "max_tokens": 4, "stream": true})
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodPost, ts.URL+"/v1/completions", bytes.NewReader(b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("no headers before the first token: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}
