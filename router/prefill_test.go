package router

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
	"github.com/rolter/rolter/strategies"
)

// upstreamStep tells a scripted upstream what to do with the request it
// holds: answer a first SSE chunk, finish the stream, or fail with 503.
type upstreamStep int

const (
	sendFirst upstreamStep = iota
	finish
	fail503
)

// TestQueuedPrefillFollowsEveryAttempt drives a scripted sequence of
// picks, first tokens, a failure and a client cancel through the proxy
// and checks the target's queued-prefill sum (what strategies see in
// RouteContext.QueuedPrefill and what rolter_target_queued_prefill_tokens
// exports) after each: a pick adds the prompt's uncached tokens, the first
// response byte takes them off, and an attempt that ends without one —
// failed or cancelled — takes them off too.
func TestQueuedPrefillFollowsEveryAttempt(t *testing.T) {
	steps := make(chan chan upstreamStep, 8) // one script per request, in arrival order
	var took atomic.Int64                    // scripts taken by requests at the engine
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		script := <-steps
		took.Add(1)
		for {
			var step upstreamStep
			select {
			case step = <-script:
			case <-r.Context().Done():
				return
			}
			switch step {
			case fail503:
				http.Error(w, `{"error":{"message":"busy"}}`, http.StatusServiceUnavailable)
				return
			case sendFirst:
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"one\"}}]}\n\n")
				w.(http.Flusher).Flush()
			case finish:
				fmt.Fprint(w, "data: [DONE]\n\n")
				return
			}
		}
	})
	h := newHarness(t, providers("a", eng.URL)+`
[retry]
attempts = 0

[[routes]]
model = "m"
strategy = "precise_cache_aware"
targets = [{provider = "a"}]
`, nil)
	queued := func() uint64 {
		q := h.srv.QueuedPrefill()
		n, ok := q["a/m"]
		if !ok {
			t.Fatalf("QueuedPrefill %v: no route target a/m", q)
		}
		return n
	}
	// 400 bytes of text: the router's estimate is 100 prompt tokens.
	prompt := strings.Repeat("abcd", 100)
	type sent struct {
		script chan upstreamStep
		cancel context.CancelFunc
		done   chan int
	}
	send := func() sent {
		s := sent{script: make(chan upstreamStep, 2), done: make(chan int, 1)}
		steps <- s.script
		ctx, cancel := context.WithCancel(context.Background())
		s.cancel = cancel
		t.Cleanup(cancel) // runs before the servers close: no handler left hanging
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.api.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":`+quote(prompt)+`}]}`))
		go func() {
			resp, err := h.api.Client().Do(req)
			if err != nil {
				s.done <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			s.done <- resp.StatusCode
		}()
		return s
	}
	wantQueued := func(step string, want uint64) {
		t.Helper()
		testwait.For(t, 5*time.Second, fmt.Sprintf("%s: queued prefill %d", step, want), func() bool { return queued() == want })
	}

	// Each request waits until the engine holds it and took its script:
	// the engine hands out scripts in arrival order, so B must not overtake
	// A on its way there. (The engine's hit count rises before its handler
	// takes a script; under load B's handler could take A's script first.)
	arrived := func(n int64) {
		t.Helper()
		testwait.For(t, 5*time.Second, fmt.Sprintf("%d requests at the engine", n), func() bool { return took.Load() == n })
	}
	a := send()
	wantQueued("A picked, no first token", 100)
	arrived(1)
	b := send()
	wantQueued("B picked too", 200)
	arrived(2)
	a.script <- sendFirst
	wantQueued("A's first token", 100)
	b.script <- fail503
	if code := <-b.done; code != http.StatusServiceUnavailable {
		t.Fatalf("B: status %d, want the upstream's 503", code)
	}
	wantQueued("B failed before a first token", 0)
	c := send()
	wantQueued("C picked", 100)
	arrived(3)
	c.cancel()
	<-c.done
	wantQueued("C cancelled by its client", 0)
	a.script <- finish
	if code := <-a.done; code != http.StatusOK {
		t.Fatalf("A: status %d", code)
	}
	if got := queued(); got != 0 {
		t.Fatalf("after A finished: queued prefill %d, want 0 (taken off once, at its first token)", got)
	}
	mfs, err := h.srv.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != "rolter_target_queued_prefill_tokens" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if l := m.GetLabel(); len(l) == 1 && l[0].GetName() == "target" && l[0].GetValue() == "a/m" {
				found = m.GetGauge().GetValue() == 0
			}
		}
	}
	if !found {
		t.Error(`rolter_target_queued_prefill_tokens{target="a/m"} not exported at 0`)
	}
}

// fixedResidency reports n blocks resident on every target.
type fixedResidency int

func (f fixedResidency) ResidentPrefix(int, []uint64) (int, bool) { return int(f), f >= 0 }

// An attempt's queued prefill is its prompt minus the prefix the residency
// source reports resident, exact with token ids; without an EXACT view the
// whole prompt counts.
func TestUncachedTokens(t *testing.T) {
	keys := make([]uint64, 10) // 10 full blocks: 160 tokens
	tests := []struct {
		name string
		rc   strategies.RouteContext
		res  strategies.Residency
		want uint64
	}{
		{"text only: the estimate", strategies.RouteContext{PromptTokens: 100}, fixedResidency(3), 100},
		{"ids, 4 blocks resident", strategies.RouteContext{PromptTokens: 170, BlockKeys: keys}, fixedResidency(4), 170 - 64},
		{"ids, view not exact", strategies.RouteContext{PromptTokens: 170, BlockKeys: keys}, fixedResidency(-1), 170},
		{"ids, no residency source", strategies.RouteContext{PromptTokens: 170, BlockKeys: keys}, nil, 170},
		{"resident beyond the keys is capped", strategies.RouteContext{PromptTokens: 170, BlockKeys: keys}, fixedResidency(99), 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := uncachedTokens(&tc.rc, tc.res, 0); got != tc.want {
				t.Errorf("uncachedTokens = %d, want %d", got, tc.want)
			}
		})
	}
}
