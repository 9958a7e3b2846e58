package strategies

import (
	"math"
	"testing"

	"github.com/rolter/rolter/adaptive"
)

// The explanation of a pipeline pick names the scorers' terms of the
// chosen target (they add up to its total) and the runner-up, and the pick
// itself is the one PickEligible makes.
func TestPickExplainedPipeline(t *testing.T) {
	s := Spec{Targets: targets(3), Rand: NewRand(1), Clock: newClock()}
	s.Targets[2].Weight = 4
	lb := mustBuild(t, "pipeline", s)
	loads := []uint64{5, 0, 2}
	var ex Explanation
	got, ok := PickExplained(lb, &RouteContext{}, loads, only(0, 2), &ex)
	if !ok || got != 2 {
		t.Fatalf("pick = %d, %v; want 2 (heaviest weight, target 1 ineligible)", got, ok)
	}
	if want := pickOK(t, lb, &RouteContext{}, loads, only(0, 2)); want != got {
		t.Fatalf("PickExplained chose %d, PickEligible %d", got, want)
	}
	if ex.Eligible != 2 || ex.RunnerUp != 0 || ex.Mode != "scored" || ex.Fallback != "" {
		t.Fatalf("explanation = %+v", ex)
	}
	sum := 0.0
	names := map[string]bool{}
	for _, c := range ex.Components {
		sum += c.Weight * c.Score
		names[c.Name] = true
	}
	if math.Abs(sum-ex.Score) > 1e-9 || !(ex.RunnerUpScore < ex.Score) {
		t.Fatalf("components %+v sum to %v, score %v, runner-up %v", ex.Components, sum, ex.Score, ex.RunnerUpScore)
	}
	for _, n := range []string{"session_affinity", "static_weight", "least_prefill", "prefix_affinity"} {
		if !names[n] {
			t.Fatalf("component %q missing from %+v", n, ex.Components)
		}
	}
}

// Identical candidates make the pick a draw, which the explanation calls
// an all-neutral fallback.
func TestPickExplainedAllNeutral(t *testing.T) {
	lb := mustBuild(t, "pipeline", Spec{Targets: targets(3), Rand: NewRand(1), Clock: newClock()})
	var ex Explanation
	if _, ok := PickExplained(lb, &RouteContext{}, []uint64{1, 1, 1}, nil, &ex); !ok {
		t.Fatal("no pick")
	}
	if ex.Fallback != "all_neutral" || ex.Mode != "tie" || ex.Eligible != 3 {
		t.Fatalf("explanation = %+v", ex)
	}
}

// adaptive says why the blend did not decide: the kill switch, or too
// little evidence.
func TestPickExplainedAdaptiveFallback(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy adaptive.Policy
		want   string
	}{
		{"kill switch", adaptive.Policy{Enabled: false, LatencyWeight: 1}, "kill_switch"},
		{"cold", adaptive.Policy{Enabled: true, LatencyWeight: 1, MinSamples: 100}, "cold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Spec{Targets: targets(2), Rand: NewRand(1), Clock: newClock(), Policy: NewPolicyHolder(tc.policy)}
			lb := mustBuild(t, "adaptive", s)
			var ex Explanation
			if _, ok := PickExplained(lb, &RouteContext{}, []uint64{0, 3}, nil, &ex); !ok {
				t.Fatal("no pick")
			}
			if ex.Fallback != tc.want || ex.Eligible != 2 {
				t.Fatalf("explanation = %+v, want fallback %q", ex, tc.want)
			}
		})
	}
}

// A strategy without scores still reports how many targets it chose from.
func TestPickExplainedUnscored(t *testing.T) {
	lb := mustBuild(t, "round_robin", Spec{Targets: targets(4), Rand: NewRand(1), Clock: newClock()})
	var ex Explanation
	if _, ok := PickExplained(lb, nil, make([]uint64, 4), only(1, 3), &ex); !ok {
		t.Fatal("no pick")
	}
	if ex.Eligible != 2 || ex.Mode != "unscored" || ex.RunnerUp != -1 {
		t.Fatalf("explanation = %+v", ex)
	}
}

// cache_aware says whether a prefix match decided and, when not, why it
// spread by load.
func TestPickExplainedCacheAware(t *testing.T) {
	lb := mustBuild(t, "cache_aware", Spec{Targets: targets(3), Rand: NewRand(1), Clock: newClock()})
	ctx := &RouteContext{Prompt: "You are a helpful assistant. Summarise the following document in three lines."}
	var ex Explanation
	if _, ok := PickExplained(lb, ctx, []uint64{0, 0, 0}, nil, &ex); !ok || ex.Mode != "spread" || ex.Fallback != "below_threshold" {
		t.Fatalf("cold index: %+v", ex)
	}
	lb.Observe(1, ctx)
	got, ok := PickExplained(lb, ctx, []uint64{1, 0, 0}, nil, &ex)
	if !ok || got != 1 || ex.Mode != "prefix_match" || ex.Score != 1 || ex.Eligible != 3 {
		t.Fatalf("warm index: pick %d, %+v; want target 1 by its full prefix match", got, ex)
	}
	if _, ok := PickExplained(lb, ctx, []uint64{0, 9, 0}, nil, &ex); !ok || ex.Fallback != "load_guard" {
		t.Fatalf("holder overloaded: %+v", ex)
	}
}

// When prefill wait decides, precise_cache_aware's fallback scorers sit the
// pick out: the least queued target wins, and the explanation still lists
// every scorer, the fallbacks at 0.
func TestPickExplainedPreciseFallbacksAbstain(t *testing.T) {
	lb := mustBuild(t, "precise_cache_aware", Spec{Targets: targets(4), Rand: NewRand(1)})
	ctx := &RouteContext{PromptTokens: 100, QueuedPrefill: []uint64{900, 40, 700, 5000}}
	var ex Explanation
	got, ok := PickExplained(lb, ctx, []uint64{9, 0, 9, 9}, nil, &ex)
	if !ok || got != 1 {
		t.Fatalf("pick = %d, %v; want 1 (the least queued prefill)", got, ok)
	}
	if want := pickOK(t, lb, ctx, []uint64{9, 0, 9, 9}, nil); want != got {
		t.Fatalf("PickExplained chose %d, PickEligible %d", got, want)
	}
	if len(ex.Components) != 3 {
		t.Fatalf("components %+v, want prefill wait and both fallbacks", ex.Components)
	}
	for _, c := range ex.Components {
		if (c.Name == "prefill_wait") != (c.Score == 1) {
			t.Fatalf("component %+v: want prefill_wait at 1 and the fallbacks at 0 (%+v)", c, ex.Components)
		}
	}
}
