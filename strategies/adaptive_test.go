package strategies

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/adaptive"
)

type adaptiveRig struct {
	lb     *Adaptive
	stats  []*TargetStats
	policy *PolicyHolder
	clock  *fakeClock
}

func newAdaptiveRig(t *testing.T, n int, p adaptive.Policy, r Rand) *adaptiveRig {
	t.Helper()
	tr := NewTracker()
	ph := NewPolicyHolder(p)
	clk := newClock()
	ts := targets(n)
	lb := mustBuild(t, "adaptive", Spec{Targets: ts, Tracker: tr, Policy: ph, Rand: r, Clock: clk}).(*Adaptive)
	stats := make([]*TargetStats, n)
	for i, tg := range ts {
		stats[i] = tr.Target(tg.ID)
	}
	return &adaptiveRig{lb: lb, stats: stats, policy: ph, clock: clk}
}

// sample records k requests of latency ms the route served on target i.
func (r *adaptiveRig) sample(i, k int, ms float64) {
	for range k {
		r.stats[i].Begin()
		r.stats[i].End(Outcome{Success: true, Latency: time.Duration(ms * float64(time.Millisecond)), At: r.clock.Now()})
		r.lb.Served(i)
	}
}

func enabledPolicy(minSamples int) adaptive.Policy {
	p := adaptive.DefaultPolicy()
	p.Enabled, p.MinSamples, p.ExplorationRatio = true, minSamples, 0
	return p
}

func TestAdaptiveEngagesOnlyWhenAllConditionsHold(t *testing.T) {
	tests := []struct {
		name    string
		enabled bool
		weights [3]float64
		served  int // completions spread over the sampled targets
		sampled int // targets with latency samples
		engaged bool
	}{
		{"all three hold", true, [3]float64{1, 0.5, 0.25}, 50, 2, true},
		{"kill switch off", false, [3]float64{1, 0.5, 0.25}, 50, 2, false},
		{"all-zero blend", true, [3]float64{0, 0, 0}, 50, 2, false},
		{"below min_samples", true, [3]float64{1, 0.5, 0.25}, 48, 2, false},
		{"latency on one target only", true, [3]float64{1, 0.5, 0.25}, 60, 1, false},
		{"one non-zero weight suffices", true, [3]float64{0, 0, 2}, 51, 3, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := enabledPolicy(50)
			p.Enabled = tc.enabled
			p.LatencyWeight, p.CostWeight, p.LoadWeight = tc.weights[0], tc.weights[1], tc.weights[2]
			rig := newAdaptiveRig(t, 3, p, script())
			for i := range tc.sampled {
				rig.sample(i, tc.served/tc.sampled, 100)
			}
			if got := rig.lb.Telemetry().Engaged; got != tc.engaged {
				t.Fatalf("Engaged = %v, want %v", got, tc.engaged)
			}
			// Mark every target sampled-or-spent so warm-up cannot claim
			// the pick, then check which mode served it.
			for i := range 3 {
				rig.lb.warmup[i].Store(WarmupBudget)
			}
			pickOK(t, rig.lb, &RouteContext{}, nil, nil)
			d := rig.lb.Telemetry().Decisions
			if tc.engaged && d.Blend != 1 || !tc.engaged && d.Fallback != 1 {
				t.Errorf("decisions = %+v, want one %s", d, map[bool]string{true: ModeBlend, false: ModeFallback}[tc.engaged])
			}
		})
	}
}

func TestAdaptiveWarmup(t *testing.T) {
	t.Run("steers to unsampled targets, at most 8 each, as exploration", func(t *testing.T) {
		rig := newAdaptiveRig(t, 3, enabledPolicy(50), NewRand(1))
		rig.sample(0, 10, 100) // 0 has evidence; 1 and 2 never answer
		counts := make([]int, 3)
		for range 40 {
			counts[pickOK(t, rig.lb, &RouteContext{}, nil, nil)]++
		}
		d := rig.lb.Telemetry().Decisions
		if d.Exploration != 2*WarmupBudget {
			t.Errorf("exploration = %d, want %d", d.Exploration, 2*WarmupBudget)
		}
		if d.Fallback != 40-2*WarmupBudget {
			t.Errorf("fallback = %d, want %d", d.Fallback, 40-2*WarmupBudget)
		}
		if counts[1] < WarmupBudget || counts[2] < WarmupBudget {
			t.Errorf("unsampled targets got %v picks, want ≥ %d each", counts, WarmupBudget)
		}
	})
	t.Run("a sampled target is not steered to", func(t *testing.T) {
		rig := newAdaptiveRig(t, 2, enabledPolicy(50), NewRand(1))
		rig.sample(0, 1, 100)
		got := pickOK(t, rig.lb, &RouteContext{}, nil, nil)
		if got != 1 || rig.lb.Telemetry().Decisions.Exploration != 1 {
			t.Errorf("pick = %d (%+v), want exploration to unsampled 1", got, rig.lb.Telemetry().Decisions)
		}
		rig.sample(1, 1, 100)
		pickOK(t, rig.lb, &RouteContext{}, nil, nil)
		if d := rig.lb.Telemetry().Decisions; d.Exploration != 1 || d.Fallback != 1 {
			t.Errorf("decisions = %+v, want the second pick to fall back", d)
		}
	})
	t.Run("kill switch probes nothing", func(t *testing.T) {
		p := enabledPolicy(50)
		p.Enabled = false
		rig := newAdaptiveRig(t, 3, p, NewRand(1))
		for range 30 {
			pickOK(t, rig.lb, &RouteContext{}, nil, nil)
		}
		if d := rig.lb.Telemetry().Decisions; d.Exploration != 0 || d.Fallback != 30 {
			t.Errorf("decisions = %+v, want 30 fallback", d)
		}
	})
	t.Run("ineligible unsampled targets are not steered to", func(t *testing.T) {
		rig := newAdaptiveRig(t, 3, enabledPolicy(50), NewRand(1))
		rig.sample(0, 1, 100)
		for range 20 {
			if got := pickOK(t, rig.lb, &RouteContext{}, nil, only(0, 1)); got == 2 {
				t.Fatal("picked ineligible 2")
			}
		}
	})
}

