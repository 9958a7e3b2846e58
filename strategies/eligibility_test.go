package strategies

import (
	"fmt"
	"testing"
	"time"

	"github.com/rolter/rolter/adaptive"
)

// fullSpec returns a Spec with every external source wired, so each
// strategy exercises its whole scoring path.
func fullSpec(n int, seed uint64) (Spec, *Tracker) {
	ts := targets(n)
	for i := range ts {
		ts[i].Weight = 1 + i%4
		ts[i].CostInPerMtok = float64(1 + i%3)
	}
	tr := NewTracker()
	idx := newResidencyIndex(n)
	keys := keysN(64, 7)
	sig := cacheSignal{}
	for i := range n {
		idx.add(i, keys[:(i*13)%64]...)
		sig[i] = [3]float64{float64(i%5) / 5, 1, float64(i % 2)}
	}
	p := adaptive.DefaultPolicy()
	p.Enabled, p.MinSamples, p.ExplorationRatio = true, 20, 0.3
	return Spec{
		Targets: ts, Rand: NewRand(seed), Clock: newClock(), Tracker: tr,
		Residency: idx, Cache: sig, Policy: NewPolicyHolder(p), MaxLoRAs: 2,
	}, tr
}

func TestNoStrategyReturnsAnIneligibleIndex(t *testing.T) {
	prompts := []string{"", sysPrompt, sysPrompt + "one", sysPrompt + "two", "other", "other and more"}
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			for _, n := range []int{1, 2, 5, 17, 70} {
				spec, tr := fullSpec(n, uint64(n))
				lb := mustBuild(t, name, spec)
				r := NewRand(uint64(n) * 31)
				loads := make([]uint64, n)
				mask := make([]bool, n)
				el := EligibleFunc(func(i int) bool { return mask[i] })
				keys := keysN(64, 7)
				for round := range 600 {
					any := false
					for i := range n {
						loads[i] = uint64(r.IntN(8))
						mask[i] = r.IntN(3) > 0 && (round%7 != 0 || i == n-1)
						any = any || mask[i]
					}
					ctx := &RouteContext{
						SessionKey:   []string{"", "s1", "s2"}[r.IntN(3)],
						Prompt:       prompts[r.IntN(len(prompts))],
						PromptDigest: uint64(r.IntN(5)),
						PromptTokens: r.IntN(8000),
						BlockKeys:    keys[:r.IntN(65)],
						Adapter:      []string{"", "lora-a", "lora-b", "lora-c"}[r.IntN(4)],
					}
					got, ok := lb.PickEligible(ctx, loads, el)
					if !any {
						if ok {
							t.Fatalf("n=%d: picked %d with nothing eligible", n, got)
						}
						continue
					}
					if !ok || got < 0 || got >= n || !mask[got] {
						t.Fatalf("n=%d round %d: PickEligible = (%d, %v), mask %v", n, round, got, ok, mask)
					}
					st := tr.Target(spec.Targets[got].ID)
					q := st.Begin()
					st.End(Outcome{Success: r.IntN(4) > 0, Latency: time.Duration(1+r.IntN(500)) * time.Millisecond, QueueDepth: q, PromptTokens: ctx.PromptTokens})
					lb.Observe(got, ctx)
				}
				if _, ok := lb.PickEligible(&RouteContext{Prompt: sysPrompt}, loads, EligibleFunc(func(int) bool { return false })); ok {
					t.Fatalf("n=%d: picked with an all-false mask", n)
				}
				if got, ok := lb.Pick(nil, loads); !ok || got < 0 || got >= n {
					t.Fatalf("n=%d: Pick = (%d, %v)", n, got, ok)
				}
			}
		})
	}
}

// TestConcurrentPicks runs every strategy's picks and observations from
// several goroutines; under -race it proves the balancers are safe to
// share across requests.
func TestConcurrentPicks(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			spec, tr := fullSpec(8, 3)
			lb := mustBuild(t, name, spec)
			done := make(chan error, 4)
			for g := range 4 {
				go func() {
					loads := make([]uint64, 8)
					for k := range 300 {
						ctx := &RouteContext{SessionKey: fmt.Sprint("s", k%5), Prompt: sysPrompt + fmt.Sprint(k%9), Adapter: fmt.Sprint("a", k%3)}
						got, ok := lb.PickEligible(ctx, loads, EligibleFunc(func(i int) bool { return i != g }))
						if !ok || got == g {
							done <- fmt.Errorf("goroutine %d: pick (%d, %v)", g, got, ok)
							return
						}
						st := tr.Target(spec.Targets[got].ID)
						st.Begin()
						st.End(Outcome{Success: true, Latency: time.Millisecond})
						lb.Observe(got, ctx)
					}
					done <- nil
				}()
			}
			for range 4 {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			if a, ok := lb.(*Adaptive); ok {
				_ = a.Telemetry()
			}
		})
	}
}
