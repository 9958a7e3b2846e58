package strategies

import (
	"testing"
	"time"
)

// A strategy that says it does not read RouteContext.Prompt picks the same
// targets whether the router fills it or leaves it empty; one that reads
// it (cache_aware, consistent_hash) does not, which shows the drive below
// would notice a blind strategy reading it.
func TestStrategiesBlindToThePromptIgnoreIt(t *testing.T) {
	prompts := []string{sysPrompt, sysPrompt + "one", sysPrompt + "two", "other", "other and more"}
	picks := func(name string, withPrompt bool) []int {
		const n = 5
		spec, tr := fullSpec(n, 11)
		lb := mustBuild(t, name, spec)
		r := NewRand(97)
		loads := make([]uint64, n)
		keys := keysN(64, 7)
		var out []int
		for range 400 {
			for i := range n {
				loads[i] = uint64(r.IntN(8))
			}
			ctx := &RouteContext{
				Prompt:       prompts[r.IntN(len(prompts))],
				PromptTokens: r.IntN(8000),
				BlockKeys:    keys[:r.IntN(65)],
			}
			if !withPrompt {
				ctx.Prompt = ""
			}
			got, ok := lb.PickEligible(ctx, loads, nil)
			if !ok {
				t.Fatalf("%s: no pick", name)
			}
			out = append(out, got)
			st := tr.Target(spec.Targets[got].ID)
			q := st.Begin()
			st.End(Outcome{Success: true, Latency: time.Duration(1+r.IntN(500)) * time.Millisecond, QueueDepth: q, PromptTokens: ctx.PromptTokens})
			lb.Observe(got, ctx)
		}
		return out
	}
	same := func(a, b []int) bool {
		for i := range a {
			if a[i] != b[i] {
				return false
			}
		}
		return true
	}
	for _, name := range Names() {
		with, without := picks(name, true), picks(name, false)
		switch {
		case !ReadsPrompt(name) && !same(with, without):
			t.Errorf("%s is listed as not reading the prompt, yet its picks change with it", name)
		case (name == "cache_aware" || name == "consistent_hash") && same(with, without):
			t.Errorf("%s reads the prompt, yet its picks do not change with it: the drive proves nothing", name)
		}
	}
	if ReadsPrompt("round_robin") || !ReadsPrompt("cache_aware") || !ReadsPrompt("no_such_strategy") {
		t.Error("ReadsPrompt: round_robin is blind, cache_aware and an unknown name read the prompt")
	}
}