func TestAdaptiveBlend(t *testing.T) {
	rig := newAdaptiveRig(t, 3, enabledPolicy(30), script())
	rig.sample(0, 10, 300)
	rig.sample(1, 10, 100)
	rig.sample(2, 10, 200)
	if got := pickOK(t, rig.lb, &RouteContext{}, []uint64{0, 0, 0}, nil); got != 1 {
		t.Errorf("pick = %d, want fastest 1", got)
	}
	if got := pickOK(t, rig.lb, &RouteContext{}, []uint64{0, 0, 0}, only(0, 2)); got != 2 {
		t.Errorf("pick = %d, want fastest eligible 2", got)
	}
	// Load alone: the blend follows the emptiest target.
	p := enabledPolicy(30)
	p.LatencyWeight, p.CostWeight, p.LoadWeight = 0, 0, 1
	rig.policy.Store(p)
	if got := pickOK(t, rig.lb, &RouteContext{}, []uint64{5, 3, 0}, nil); got != 2 {
		t.Errorf("load-only pick = %d, want 2", got)
	}
	// A policy switched off is read on the very next pick.
	p.Enabled = false
	rig.policy.Store(p)
	pickOK(t, rig.lb, &RouteContext{}, nil, nil)
	if d := rig.lb.Telemetry().Decisions; d.Fallback != 1 || d.Blend != 3 {
		t.Errorf("decisions = %+v, want 3 blend then 1 fallback", d)
	}
}

func TestAdaptiveExplorationShare(t *testing.T) {
	for _, ratio := range []float64{0.05, 0.2, 0.5, 0.9} {
		p := enabledPolicy(10)
		p.ExplorationRatio = ratio
		rig := newAdaptiveRig(t, 4, p, NewRand(42))
		for i := range 4 {
			rig.sample(i, 5, float64(100*(i+1)))
		}
		const N = 20000
		for range N {
			pickOK(t, rig.lb, &RouteContext{}, nil, nil)
		}
		d := rig.lb.Telemetry().Decisions
		q := math.Min(ratio, 0.5) // clamped on the way in
		mean, sd := N*q, math.Sqrt(N*q*(1-q))
		if math.Abs(float64(d.Exploration)-mean) > 4*sd || d.Exploration+d.Blend != N {
			t.Errorf("ratio %.2f: decisions %+v, want exploration %.0f ± %.0f", ratio, d, mean, 4*sd)
		}
	}
}

func TestAdaptiveFallbackLearnsWhileEngaged(t *testing.T) {
	rig := newAdaptiveRig(t, 3, enabledPolicy(10), script())
	for i := range 3 {
		rig.sample(i, 5, 100)
	}
	sess := &RouteContext{SessionKey: "chat-7", Prompt: sysPrompt}
	if !rig.lb.Telemetry().Engaged {
		t.Fatal("not engaged")
	}
	rig.lb.Observe(2, sess)
	p := enabledPolicy(10)
	p.Enabled = false
	rig.policy.Store(p)
	if got := pickOK(t, rig.lb, sess, []uint64{0, 0, 1}, nil); got != 2 {
		t.Errorf("after disengaging: pick = %d, want the session's warm target 2", got)
	}
}

