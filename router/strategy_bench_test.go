package router

import (
	"fmt"
	"strings"
	"testing"
)

// strategyBenchConfig is one route over n providers with strategy, its
// targets forwarding the route's own model (as `rolter bench overhead`
// configures the router).
func strategyBenchConfig(strategy string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "[[providers]]\nname = \"e%d\"\napi_base = \"http://127.0.0.1:%d\"\n", i, 10000+i)
	}
	fmt.Fprintf(&b, "[[routes]]\nmodel = \"llama\"\nstrategy = %q\ntargets = [", strategy)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "{provider = \"e%d\", model = \"llama\"}", i)
	}
	b.WriteString("]\n[health]\nenabled = false\n")
	return b.String()
}

// BenchmarkRequestPathStrategies is BenchmarkRequestPath's in-process
// request path under round_robin and precise_cache_aware over 1 and 64
// targets, plain and streamed: what a pick, its bookkeeping and the
// per-target state cost per request as the pool grows.
func BenchmarkRequestPathStrategies(b *testing.B) {
	for _, strategy := range []string{"round_robin", "precise_cache_aware"} {
		for _, n := range []int{1, 64} {
			for _, stream := range []bool{false, true} {
				mode, flag := "json", "false"
				if stream {
					mode, flag = "sse", "true"
				}
				b.Run(fmt.Sprintf("%s/%d/%s", strategy, n, mode), func(b *testing.B) {
					s := benchServerFrom(b, memEngine{sse: stream}, strategyBenchConfig(strategy, n))
					serveBenchBody(b, s.Handler(), strings.Replace(benchBody, "%s", flag, 1))
				})
			}
		}
	}
}
