package strategies

import (
	"testing"
	"time"
)

func keysN(n int, seed uint64) []uint64 {
	ks := make([]uint64, n)
	for i := range ks {
		ks[i] = Mix64(seed + uint64(i))
	}
	return ks
}

func TestPreciseCacheAware(t *testing.T) {
	keys := keysN(10, 1)
	idx := newResidencyIndex(4)
	idx.add(0, keys[:3]...)            // 30%
	idx.add(1, keys[:8]...)            // 80%
	idx.add(2, keys[:5]...)            // 50%, but a gap at 5 …
	idx.store(2, keys[5], keys[6:]...) // … so the tail does not count
	idx.add(3, keys...)                // 100%, but its view is stale
	idx.unknown.set(3)
	tests := []struct {
		name  string
		keys  []uint64
		loads []uint64
		el    Eligible
		want  int
	}{
		{"longest resident prefix wins", keys, []uint64{0, 0, 0, 0}, nil, 1},
		{"load behind residency", keys, []uint64{0, 5, 0, 0}, nil, 1},
		{"gapped residency counts only the leading run", keys, []uint64{0, 0, 0, 0}, only(0, 2, 3), 2},
		{"stale view is neutral: its full residency does not count", keys, []uint64{0, 0, 0, 0}, only(3, 0), 0},
		{"no block keys: least load", nil, []uint64{3, 2, 0, 1}, nil, 2},
		{"ineligible best never wins", keys, []uint64{0, 0, 0, 0}, only(0, 3), 0},
	}
	for _, tc := range tests {
		for _, res := range []Residency{idx, perTargetOnly{idx}} {
			t.Run(tc.name, func(t *testing.T) {
				lb := mustBuild(t, "precise_cache_aware", Spec{Targets: targets(4), Residency: res, Rand: script()})
				if got := pickOK(t, lb, &RouteContext{BlockKeys: tc.keys}, tc.loads, tc.el); got != tc.want {
					t.Errorf("pick = %d, want %d", got, tc.want)
				}
			})
		}
	}
	t.Run("no residency source: least load", func(t *testing.T) {
		lb := mustBuild(t, "precise_cache_aware", Spec{Targets: targets(3), Rand: script()})
		if got := pickOK(t, lb, &RouteContext{BlockKeys: keys}, []uint64{2, 1, 3}, nil); got != 1 {
			t.Errorf("pick = %d, want 1", got)
		}
	})
}

