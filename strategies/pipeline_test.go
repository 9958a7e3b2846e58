package strategies

import (
	"testing"
	"time"
)

func TestPipelineSessionAffinity(t *testing.T) {
	clk := newClock()
	lb := mustBuild(t, "pipeline", Spec{Targets: targets(3), Clock: clk, Rand: script()})
	sess := &RouteContext{SessionKey: "conv-1"}
	lb.Observe(2, sess)
	loads := []uint64{1, 2, 2}
	// 2: 1 (session) + 1 (weight) + 0 (load) = 2 beats 0: 0 + 1 + 0.5 = 1.5.
	if got := pickOK(t, lb, sess, loads, nil); got != 2 {
		t.Fatalf("pinned session: pick = %d, want 2", got)
	}
	if got := pickOK(t, lb, &RouteContext{SessionKey: "other"}, loads, nil); got != 0 {
		t.Fatalf("other session: pick = %d, want least-loaded 0", got)
	}
	if got := pickOK(t, lb, sess, loads, only(0, 1)); got != 0 {
		t.Fatalf("pinned target ineligible: pick = %d, want 0", got)
	}
	clk.Advance(SessionTTL - time.Second)
	if got := pickOK(t, lb, sess, loads, nil); got != 2 {
		t.Fatalf("pin within TTL: pick = %d, want 2", got)
	}
	clk.Advance(2 * time.Second)
	if got := pickOK(t, lb, sess, loads, nil); got != 0 {
		t.Fatalf("pin past TTL: pick = %d, want least-loaded 0", got)
	}
}

func TestPipelinePinSessionRemote(t *testing.T) {
	clk := newClock()
	lb := mustBuild(t, "pipeline", Spec{Targets: targets(3), Clock: clk, Rand: script()})
	p := lb.(*Pipeline)
	p.PinSession("remote", 1, clk.Now())
	p.PinSession("remote", 2, clk.Now().Add(-time.Minute)) // older: ignored
	if got := pickOK(t, lb, &RouteContext{SessionKey: "remote"}, []uint64{1, 2, 1}, nil); got != 1 {
		t.Errorf("pick = %d, want remotely pinned 1", got)
	}
	p.ObservePrefixRemote(0, sysPrompt)
	// 0: prefix ≈ 0.98 + weight 1 + load 0.5 beats 2: weight 1 + load 0.5.
	if got := pickOK(t, lb, &RouteContext{Prompt: sysPrompt + "x"}, []uint64{1, 2, 1}, nil); got != 0 {
		t.Errorf("pick = %d, want 0 warm from a remote prefix", got)
	}
}

func TestPipelineScorers(t *testing.T) {
	tests := []struct {
		name    string
		weights []int
		loads   []uint64
		el      Eligible
		script  []int
		want    int
	}{
		{"static weight wins at equal load", []int{1, 3, 1}, []uint64{0, 0, 0}, nil, nil, 1},
		{"load outweighs a small weight gap", []int{2, 3, 1}, []uint64{0, 4, 4}, nil, nil, 0},
		// Weights normalised over eligible targets only: with 1 excluded,
		// 0 (weight 2 of max 2) beats 2 (1 of 2).
		{"ineligible max weight does not normalise", []int{2, 8, 1}, []uint64{0, 0, 0}, only(0, 2), nil, 0},
		{"ties broken by the scripted draw (third)", []int{1, 1, 1}, []uint64{0, 0, 0}, nil, []int{2}, 2},
		{"ties broken by the scripted draw (first)", []int{1, 1, 1}, []uint64{0, 0, 0}, nil, []int{0}, 0},
		{"ties among eligible only", []int{1, 1, 1}, []uint64{0, 0, 0}, only(0, 2), []int{1}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lb := mustBuild(t, "pipeline", Spec{Targets: weightedTargets(tc.weights...), Rand: script(tc.script...)})
			if got := pickOK(t, lb, &RouteContext{}, tc.loads, tc.el); got != tc.want {
				t.Errorf("pick = %d, want %d", got, tc.want)
			}
		})
	}
}

// fixedScorer returns the same raw scores for every pick.
type fixedScorer []float64

func (f fixedScorer) Score(_ *Cycle, cands []int, out []float64) {
	for k, t := range cands {
		out[k] = f[t]
	}
}

// dropFilter removes one target.
type dropFilter int

