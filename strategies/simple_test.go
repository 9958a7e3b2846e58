package strategies

import (
	"math"
	"slices"
	"testing"
)

func TestRegistry(t *testing.T) {
	want := []string{"adaptive", "cache_aware", "cheapest", "consistent_hash", "fastest", "lmcache_aware",
		"lora_aware", "pipeline", "power_of_two", "precise_cache_aware", "predicted_latency", "random",
		"round_robin", "weighted"}
	got := Names()
	if len(got) != len(want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Names() = %v, want %v", got, want)
		}
		lb := mustBuild(t, want[i], Spec{Targets: targets(3)})
		if lb.Name() != want[i] {
			t.Errorf("Build(%q).Name() = %q", want[i], lb.Name())
		}
	}
	if _, err := Build("nope", Spec{Targets: targets(1)}); err == nil {
		t.Error("Build(nope) succeeded")
	}
	for name, uses := range map[string]bool{"weighted": true, "pipeline": true, "adaptive": true, "cache_aware": false, "round_robin": false, "lora_aware": false} {
		if UsesWeights(name) != uses {
			t.Errorf("UsesWeights(%q) = %v, want %v", name, !uses, uses)
		}
	}
}

func TestRoundRobinSkipsIneligible(t *testing.T) {
	lb := mustBuild(t, "round_robin", Spec{Targets: targets(3)})
	var got []int
	for range 6 {
		got = append(got, pickOK(t, lb, nil, nil, only(0, 2)))
	}
	want := []int{0, 2, 2, 0, 2, 2}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("picks = %v, want %v", got, want)
		}
	}
}

// A retry must not move the rotation: with target 0 failing every
// request, the requests' first picks still alternate 0, 1, 0, 1, so only
// every other request pays a failed attempt (finding B).
func TestRotationIgnoresRetries(t *testing.T) {
	for _, name := range []string{"round_robin", "weighted"} {
		t.Run(name, func(t *testing.T) {
			lb := mustBuild(t, name, Spec{Targets: targets(2)})
			var first []int
			for range 6 {
				ctx := &RouteContext{}
				i := pickOK(t, lb, ctx, nil, nil)
				first = append(first, i)
				if i == 0 { // target 0 failed: retry on the other
					ctx.Retry = true
					if r := pickOK(t, lb, ctx, nil, only(1)); r != 1 {
						t.Fatalf("retry picked %d", r)
					}
				}
			}
			if want := []int{0, 1, 0, 1, 0, 1}; !slices.Equal(first, want) {
				t.Fatalf("first picks %v, want %v", first, want)
			}
		})
	}
}

func TestRandom(t *testing.T) {
	tests := []struct {
		name   string
		script []int
		el     Eligible
		want   int
	}{
		{"first draw eligible", []int{2}, nil, 2},
		{"rejects ineligible draws", []int{1, 1, 3}, only(0, 3), 3},
		{"exact count after misses", []int{1, 1, 1, 1, 1, 1, 1, 1, 1}, only(0, 3), 3},
		{"single eligible", []int{0, 0, 0, 0, 0, 0, 0, 0, 0}, only(2), 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lb := mustBuild(t, "random", Spec{Targets: targets(4), Rand: script(tc.script...)})
			if got := pickOK(t, lb, nil, nil, tc.el); got != tc.want {
				t.Errorf("pick = %d, want %d", got, tc.want)
			}
		})
	}
	t.Run("uniform over eligible", func(t *testing.T) {
		lb := mustBuild(t, "random", Spec{Targets: targets(5), Rand: NewRand(7)})
		counts := make([]int, 5)
		const N = 40000
		for range N {
			counts[pickOK(t, lb, nil, nil, only(0, 1, 4))]++
		}
		for i, c := range counts {
			want := 0.0
			if i == 0 || i == 1 || i == 4 {
				want = N / 3.0
			}
			if math.Abs(float64(c)-want) > 4*math.Sqrt(N*(1/3.0)*(2/3.0)) {
				t.Errorf("target %d got %d picks, want ≈ %.0f", i, c, want)
			}
		}
	})
}

func TestPowerOfTwo(t *testing.T) {
	tests := []struct {
		name   string
		script []int
		loads  []uint64
		queued []uint64 // RouteContext.QueuedPrefill; nil: no signal
		el     Eligible
		want   int
	}{
		{"second draw less loaded", []int{0, 2}, []uint64{5, 0, 1, 9}, nil, nil, 2},
		{"first draw less loaded", []int{1, 3}, []uint64{5, 0, 1, 9}, nil, nil, 1},
		{"equal loads keep first draw", []int{3, 0}, []uint64{4, 0, 0, 4}, nil, nil, 3},
		{"ineligible idle target never drawn", []int{1, 1, 1, 1, 1, 1, 1, 1, 0, 3}, []uint64{7, 0, 9, 3}, nil, only(0, 2, 3), 3},
		{"one eligible", nil, []uint64{7, 0, 9, 3}, nil, only(2), 2},
		// One long prompt queued on 2 outweighs three short ones on 0.
		{"shorter prefill queue wins over fewer requests", []int{0, 2}, []uint64{3, 0, 1, 0}, []uint64{3000, 0, 30000, 0}, nil, 0},
		{"shorter prefill queue on the second draw", []int{2, 0}, []uint64{3, 0, 1, 0}, []uint64{3000, 0, 30000, 0}, nil, 0},
		{"equal queues: the request load decides", []int{0, 2}, []uint64{3, 0, 1, 0}, []uint64{0, 0, 0, 0}, nil, 2},
		{"a signal shorter than the targets is ignored", []int{0, 2}, []uint64{3, 0, 1, 0}, []uint64{0, 0}, nil, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lb := mustBuild(t, "power_of_two", Spec{Targets: targets(4), Rand: script(tc.script...)})
			var ctx *RouteContext
			if tc.queued != nil {
				ctx = &RouteContext{QueuedPrefill: tc.queued}
			}
			if got := pickOK(t, lb, ctx, tc.loads, tc.el); got != tc.want {
				t.Errorf("pick = %d, want %d", got, tc.want)
			}
		})
	}
}

// recordingRand records the values it hands out, so a property test can
// reconstruct the two draws power_of_two made.
type recordingRand struct {
	Rand
	got []int
}

func (r *recordingRand) IntN(n int) int { v := r.Rand.IntN(n); r.got = append(r.got, v); return v }

func TestPowerOfTwoNeverPicksMoreLoadedDraw(t *testing.T) {
	rr := &recordingRand{Rand: NewRand(3)}
	lb := mustBuild(t, "power_of_two", Spec{Targets: targets(16), Rand: rr})
	loads := make([]uint64, 16)
	seed := NewRand(4)
	for range 5000 {
		for i := range loads {
			loads[i] = uint64(seed.IntN(6))
		}
		rr.got = rr.got[:0]
		got := pickOK(t, lb, nil, loads, nil)
		// The first value is the first draw; the second draw is the last
		// value (a repeat of the first is redrawn).
		a, b := rr.got[0], rr.got[len(rr.got)-1]
		if a == b {
			t.Fatalf("drew the same target twice: %v", rr.got)
		}
		if got != a && got != b {
			t.Fatalf("picked %d, neither draw %v", got, rr.got)
		}
		other := a + b - got
		if loads[got] > loads[other] {
			t.Fatalf("picked %d (load %d) over %d (load %d)", got, loads[got], other, loads[other])
		}
	}
}
