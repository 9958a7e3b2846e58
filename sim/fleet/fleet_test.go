package fleet

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/rolter/rolter/sim/engine"
	"github.com/rolter/rolter/sim/workload"
	"github.com/rolter/rolter/strategies"
)

// seqTokens returns the tokens from..to-1 as ids.
func seqTokens(from, to int) []uint32 {
	out := make([]uint32, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, uint32(1000+i))
	}
	return out
}

func mustPrepare(t *testing.T, reqs []Request) *Workload {
	t.Helper()
	w, err := Prepare(reqs, 16)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func mustRun(t *testing.T, cfg Config, w *Workload) Result {
	t.Helper()
	res, err := Run(context.Background(), cfg, w)
	if err != nil {
		t.Fatalf("%s: %v", cfg.Strategy, err)
	}
	return res
}

// Three requests, two engines, hit counts worked out by hand from the
// engine's rules (16-token blocks; at most ⌊(len−1)/16⌋ blocks can hit):
// A = 64 tokens, B = C = A + 16 more tokens, each arriving long after the
// previous one finished.
func TestThreeRequestsHandChecked(t *testing.T) {
	a := seqTokens(0, 64)
	bc := seqTokens(0, 80)
	w := mustPrepare(t, []Request{
		{At: 0, Tokens: a, MaxTokens: 1},
		{At: 10 * time.Second, Tokens: bc, MaxTokens: 1},
		{At: 20 * time.Second, Tokens: bc, MaxTokens: 1},
	})
	tests := []struct {
		strategy  string
		cached    int
		perEngine []int
	}{
		// A → e0 (0 hits), B → e1 (cold: 0), C → e0 (A's 4 blocks: 64).
		{"round_robin", 64, []int{2, 1}},
		// A → e0, B → e0 (A's 4 blocks, limit ⌊79/16⌋ = 4: 64),
		// C → e0 (5 blocks resident, limit 4: 64).
		{Oracle, 128, []int{3, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.strategy, func(t *testing.T) {
			res := mustRun(t, Config{Strategy: tc.strategy, Engines: 2, Routers: 1, Seed: 1}, w)
			if res.PromptTokens != 64+80+80 || res.CachedTokens != tc.cached {
				t.Errorf("prompt %d cached %d, want 224 and %d", res.PromptTokens, res.CachedTokens, tc.cached)
			}
			if !reflect.DeepEqual(res.PerEngine, tc.perEngine) {
				t.Errorf("per engine %v, want %v", res.PerEngine, tc.perEngine)
			}
			if want := float64(tc.cached) / 224; res.HitRate != want {
				t.Errorf("hit rate %v, want %v", res.HitRate, want)
			}
		})
	}
}

// smallChat is a light multi-turn chat workload over shared system prompts.
func smallChat(t *testing.T, seed uint64) *Workload {
	t.Helper()
	reqs := workload.Chat{Seed: seed, Sessions: 12, Turns: 3, SystemPrompts: 3, SystemTokens: 256, UserTokens: 48,
		OutputTokens: 8, ZipfS: 1.2, Rate: 1, ThinkTime: 2 * time.Second}.Generate()
	return mustPrepare(t, FromWorkload(reqs))
}

func TestOracleNeverLosesOnHitRate(t *testing.T) {
	w := smallChat(t, 7)
	base := Config{Engines: 4, Routers: 1, Rate: 0.5, Seed: 3, GossipDelay: 250 * time.Millisecond,
		Engine: engine.Config{KVBlocks: 4000}}
	o := base
	o.Strategy = Oracle
	oracle := mustRun(t, o, w)
	if oracle.HitRate <= 0 {
		t.Fatalf("oracle hit rate %v on a workload with shared prefixes", oracle.HitRate)
	}
	for _, name := range strategies.Names() {
		t.Run(name, func(t *testing.T) {
			c := base
			c.Strategy = name
			res := mustRun(t, c, w)
			if res.Requests != w.Len() || res.Failed != 0 {
				t.Fatalf("%d requests, %d failed", res.Requests, res.Failed)
			}
			t.Logf("hit rate %.4f (oracle %.4f), per engine %v", res.HitRate, oracle.HitRate, res.PerEngine)
			if res.HitRate > oracle.HitRate {
				t.Errorf("hit rate %.4f beats the oracle's %.4f", res.HitRate, oracle.HitRate)
			}
		})
	}
}

func TestSameSeedSameResult(t *testing.T) {
	w := smallChat(t, 11)
	for _, name := range []string{"random", "power_of_two", "cache_aware", "precise_cache_aware", Oracle} {
		t.Run(name, func(t *testing.T) {
			cfg := Config{Strategy: name, Engines: 3, Routers: 3, Rate: 4, Seed: 5, Arrival: RandomArrival,
				GossipDelay: 100 * time.Millisecond, Engine: engine.Config{KVBlocks: 4000}}
			first := mustRun(t, cfg, w)
			second := mustRun(t, cfg, w)
			if !reflect.DeepEqual(first, second) {
				t.Errorf("same seed, different results:\n%+v\n%+v", first, second)
			}
		})
	}
	t.Run("seed matters", func(t *testing.T) {
		cfg := Config{Strategy: "random", Engines: 3, Routers: 1, Rate: 4, Seed: 5, Engine: engine.Config{KVBlocks: 4000}}
		a := mustRun(t, cfg, w)
		cfg.Seed = 6
		b := mustRun(t, cfg, w)
		if reflect.DeepEqual(a.PerEngine, b.PerEngine) {
			t.Errorf("seeds 5 and 6 spread requests identically: %v", a.PerEngine)
		}
	})
}

// A replica's view lags by the gossip delay: with a delay longer than the
// whole workload precise_cache_aware never sees residency and so cannot
// follow a shared prefix the way it does with fresh state.
func TestGossipDelayHidesResidency(t *testing.T) {
	w := smallChat(t, 13)
	cfg := Config{Strategy: "precise_cache_aware", Engines: 4, Routers: 1, Rate: 0.5, Seed: 1,
		Engine: engine.Config{KVBlocks: 4000}}
	fresh := mustRun(t, cfg, w)
	cfg.GossipDelay = time.Hour
	blind := mustRun(t, cfg, w)
	if blind.HitRate >= fresh.HitRate {
		t.Errorf("hit rate with an hour of delay %.4f, fresh %.4f: the delay is not modelled", blind.HitRate, fresh.HitRate)
	}
}

// Residency has a delay of its own (KV events travel apart from the
// engines' status): with hour-old queue state but fresh residency
// precise_cache_aware still follows shared prefixes, and hour-old
// residency hides them however fresh the queue state is.
func TestResidencyDelayIsApartFromGossipDelay(t *testing.T) {
	w := smallChat(t, 13)
	cfg := Config{Strategy: "precise_cache_aware", Engines: 4, Routers: 1, Rate: 0.5, Seed: 1,
		Engine: engine.Config{KVBlocks: 4000}, GossipDelay: time.Hour, ResidencyDelay: time.Millisecond}
	seen := mustRun(t, cfg, w)
	cfg.GossipDelay, cfg.ResidencyDelay = time.Millisecond, time.Hour
	hidden := mustRun(t, cfg, w)
	if hidden.HitRate >= seen.HitRate {
		t.Errorf("hit rate with hour-old residency %.4f, with hour-old queues only %.4f: residency does not follow its own delay",
			hidden.HitRate, seen.HitRate)
	}
}

func TestRejectsBadConfig(t *testing.T) {
	w := mustPrepare(t, []Request{{Tokens: seqTokens(0, 32), MaxTokens: 1}})
	for name, cfg := range map[string]Config{
		"unknown strategy":  {Strategy: "nope", Engines: 1, Routers: 1},
		"no engines":        {Strategy: "random", Routers: 1},
		"negative delay":    {Strategy: "random", Engines: 1, Routers: 1, GossipDelay: -1},
		"negative kv delay": {Strategy: "random", Engines: 1, Routers: 1, ResidencyDelay: -1},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Run(context.Background(), cfg, w); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestRenderTokensSharesPrefixes(t *testing.T) {
	a, fa, da := RenderTokens(seqTokens(0, 100), 64)
	b, fb, db := RenderTokens(seqTokens(0, 120), 1<<20)
	if len(a) > 64 || b[:len(a)] != a {
		t.Errorf("bounded text %q is not a prefix of %q", a, b[:80])
	}
	if fa >= fb || da == db || fb != len(b) {
		t.Errorf("full lengths %d/%d (text %d), digests %x/%x", fa, fb, len(b), da, db)
	}
}

func TestCapacityScalesWithEngines(t *testing.T) {
	w := smallChat(t, 1)
	one := Capacity(w, 1, engine.Config{})
	eight := Capacity(w, 8, engine.Config{})
	if one <= 0 || eight < 7.99*one || eight > 8.01*one {
		t.Errorf("capacity 1 engine %v, 8 engines %v", one, eight)
	}
}