func (d dropFilter) Filter(_ *Cycle, cands []int) []int {
	kept := cands[:0]
	for _, t := range cands {
		if t != int(d) {
			kept = append(kept, t)
		}
	}
	return kept
}

func TestPipelineFrameworkClampsAndFilters(t *testing.T) {
	// Raw scores 5, 0.9, -3 clamp to 1, 0.9, 0; with a second scorer
	// favouring target 1 by 0.2, 1 wins (0.9+0.2 > 1+0). Unclamped, 0
	// would win with 5.
	p := NewPipeline("custom", 3, nil, []WeightedScorer{
		{fixedScorer{5, 0.9, -3}, 1},
		{fixedScorer{0, 0.2, 0}, 1},
	}, MaxScorePicker{script()})
	if got := pickOK(t, p, &RouteContext{}, nil, nil); got != 1 {
		t.Errorf("pick = %d, want 1", got)
	}
	f := NewPipeline("filtered", 3, []Filter{dropFilter(1)}, []WeightedScorer{{fixedScorer{0, 1, 0.5}, 1}}, MaxScorePicker{script()})
	if got := pickOK(t, f, &RouteContext{}, nil, nil); got != 2 {
		t.Errorf("filtered pick = %d, want 2", got)
	}
	if _, ok := f.PickEligible(&RouteContext{}, nil, only(1)); ok {
		t.Error("pick succeeded with every candidate filtered out")
	}
}

func TestCheapest(t *testing.T) {
	priced := func(costs ...float64) []Target {
		ts := targets(len(costs))
		for i, c := range costs {
			ts[i].CostInPerMtok, ts[i].CostOutPerMtok = c/2, c/2
		}
		return ts
	}
	tests := []struct {
		name  string
		costs []float64
		loads []uint64
		el    Eligible
		want  int
	}{
		{"cheapest wins", []float64{3, 1, 2}, []uint64{0, 0, 0}, nil, 1},
		{"cheapest wins through load", []float64{3, 1, 2}, []uint64{0, 10, 0}, nil, 1},
		{"load breaks price ties", []float64{2, 2, 2}, []uint64{3, 1, 2}, nil, 1},
		{"close prices: load decides", []float64{1.1, 1, 5}, []uint64{0, 10, 0}, nil, 0},
		{"ineligible cheapest", []float64{3, 1, 2}, []uint64{0, 0, 0}, only(0, 2), 2},
		{"unpriced targets are neutral", []float64{0, 0}, []uint64{2, 1}, nil, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lb := mustBuild(t, "cheapest", Spec{Targets: priced(tc.costs...), Rand: script()})
			if got := pickOK(t, lb, &RouteContext{}, tc.loads, tc.el); got != tc.want {
				t.Errorf("pick = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestFastest(t *testing.T) {
	ts := targets(3)
	tr := NewTracker()
	lb := mustBuild(t, "fastest", Spec{Targets: ts, Tracker: tr, Rand: script()})
	stats := []*TargetStats{tr.Target("t0"), tr.Target("t1"), tr.Target("t2")}
	// Cold route: load decides.
	if got := pickOK(t, lb, &RouteContext{}, []uint64{2, 0, 1}, nil); got != 1 {
		t.Fatalf("cold: pick = %d, want 1", got)
	}
	for range 5 {
		serve(lb, stats, 0, &RouteContext{}, 100*time.Millisecond, time.Time{})
		serve(lb, stats, 1, &RouteContext{}, 300*time.Millisecond, time.Time{})
		serve(lb, stats, 2, &RouteContext{}, 200*time.Millisecond, time.Time{})
	}
	if got := pickOK(t, lb, &RouteContext{}, []uint64{1, 0, 0}, nil); got != 0 {
		t.Errorf("pick = %d, want fastest 0", got)
	}
	if got := pickOK(t, lb, &RouteContext{}, nil, only(1, 2)); got != 2 {
		t.Errorf("pick = %d, want fastest eligible 2", got)
	}
	// Failures do not teach the EWMA: fast failures leave 1 slow.
	for range 20 {
		stats[1].Begin()
		stats[1].End(Outcome{Success: false, Latency: time.Millisecond})
	}
	if got := pickOK(t, lb, &RouteContext{}, nil, only(1, 2)); got != 2 {
		t.Errorf("after fast failures: pick = %d, want 2", got)
	}
}
