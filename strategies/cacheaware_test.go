package strategies

import (
	"fmt"
	"strings"
	"testing"
)

const sysPrompt = "You are a helpful assistant. Answer tersely and cite sources. "

func TestCacheAwarePinsThenSpreadsAtGuard(t *testing.T) {
	prompt := sysPrompt + "What is the capital of France?"
	tests := []struct {
		name  string
		loads []uint64 // target 1 is warm
		el    Eligible
		want  int
	}{
		{"idle warm target pins", []uint64{0, 0, 0, 0}, nil, 1},
		{"warm at 2 keeps affinity over idle", []uint64{0, 2, 0, 0}, nil, 1},
		{"warm at 3, least at 2: 3 ≤ 1.5·2 keeps", []uint64{2, 3, 2, 2}, nil, 1},
		{"warm at 3, least at 1: spreads", []uint64{1, 3, 2, 2}, nil, 0},
		{"warm at 4, least at 3: 4 ≤ 4.5 keeps", []uint64{3, 4, 3, 3}, nil, 1},
		{"warm at 5, least at 3: 5 > 4.5 spreads", []uint64{3, 5, 4, 4}, nil, 0},
		{"ineligible idle target does not trip the guard", []uint64{0, 3, 2, 2}, only(1, 2, 3), 1},
		{"ineligible warm target never wins", []uint64{1, 0, 2, 2}, only(0, 2, 3), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lb := mustBuild(t, "cache_aware", Spec{Targets: targets(4), Rand: script()})
			lb.Observe(1, &RouteContext{Prompt: prompt})
			if got := pickOK(t, lb, &RouteContext{Prompt: prompt}, tc.loads, tc.el); got != tc.want {
				t.Errorf("pick = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestCacheAwareThreshold(t *testing.T) {
	lb := mustBuild(t, "cache_aware", Spec{Targets: targets(3), Rand: script()})
	base := strings.Repeat("a", 100)
	lb.Observe(2, &RouteContext{Prompt: base})
	loads := []uint64{1, 1, 2}
	// 100 of 200 bytes matched: exactly the threshold, pins.
	if got := pickOK(t, lb, &RouteContext{Prompt: base + strings.Repeat("b", 100)}, loads, nil); got != 2 {
		t.Errorf("at threshold: pick = %d, want 2", got)
	}
	// 100 of 201: below, spreads to least loaded (0 and 1 tie; both cold).
	got := pickOK(t, lb, &RouteContext{Prompt: base + strings.Repeat("b", 101)}, loads, nil)
	if got == 2 {
		t.Errorf("below threshold: pick = 2, want a least-loaded target")
	}
}

func TestCacheAwareSpreadsToLeastWarm(t *testing.T) {
	lb := mustBuild(t, "cache_aware", Spec{Targets: targets(3), Rand: script()})
	lb.Observe(0, &RouteContext{Prompt: strings.Repeat("x", 500)})
	lb.Observe(1, &RouteContext{Prompt: strings.Repeat("y", 50)})
	// Equal loads, new prompt: target 2 remembers nothing and wins.
	if got := pickOK(t, lb, &RouteContext{Prompt: "zzz"}, []uint64{1, 1, 1}, nil); got != 2 {
		t.Errorf("pick = %d, want least-warm 2", got)
	}
	if got := pickOK(t, lb, &RouteContext{Prompt: "zzz"}, []uint64{1, 1, 1}, only(0, 1)); got != 1 {
		t.Errorf("pick = %d, want least-warm eligible 1", got)
	}
	if got := pickOK(t, lb, &RouteContext{Prompt: "zzz"}, []uint64{0, 1, 1}, nil); got != 0 {
		t.Errorf("pick = %d, want least-loaded 0", got)
	}
}

func TestCacheAwareEvictsLeastRecentPrefix(t *testing.T) {
	lb := mustBuild(t, "cache_aware", Spec{Targets: targets(2), Rand: script(), PrefixCacheBytes: 250})
	ca := lb.(*CacheAware)
	p := func(c byte) string { return strings.Repeat(string(c), 100) }
	ca.Observe(0, &RouteContext{Prompt: p('a')})
	ca.Observe(0, &RouteContext{Prompt: p('b')})
	ca.Observe(0, &RouteContext{Prompt: p('a')}) // a is now more recent than b
	ca.Observe(0, &RouteContext{Prompt: p('c')}) // 300 bytes > 250: evict b
	if got := ca.idx.bytesHeld(0); got != 200 {
		t.Fatalf("bytes held = %d, want 200", got)
	}
	out := make([]int, 2)
	all := newBitset(2)
	all.fill(2, nil)
	for _, tc := range []struct {
		c    byte
		want int
	}{{'a', 100}, {'b', 0}, {'c', 100}} {
		ca.idx.match(p(tc.c), all, out)
		if out[0] != tc.want {
			t.Errorf("prefix %c: matched %d, want %d", tc.c, out[0], tc.want)
		}
	}
}

func TestPrefixIndexSharedNodes(t *testing.T) {
	x := newPrefixIndex(3, 1<<20)
	x.insert(0, sysPrompt+"question one")
	x.insert(1, sysPrompt+"question two")
	x.insert(2, "unrelated")
	x.insert(1, sysPrompt) // a prefix of what 1 holds: no growth
	out := make([]int, 3)
	all := newBitset(3)
	all.fill(3, nil)
	best := x.match(sysPrompt+"question one, again", all, out)
	want := []int{len(sysPrompt + "question one"), len(sysPrompt + "question "), 0}
	if best != want[0] || out[0] != want[0] || out[1] != want[1] || out[2] != want[2] {
		t.Errorf("match = %v (best %d), want %v", out, best, want)
	}
	if got, want := x.bytesHeld(1), len(sysPrompt+"question two"); got != want {
		t.Errorf("target 1 holds %d bytes, want %d", got, want)
	}
	// Evicting everything leaves an empty tree.
	for t0 := range 3 {
		for x.size[t0] > 0 {
			x.evictOne(t0)
		}
	}
	if len(x.root.children) != 0 {
		t.Errorf("tree not empty after evicting every target: %d children", len(x.root.children))
	}
}

func TestPrefixIndexBudgetUnderChurn(t *testing.T) {
	const budget = 4096
	x := newPrefixIndex(4, budget)
	r := NewRand(9)
	for k := range 3000 {
		p := fmt.Sprintf("%s%d-%s", sysPrompt[:r.IntN(len(sysPrompt))], r.IntN(50), strings.Repeat("q", r.IntN(300)))
		x.insert(k%4, p)
		if x.size[k%4] > budget {
			t.Fatalf("target %d holds %d bytes, budget %d", k%4, x.size[k%4], budget)
		}
	}
	// Every held byte is reachable: recount from the tree.
	var walk func(*pnode)
	held := make([]int, 4)
	walk = func(nd *pnode) {
		for t0 := range 4 {
			if nd != x.root && nd.held.has(t0) {
				held[t0] += len(nd.edge)
				if nd.parent != x.root && !nd.parent.held.has(t0) {
					t.Fatalf("target %d holds a node but not its parent", t0)
				}
			}
		}
		for _, c := range nd.children {
			walk(c)
		}
	}
	walk(x.root)
	for t0 := range 4 {
		if held[t0] != x.size[t0] {
			t.Errorf("target %d: tree holds %d bytes, accounted %d", t0, held[t0], x.size[t0])
		}
	}
}

func TestCacheAwareRemoteObservation(t *testing.T) {
	lb := mustBuild(t, "cache_aware", Spec{Targets: targets(3), Rand: script()})
	lb.(*CacheAware).ObservePrefixRemote(2, sysPrompt)
	if got := pickOK(t, lb, &RouteContext{Prompt: sysPrompt + "hi"}, []uint64{0, 0, 1}, nil); got != 2 {
		t.Errorf("pick = %d, want 2 (warm from a remote observation)", got)
	}
}

// Seed 001 lists cache_aware among the strategies that read x-session-id:
// a session returns to the target that last served it, even when its new
// turn shares no prefix with anything, under the prefix load guard.
func TestCacheAwarePrefersTheSessionsTarget(t *testing.T) {
	tests := []struct {
		name  string
		loads []uint64
		el    Eligible
		want  int
	}{
		{"idle pinned target wins", []uint64{0, 0, 0}, nil, 2},
		{"pinned at 3, least at 2 keeps", []uint64{2, 2, 3}, nil, 2},
		{"pinned at 3, least at 1 spreads", []uint64{1, 2, 3}, nil, 0},
		{"ineligible pinned target never wins", []uint64{1, 0, 0}, only(0, 1), 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			lb := mustBuild(t, "cache_aware", Spec{Targets: targets(3), Rand: script(), Clock: clk})
			lb.Observe(2, &RouteContext{SessionKey: "conv-1", Prompt: "first turn"})
			if got := pickOK(t, lb, &RouteContext{SessionKey: "conv-1", Prompt: "an unrelated second turn"}, tc.loads, tc.el); got != tc.want {
				t.Errorf("pick = %d, want %d", got, tc.want)
			}
		})
	}
	clk := newClock()
	lb := mustBuild(t, "cache_aware", Spec{Targets: targets(3), Rand: script(), Clock: clk})
	lb.Observe(2, &RouteContext{SessionKey: "conv-1"})
	clk.Advance(SessionTTL)
	if got := pickOK(t, lb, &RouteContext{SessionKey: "conv-1"}, []uint64{0, 0, 1}, nil); got == 2 {
		t.Error("an expired session pin still steered the pick")
	}
	lb.(*CacheAware).PinSession("remote", 1, clk.Now())
	if got := pickOK(t, lb, &RouteContext{SessionKey: "remote"}, []uint64{0, 0, 0}, nil); got != 1 {
		t.Errorf("remote pin: pick = %d, want 1", got)
	}
}
