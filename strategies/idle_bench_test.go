package strategies

import (
	"fmt"
	"testing"
)

// BenchmarkPickIdleFleet is the pick of `rolter bench overhead`: a short
// chat request (no token ids, so no block keys) over an idle fleet, every
// load and queued prefill 0, no residency source, the router's
// eligibility mask admitting every target. precise_cache_aware ties every
// target there and draws one.
func BenchmarkPickIdleFleet(b *testing.B) {
	for _, name := range []string{"round_robin", "precise_cache_aware"} {
		for _, n := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/%d", name, n), func(b *testing.B) {
				lb := mustBuild(b, name, Spec{Targets: targets(n), Rand: NewRand(1)})
				loads, queued := make([]uint64, n), make([]uint64, n)
				ctx := &RouteContext{PromptLen: 300, PromptTokens: 75, QueuedPrefill: queued}
				el := EligibleFunc(func(int) bool { return true })
				b.ReportAllocs()
				for b.Loop() {
					if _, ok := lb.PickEligible(ctx, loads, el); !ok {
						b.Fatal("no pick")
					}
				}
			})
		}
	}
}
