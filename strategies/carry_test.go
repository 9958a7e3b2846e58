package strategies

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// rebuilt builds name over next and carries prev's learned state into it,
// as the router does when a pool's targets change.
func rebuilt(t *testing.T, name string, prev LoadBalancer, prevTs, next []Target, s Spec) LoadBalancer {
	t.Helper()
	s.Targets = next
	lb := mustBuild(t, name, s)
	c, ok := lb.(Carrier)
	if !ok {
		t.Fatalf("%s does not carry state over", name)
	}
	c.CarryOver(prev, Mapping(prevTs, next))
	return lb
}

func TestMappingFollowsIdentity(t *testing.T) {
	a, b, c := Target{ID: "a"}, Target{ID: "b"}, Target{ID: "c"}
	got := Mapping([]Target{a, b, c}, []Target{c, {ID: "new"}, a, a})
	want := []int{2, -1, 0, -1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Mapping = %v, want %v", got, want)
	}
}

// A target is inserted at the front of a cache_aware route: every prompt
// still goes to the target that served it, now at another index.
func TestCacheAwareCarriesPrefixesByIdentity(t *testing.T) {
	old := targets(3)
	clk := newClock()
	s := Spec{Rand: NewRand(7), Clock: clk}
	s.Targets = old
	prev := mustBuild(t, "cache_aware", s)
	prompts := make([]string, 12)
	served := map[string]string{}
	for k := range prompts {
		prompts[k] = fmt.Sprintf("%s conversation %d: %s", sysPrompt, k, sysPrompt)
		tgt := k % 3
		prev.Observe(tgt, &RouteContext{Prompt: prompts[k]})
		served[prompts[k]] = old[tgt].ID
	}
	prev.Observe(1, &RouteContext{SessionKey: "sess", Prompt: "hello"})
	next := append([]Target{{ID: "fresh", Provider: "fresh", Weight: 1}}, old...)
	lb := rebuilt(t, "cache_aware", prev, old, next, s)
	for _, p := range prompts {
		got := pickOK(t, lb, &RouteContext{Prompt: p}, make([]uint64, 4), nil)
		if next[got].ID != served[p] {
			t.Errorf("prompt went to %s, want %s which served it", next[got].ID, served[p])
		}
	}
	if got := pickOK(t, lb, &RouteContext{SessionKey: "sess", Prompt: "unrelated"}, make([]uint64, 4), nil); next[got].ID != "t1" {
		t.Errorf("session went to %s, want its pinned t1", next[got].ID)
	}
	// A removed target's prefixes go nowhere.
	fewer := []Target{old[0], old[2]}
	lb2 := rebuilt(t, "cache_aware", prev, old, fewer, s)
	for _, p := range prompts {
		if served[p] == "t1" {
			continue
		}
		if got := pickOK(t, lb2, &RouteContext{Prompt: p}, make([]uint64, 2), nil); fewer[got].ID != served[p] {
			t.Errorf("after removing t1: prompt went to %s, want %s", fewer[got].ID, served[p])
		}
	}
}

// Pipeline-based stacks carry session pins, prefixes and adapter
// residency; a strategy change from cache_aware to pipeline keeps the trie.
func TestPipelineStacksCarryIdentityState(t *testing.T) {
	old := targets(2)
	clk := newClock()
	s := Spec{Rand: NewRand(3), Clock: clk, Targets: old}
	prev := mustBuild(t, "lora_aware", s)
	prev.Observe(1, &RouteContext{Adapter: "sql-lora", Prompt: "p"})
	next := []Target{old[1], old[0]}
	lb := rebuilt(t, "lora_aware", prev, old, next, s)
	if got := pickOK(t, lb, &RouteContext{Adapter: "sql-lora"}, []uint64{0, 0}, nil); next[got].ID != "t1" {
		t.Errorf("adapter went to %s, want t1 which holds it", next[got].ID)
	}

	ca := mustBuild(t, "cache_aware", s)
	ca.Observe(0, &RouteContext{Prompt: sysPrompt + "question"})
	pl := rebuilt(t, "pipeline", ca, old, next, s)
	if got := pickOK(t, pl, &RouteContext{Prompt: sysPrompt + "question"}, []uint64{0, 0}, nil); next[got].ID != "t0" {
		t.Errorf("pipeline after cache_aware went to %s, want t0 warm from the trie", next[got].ID)
	}
	pl.Observe(0, &RouteContext{SessionKey: "s"}) // index 0 is t1 now
	pl2 := rebuilt(t, "pipeline", pl, next, old, s)
	if got := pickOK(t, pl2, &RouteContext{SessionKey: "s"}, []uint64{0, 0}, nil); old[got].ID != "t1" {
		t.Errorf("session went to %s, want t1", old[got].ID)
	}
	clk.Advance(SessionTTL)
	pl3 := rebuilt(t, "pipeline", pl2, old, old, s)
	if _, ok := pl3.(*Pipeline).scorers[0].Scorer.(*SessionAffinity).Pinned("s"); ok {
		t.Error("an expired pin was carried over")
	}
}