func TestAdaptiveTelemetry(t *testing.T) {
	p := enabledPolicy(5)
	p.CostWeight = 0
	rig := newAdaptiveRig(t, 3, p, script())
	rig.lb.targets[0].CostInPerMtok = 1
	rig.sample(0, 3, 200)
	rig.sample(1, 3, 100)
	rig.stats[0].Begin() // one in flight on 0
	// Target 1 is picked twice, then 1.5 s pass; target 2 is never picked
	// and has no latency sample.
	onlyOne := EligibleFunc(func(i int) bool { return i == 1 })
	pickOK(t, rig.lb, &RouteContext{}, nil, onlyOne)
	pickOK(t, rig.lb, &RouteContext{}, nil, onlyOne)
	rig.clock.Advance(1500 * time.Millisecond)
	tel := rig.lb.Telemetry()
	if !tel.Engaged || tel.Observed != 6 || len(tel.Targets) != 3 {
		t.Fatalf("telemetry = %+v", tel)
	}
	for i, row := range tel.Targets {
		if math.Abs(row.Score-(row.LatencyScore+row.CostScore+row.LoadScore)) > 1e-12 {
			t.Errorf("target %d: score %.3f is not the sum of its components", i, row.Score)
		}
		if row.CostScore != 0 {
			t.Errorf("target %d: zero-weight cost scored %.3f", i, row.CostScore)
		}
	}
	if tel.Targets[1].Score <= tel.Targets[0].Score {
		t.Errorf("faster idle target scored %.3f ≤ %.3f", tel.Targets[1].Score, tel.Targets[0].Score)
	}
	// samples and last_sample_age_ms describe picks (seed 000: "how many
	// picks that target has served and how long ago the last one was").
	if r := tel.Targets[1]; r.Samples != 2 || r.LastSampleAgeMs == nil || *r.LastSampleAgeMs != 1500 {
		t.Errorf("picked target: samples %d, last pick age %v; want 2 picks 1500 ms ago", r.Samples, r.LastSampleAgeMs)
	}
	if r := tel.Targets[0]; r.Samples != 0 || r.LastSampleAgeMs != nil || r.InFlight != 1 || r.LatencyMs == nil || *r.LatencyMs != 200 {
		t.Errorf("completed but never picked target: %+v", r)
	}
	// "No sample" is null on the wire, not -1 or 0.
	b, err := json.Marshal(tel.Targets[2])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"latency_ms":null`, `"last_sample_age_ms":null`, `"samples":0`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("unsampled target %s lacks %s", b, want)
		}
	}
}

func TestAdaptiveMeshHooksReachFallback(t *testing.T) {
	p := enabledPolicy(10)
	p.Enabled = false
	rig := newAdaptiveRig(t, 3, p, script())
	rig.lb.ObservePrefixRemote(1, sysPrompt)
	if got := pickOK(t, rig.lb, &RouteContext{Prompt: sysPrompt + "q"}, nil, nil); got != 1 {
		t.Errorf("pick = %d, want 1 warm from a remote prefix", got)
	}
	rig.lb.PinSession("s", 2, rig.clock.Now())
	if got := pickOK(t, rig.lb, &RouteContext{SessionKey: "s"}, nil, nil); got != 2 {
		t.Errorf("pick = %d, want 2 pinned remotely", got)
	}
	if _, ok := rig.lb.Pick(nil, nil); !ok {
		t.Error("Pick(nil ctx) failed")
	}
}

// Seed 003: the latency-evidence condition holds "while latency_weight is
// above zero". A cost-only policy engages once the route has served
// min_samples requests, with no latency sample anywhere, and steers no
// warm-up picks.
func TestAdaptiveCostOnlyPolicyNeedsNoLatency(t *testing.T) {
	p := enabledPolicy(4)
	p.LatencyWeight, p.CostWeight, p.LoadWeight = 0, 1, 0
	rig := newAdaptiveRig(t, 2, p, script())
	rig.lb.costs.costs[0], rig.lb.costs.costs[1] = 2, 1
	for range 4 {
		rig.lb.Served(0) // served, but failed to sample latency anywhere
	}
	if !rig.lb.Telemetry().Engaged {
		t.Fatal("cost-only policy not engaged after min_samples served requests")
	}
	if got := pickOK(t, rig.lb, &RouteContext{}, nil, nil); got != 1 {
		t.Errorf("pick = %d, want the cheaper target 1", got)
	}
	if d := rig.lb.Telemetry().Decisions; d.Blend != 1 || d.Exploration != 0 {
		t.Errorf("decisions %+v, want one blend and no warm-up", d)
	}
}

// "Served" counts requests the route served, not attempts begun on its
// targets by retries or by other pools sharing them.
func TestAdaptiveServedCountsThisRouteOnly(t *testing.T) {
	rig := newAdaptiveRig(t, 2, enabledPolicy(10), script())
	for i := range 2 {
		for range 10 { // another pool's traffic on the same targets
			rig.stats[i].Begin()
			rig.stats[i].End(Outcome{Success: true, Latency: 100 * time.Millisecond, At: rig.clock.Now()})
		}
	}
	if tel := rig.lb.Telemetry(); tel.Engaged || tel.Observed != 0 {
		t.Fatalf("engaged on other pools' traffic: %+v", tel)
	}
	rig.sample(0, 5, 100)
	rig.sample(1, 5, 100)
	if tel := rig.lb.Telemetry(); !tel.Engaged || tel.Observed != 10 {
		t.Fatalf("after the route served 10: engaged %v observed %d", tel.Engaged, tel.Observed)
	}
}