func TestLMCacheAware(t *testing.T) {
	tests := []struct {
		name  string
		sig   cacheSignal
		loads []uint64
		want  int
	}{
		{"most free capacity wins", cacheSignal{0: {0.9, 1, 1}, 1: {0.2, 1, 1}, 2: {0.5, 1, 1}}, []uint64{0, 0, 0}, 1},
		{"saturated cache is neutral", cacheSignal{0: {1, 1, 1}, 1: {0.95, 1, 1}, 2: {1, 1, 1}}, []uint64{0, 0, 0}, 1},
		{"unavailable cache is neutral", cacheSignal{0: {0.5, 1, 1}, 1: {0.1, 0, 1}}, []uint64{0, 0, 0}, 0},
		{"stale signal is neutral", cacheSignal{0: {0.5, 1, 1}, 1: {0.1, 1, 0}}, []uint64{0, 0, 0}, 0},
		{"empty caches: load decides", cacheSignal{0: {0, 1, 1}, 1: {0, 1, 1}, 2: {0, 1, 1}}, []uint64{2, 1, 3}, 1},
		{"no signal at all: load decides", nil, []uint64{2, 3, 1}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Spec{Targets: targets(3), Rand: script()}
			if tc.sig != nil {
				s.Cache = tc.sig
			}
			lb := mustBuild(t, "lmcache_aware", s)
			if got := pickOK(t, lb, &RouteContext{}, tc.loads, nil); got != tc.want {
				t.Errorf("pick = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestLoRAAware(t *testing.T) {
	t.Run("LRU evicts the least recent adapter", func(t *testing.T) {
		lb := mustBuild(t, "lora_aware", Spec{Targets: targets(2), MaxLoRAs: 2, Rand: script()})
		res := lb.(*Pipeline).scorers[0].Scorer.(*LoRAResidency)
		lb.Observe(0, &RouteContext{Adapter: "a"})
		lb.Observe(0, &RouteContext{Adapter: "b"})
		lb.Observe(0, &RouteContext{Adapter: "a"}) // b is now least recent
		lb.Observe(0, &RouteContext{Adapter: "c"})
		for a, want := range map[string]bool{"a": true, "b": false, "c": true} {
			if got := res.Resident(0, a); got != want {
				t.Errorf("Resident(0, %q) = %v, want %v", a, got, want)
			}
		}
	})
	t.Run("default size mirrors vLLM --max-loras (1)", func(t *testing.T) {
		lb := mustBuild(t, "lora_aware", Spec{Targets: targets(1)})
		res := lb.(*Pipeline).scorers[0].Scorer.(*LoRAResidency)
		lb.Observe(0, &RouteContext{Adapter: "a"})
		lb.Observe(0, &RouteContext{Adapter: "b"})
		if res.Resident(0, "a") || !res.Resident(0, "b") {
			t.Error("default LRU holds more than one adapter")
		}
	})
	warmPrompt := sysPrompt + "tell me a story"
	tests := []struct {
		name    string
		adapter string
		known   adapterView
		loads   []uint64
		el      Eligible
		want    int
	}{
		// Target 0 served adapter x; target 1 holds the prompt's prefix
		// (served it with adapter y); target 2 is idle and cold.
		{"residency outranks prefix and load", "x", nil, []uint64{4, 0, 0}, nil, 0},
		{"no adapter: inert, prefix and load decide", "", nil, []uint64{0, 0, 0}, nil, 1},
		{"cold adapter scores 0 everywhere", "z", nil, []uint64{0, 0, 0}, nil, 1},
		{"ineligible resident target", "x", nil, []uint64{0, 0, 0}, only(1, 2), 1},
		{"engine view overrides learned residency", "x", adapterView{0: {"y": true}, 2: {"x": true}}, []uint64{0, 0, 0}, nil, 2},
		{"unknown engine view falls back to learned", "x", adapterView{0: nil}, []uint64{0, 0, 0}, nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Spec{Targets: targets(3), MaxLoRAs: 4, Rand: script()}
			if tc.known != nil {
				s.Adapters = tc.known
			}
			lb := mustBuild(t, "lora_aware", s)
			lb.Observe(0, &RouteContext{Adapter: "x", Prompt: "something else entirely"})
			lb.Observe(1, &RouteContext{Adapter: "y", Prompt: warmPrompt})
			if got := pickOK(t, lb, &RouteContext{Adapter: tc.adapter, Prompt: warmPrompt}, tc.loads, tc.el); got != tc.want {
				t.Errorf("pick = %d, want %d", got, tc.want)
			}
		})
	}
	t.Run("every target resident: load balances", func(t *testing.T) {
		lb := mustBuild(t, "lora_aware", Spec{Targets: targets(3), MaxLoRAs: 4, Rand: script()})
		for i := range 3 {
			lb.Observe(i, &RouteContext{Adapter: "x"})
		}
		if got := pickOK(t, lb, &RouteContext{Adapter: "x"}, []uint64{3, 1, 2}, nil); got != 1 {
			t.Errorf("pick = %d, want least-loaded 1", got)
		}
	})
}

func TestPredictedLatency(t *testing.T) {
	tr := NewTracker()
	ts := targets(3)
	lb := mustBuild(t, "predicted_latency", Spec{Targets: ts, Tracker: tr, Rand: script()})
	stats := []*TargetStats{tr.Target("t0"), tr.Target("t1"), tr.Target("t2")}
	long := &RouteContext{PromptTokens: 16000}
	short := &RouteContext{PromptTokens: 100}
	// Cold: least load, whatever the prompt.
	if got := pickOK(t, lb, long, []uint64{2, 1, 3}, nil); got != 1 {
		t.Fatalf("cold: pick = %d, want least-loaded 1", got)
	}
	// t0 prefills fast but queues badly; t1 the opposite; t2 stays cold.
	r := NewRand(5)
	teach := func(s *TargetStats, w0, w1, w2 float64) {
		for range 2000 {
			q := uint64(r.IntN(10))
			k := r.Float64() * 16
			s.End(Outcome{Success: true, Latency: time.Duration((w0 + w1*float64(q) + w2*k) * float64(time.Millisecond)), QueueDepth: q, PromptTokens: int(k * 1000)})
		}
	}
	teach(stats[0], 20, 200, 10)
	teach(stats[1], 20, 10, 200)
	busy := []uint64{4, 4, 0}
	if got := pickOK(t, lb, short, busy, only(0, 1)); got != 1 {
		t.Errorf("short prompt into deep queues: pick = %d, want 1 (cheap queue)", got)
	}
	if got := pickOK(t, lb, long, []uint64{0, 0, 0}, only(0, 1)); got != 0 {
		t.Errorf("long prompt into idle boxes: pick = %d, want 0 (fast prefill)", got)
	}
	// An unpredicted target is unknown, not slow and not fast: it does
	// not outrank a predicted one on load alone.
	if got := pickOK(t, lb, long, []uint64{1, 1, 0}, nil); got != 0 {
		t.Errorf("with a cold idle target: pick = %d, want predicted 0", got)
	}
}

// TestResidencyIndexBatchMatchesPerTarget checks the fake index's batch
// answer (galloping over closed sets) against the plain per-target walk,
// over chains with gaps and stale targets.
func TestResidencyIndexBatchMatchesPerTarget(t *testing.T) {
	r := NewRand(17)
	for round := range 50 {
		n := 1 + r.IntN(130)
		keys := keysN(200, uint64(round))
		idx := newResidencyIndex(n)
		for i := range n {
			run := r.IntN(201)
			idx.add(i, keys[:run]...)
			if run+2 < 200 && r.IntN(2) == 0 { // a detached later piece
				from := run + 1 + r.IntN(200-run-1)
				idx.store(i, keys[from-1], keys[from:]...)
			}
			if r.IntN(10) == 0 {
				idx.unknown.set(i)
			}
		}
		q := keys[:r.IntN(201)]
		out := make([]int, n)
		idx.ResidentPrefixes(q, out)
		for i := range n {
			want, ok := idx.ResidentPrefix(i, q)
			if !ok {
				want = -1
			}
			if out[i] != want {
				t.Fatalf("round %d target %d: batch %d, per-target %d", round, i, out[i], want)
			}
		}
	}
}