// Seed 000: "a target that never answers absorbs at most eight picks in
// total". A target with no latency sample keeps its spent budget across
// rebuilds, whether the target list changed or not.
func TestAdaptiveWarmupBudgetIsEightInTotal(t *testing.T) {
	p := enabledPolicy(1000)
	ph := NewPolicyHolder(p)
	tr := NewTracker()
	clk := newClock()
	ts := targets(2)
	s := Spec{Tracker: tr, Policy: ph, Rand: NewRand(5), Clock: clk}
	s.Targets = ts
	lb := mustBuild(t, "adaptive", s)
	stats := []*TargetStats{tr.Target("t0"), tr.Target("t1")}
	stats[0].Begin()
	stats[0].End(Outcome{Success: true, Latency: time.Millisecond, At: clk.Now()})
	prevTs := ts
	for round := range 6 {
		for range 5 {
			pickOK(t, lb, &RouteContext{}, nil, nil)
		}
		// Every other rebuild adds a target, so the list changes.
		next := prevTs
		if round%2 == 1 {
			next = append(append([]Target(nil), prevTs...), Target{ID: fmt.Sprintf("x%d", round), Weight: 1})
		}
		lb = rebuilt(t, "adaptive", lb, prevTs, next, s)
		prevTs = next
	}
	spent := uint32(0)
	for i, tg := range prevTs {
		if tg.ID == "t1" {
			spent = lb.(*Adaptive).warmup[i].Load()
		}
	}
	if spent != WarmupBudget {
		t.Errorf("t1's warm-up budget spent = %d after 6 rebuilds, want %d in total", spent, WarmupBudget)
	}
	tel := lb.(*Adaptive).Telemetry()
	if tel.Decisions.Exploration+tel.Decisions.Fallback != 30 {
		t.Errorf("decision split %+v lost picks across rebuilds", tel.Decisions)
	}
}

// The carried trie keeps each target's recency: under a smaller budget the
// least recently served prompt is the one evicted, and carrying into a
// balancer that already learned something merges rather than replaces.
func TestCarriedPrefixesKeepLRUOrder(t *testing.T) {
	old := targets(2)
	s := Spec{Rand: NewRand(1), Clock: newClock(), Targets: old}
	prev := mustBuild(t, "cache_aware", s).(*CacheAware)
	a, b := strings.Repeat("a", 300), strings.Repeat("b", 300)
	prev.Observe(1, &RouteContext{Prompt: a})
	prev.Observe(1, &RouteContext{Prompt: b}) // b is the more recent
	s.PrefixCacheBytes = 400
	lb := rebuilt(t, "cache_aware", prev, old, []Target{old[1]}, s).(*CacheAware)
	if got := lb.idx.bytesHeld(0); got != 300 {
		t.Fatalf("carried %d bytes under a 400-byte budget, want 300", got)
	}
	cand := newBitset(1)
	cand.set(0)
	out := make([]int, 1)
	if lb.idx.match(b, cand, out) != 300 || lb.idx.match(a, cand, out) != 0 {
		t.Error("the budget evicted the more recent prompt instead of the older one")
	}
	s.PrefixCacheBytes = 0
	s.Targets = []Target{old[1]}
	warm := mustBuild(t, "cache_aware", s).(*CacheAware)
	warm.Observe(0, &RouteContext{Prompt: "c" + a})
	warm.CarryOver(prev, []int{1})
	if warm.idx.match("c"+a, cand, out) != 301 || warm.idx.match(b, cand, out) != 300 || warm.idx.match(a, cand, out) != 300 {
		t.Error("carrying into a warm balancer lost its own or the carried prefixes")
	}
}

// CarryOver reads prev while prev keeps serving the old snapshot's
// requests (run under -race).
func TestCarryOverWhilePrevServes(t *testing.T) {
	ts := targets(3)
	s := Spec{Rand: NewRand(2), Clock: newClock(), Targets: ts, Policy: NewPolicyHolder(enabledPolicy(5))}
	for _, name := range []string{"cache_aware", "pipeline", "adaptive", "lora_aware"} {
		prev := mustBuild(t, name, s)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for k := range 2000 {
				rc := &RouteContext{Prompt: fmt.Sprintf("%s %d", sysPrompt, k%50), SessionKey: fmt.Sprint(k % 7), Adapter: "x"}
				if i, ok := prev.PickEligible(rc, []uint64{0, 1, 2}, nil); ok {
					prev.Observe(i, rc)
				}
			}
		}()
		for range 20 {
			rebuilt(t, name, prev, ts, []Target{ts[2], ts[0]}, s)
		}
		<-done
	}
}
