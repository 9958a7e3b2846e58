package strategies

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/adaptive"
)

// benchSizes are the pool sizes every strategy is benchmarked at.
var benchSizes = []int{4, 16, 64, 256}

// benchPrompt is a 16 KiB prompt: a shared 12 KiB system prompt and a
// per-conversation tail.
func benchPrompt(tail int) string {
	sys := strings.Repeat("You are a meticulous assistant for the rolter mesh. ", 12<<10/52+1)[:12<<10]
	return (sys + fmt.Sprintf("conversation %d: ", tail) + strings.Repeat("q", 16<<10))[:16<<10]
}

// benchRun is how many of the benchmark's 1,024 blocks target i holds: as
// in a fleet, every target holds the shared system prompt (64 blocks), a
// sixteenth of them hold earlier turns of this conversation, and target 3
// served its last turn and holds all of it.
func benchRun(i int) int {
	switch {
	case i == 3:
		return 1024
	case i%16 == 7:
		return 64 + (i*389)%900
	default:
		return 64
	}
}

// benchBalancer builds name over n targets with warm state: every target
// has served a 16 KiB prompt sharing the system prefix, holds a leading
// run of the 1,024 benchmark blocks, has latency samples and an adapter.
func benchBalancer(b testing.TB, name string, n int) (LoadBalancer, *RouteContext, []uint64) {
	b.Helper()
	ts := targets(n)
	tr := NewTracker()
	keys := keysN(1024, 99)
	idx := newResidencyIndex(n)
	sig := cacheSignal{}
	for i := range n {
		ts[i].Weight = 1 + i%3
		ts[i].CostInPerMtok = float64(1 + i%4)
		idx.add(i, keys[:benchRun(i)]...)
		sig[i] = [3]float64{float64(i%9) / 10, 1, 1}
	}
	p := adaptive.DefaultPolicy()
	p.Enabled = true
	spec := Spec{Targets: ts, Tracker: tr, Rand: NewRand(1), Clock: newClock(), Residency: idx, Cache: sig,
		Policy: NewPolicyHolder(p), MaxLoRAs: 4}
	lb, err := Build(name, spec)
	if err != nil {
		b.Fatal(err)
	}
	r := NewRand(2)
	for i := range n {
		st := tr.Target(ts[i].ID)
		for range 60 {
			q := st.Begin()
			st.End(Outcome{Success: true, Latency: time.Duration(50+r.IntN(200)) * time.Millisecond, QueueDepth: q, PromptTokens: 4000})
			if c, ok := lb.(Completer); ok {
				c.Served(i) // the route served it: adaptive's evidence
			}
		}
		lb.Observe(i, &RouteContext{Prompt: benchPrompt(i), SessionKey: fmt.Sprint("s", i), Adapter: fmt.Sprint("lora-", i%8)})
	}
	loads := make([]uint64, n)
	queued := make([]uint64, n)
	for i := range loads {
		loads[i] = uint64(r.IntN(6))
		queued[i] = loads[i] * uint64(500+r.IntN(8000))
	}
	ctx := &RouteContext{
		SessionKey: "s3", Prompt: benchPrompt(3), PromptLen: 16 << 10, PromptDigest: 0xfeed,
		PromptTokens: 4000, BlockKeys: keys, Adapter: "lora-3", QueuedPrefill: queued,
	}
	return lb, ctx, loads
}

// BenchmarkPick measures PickEligible of every strategy with a realistic
// eligibility closure (the router's: not yet tried on this request).
func BenchmarkPick(b *testing.B) {
	for _, name := range Names() {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%s/%d", name, n), func(b *testing.B) {
				lb, ctx, loads := benchBalancer(b, name, n)
				tried := -1
				el := EligibleFunc(func(i int) bool { return i != tried })
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

// BenchmarkObserveWarm measures Observe of an already-seen prompt, the
// steady state of a route with shared system prompts: it allocates
// nothing (only bytes never seen before are stored).
func BenchmarkObserveWarm(b *testing.B) {
	for _, name := range []string{"cache_aware", "pipeline", "lora_aware"} {
		b.Run(name, func(b *testing.B) {
			lb, ctx, _ := benchBalancer(b, name, 64)
			lb.Observe(3, ctx)
			b.ReportAllocs()
			for b.Loop() {
				lb.Observe(3, ctx)
			}
		})
	}
}

// TestPicksDoNotAllocate pins the zero-allocation property in the
// ordinary test run, so a regression fails go test, not just a benchmark
// reading.
func TestPicksDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items; allocation counts are meaningless")
	}
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			lb, ctx, loads := benchBalancer(t, name, 16)
			el := EligibleFunc(func(i int) bool { return i != 5 })
			allocs := testing.AllocsPerRun(200, func() { lb.PickEligible(ctx, loads, el) })
			if allocs != 0 {
				t.Errorf("%s: %.1f allocs per pick, want 0", name, allocs)
			}
			// A request prefill wait decides.
			plain := *ctx
			plain.Adapter = ""
			if allocs := testing.AllocsPerRun(200, func() { lb.PickEligible(&plain, loads, el) }); allocs != 0 {
				t.Errorf("%s without an adapter: %.1f allocs per pick, want 0", name, allocs)
			}
		})
	}
}

// BenchmarkPreciseDistinctRuns is precise_cache_aware's worst case: every
// target holds a leading run of a different length, so the residency
// index has to locate one drop-out point per target.
func BenchmarkPreciseDistinctRuns(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			keys := keysN(1024, 99)
			idx := newResidencyIndex(n)
			for i := range n {
				idx.add(i, keys[:(i*389)%1025]...)
			}
			lb := mustBuild(b, "precise_cache_aware", Spec{Targets: targets(n), Residency: idx, Rand: NewRand(1)})
			ctx := &RouteContext{BlockKeys: keys}
			loads := make([]uint64, n)
			b.ReportAllocs()
			for b.Loop() {
				lb.PickEligible(ctx, loads, EligibleFunc(func(int) bool { return true }))
			}
		})
	}
}
