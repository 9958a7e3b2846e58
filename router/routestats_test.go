package router

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
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

// The hit rate is the engine's own count: cached ÷ prompt tokens from the
// usage it reported, per target; a target whose engine reports no cached
// tokens has none.
func TestRouteStatsPrefixCacheHitRate(t *testing.T) {
	cached := newEngine(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"say \"prompt_tokens\": 999"}}],`+
			`"usage":{"prompt_tokens": 200, "completion_tokens": 3, "total_tokens": 203, "prompt_tokens_details": {"cached_tokens": 150}}}`)
	})
	plain := newEngine(t, okChat)
	h := newHarness(t, providers("cached", cached.URL+"/v1", "plain", plain.URL+"/v1")+`
[[routes]]
model = "m"
strategy = "round_robin"
targets = [{provider = "cached"}, {provider = "plain"}]
`, nil)
	for range 6 {
		if code, _, body := h.chat("m"); code != 200 {
			t.Fatalf("chat: %d %s", code, body)
		}
	}
	w := routestats.Summarize(h.clock.Now(), map[string][]routestats.Route{"r1": h.srv.RouteStats()}).Routes[0].Windows["5m"]
	for _, tv := range w.Targets {
		switch tv.Target {
		case "cached/m":
			if tv.PrefixCacheHitRate == nil || *tv.PrefixCacheHitRate != 0.75 {
				t.Errorf("cached/m hit rate %v, want 0.75", tv.PrefixCacheHitRate)
			}
		case "plain/m":
			if tv.PrefixCacheHitRate != nil {
				t.Errorf("plain/m reports no cached tokens, hit rate %v", *tv.PrefixCacheHitRate)
			}
		}
	}
}

func TestUsageTail(t *testing.T) {
	usage := `data: {"choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":9,"prompt_tokens_details":{"cached_tokens":1024}}}` + "\n\ndata: [DONE]\n\n"
	body := strings.Repeat(`data: {"choices":[{"delta":{"content":"tok"}}]}`+"\n\n", 40) + usage
	for _, chunk := range []int{1, 7, 64, 511, 512, 4096} {
		var u usageTail
		for i := 0; i < len(body); i += chunk {
			u.write([]byte(body[i:min(i+chunk, len(body))]))
		}
		if p, c, ok := u.tokens(); !ok || p != 1200 || c != 1024 {
			t.Errorf("chunks of %d: %d, %d, %v; want 1200, 1024, true", chunk, p, c, ok)
		}
	}
	var u usageTail
	u.write([]byte(`{"usage":{"prompt_tokens":12,"prompt_tokens_details":null}}`))
	if _, _, ok := u.tokens(); ok {
		t.Error("no cached_tokens reported, yet a hit rate")
	}
}

// The tail's one backward pass finds what a separate bytes.LastIndex per
// member name finds: the last of each, wherever the other one is, with
// names cut off at the tail's start, repeated, or only one of them there.
func TestUsageTailFindsTheLastOfEachName(t *testing.T) {
	last := func(b []byte, key string) int { return bytes.LastIndex(b, []byte(key)) }
	for name, tail := range map[string]string{
		"usage last":           `{"content":"kk k","usage":{"prompt_tokens":30,"prompt_tokens_details":{"cached_tokens":16}}}`,
		"cached first":         `{"prompt_tokens_details":{"cached_tokens":3},"prompt_tokens":9}`,
		"repeated":             `{"prompt_tokens":1,"cached_tokens":1} {"prompt_tokens":50,"cached_tokens":20} {"x":"kkkk"}`,
		"cut at the start":     `t_tokens":5,"cached_tokens":2}`,
		"name at the very end": `{"prompt_tokens":7,"cached_tokens"`,
		"none":                 `data: {"choices":[{"delta":{"content":"keep thinking"}}]}`,
		"only prompt":          `{"usage":{"prompt_tokens":12,"prompt_tokens_details":null}}`,
		"escaped in a string":  `{"content":"\"prompt_tokens\":99","usage":{"prompt_tokens":4,"prompt_tokens_details":{"cached_tokens":0}}}`,
	} {
		b := []byte(tail)
		p, c := lastKeys(b)
		if wp, wc := last(b, `"prompt_tokens"`), last(b, `"cached_tokens"`); p != wp || c != wc {
			t.Errorf("%s: at %d, %d; bytes.LastIndex finds %d, %d", name, p, c, wp, wc)
		}
	}
}
