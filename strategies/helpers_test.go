package strategies

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// scriptedRand returns its scripted values in order (IntN takes each value
// modulo n), then falls back to a seeded source.
type scriptedRand struct {
	mu     sync.Mutex
	ints   []int
	floats []float64
	rest   Rand
}

func script(ints ...int) *scriptedRand { return &scriptedRand{ints: ints, rest: NewRand(1)} }

func (s *scriptedRand) IntN(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ints) == 0 {
		return s.rest.IntN(n)
	}
	v := s.ints[0] % n
	s.ints = s.ints[1:]
	return v
}

func (s *scriptedRand) Float64() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.floats) == 0 {
		return s.rest.Float64()
	}
	v := s.floats[0]
	s.floats = s.floats[1:]
	return v
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// targets returns n targets named t0…t(n-1) with weight 1.
func targets(n int) []Target {
	ts := make([]Target, n)
	for i := range ts {
		ts[i] = Target{ID: fmt.Sprintf("t%d", i), Provider: fmt.Sprintf("p%d", i), UpstreamModel: "m", Weight: 1}
	}
	return ts
}

func mustBuild(t testing.TB, name string, s Spec) LoadBalancer {
	t.Helper()
	lb, err := Build(name, s)
	if err != nil {
		t.Fatalf("Build(%q): %v", name, err)
	}
	return lb
}

// only returns an Eligible admitting exactly the given targets.
func only(ts ...int) Eligible {
	return EligibleFunc(func(i int) bool {
		for _, t := range ts {
			if t == i {
				return true
			}
		}
		return false
	})
}

// serve simulates the router around a pick: Begin, a successful End after
// latency, then Observe.
func serve(lb LoadBalancer, stats []*TargetStats, t int, ctx *RouteContext, latency time.Duration, at time.Time) {
	q := stats[t].Begin()
	stats[t].End(Outcome{Success: true, Latency: latency, QueueDepth: q, PromptTokens: ctx.PromptTokens, At: at})
	lb.Observe(t, ctx)
}

func pickOK(t *testing.T, lb LoadBalancer, ctx *RouteContext, loads []uint64, el Eligible) int {
	t.Helper()
	i, ok := lb.PickEligible(ctx, loads, el)
	if !ok {
		t.Fatalf("%s: no pick", lb.Name())
	}
	return i
}
