package strategies

import (
	"slices"
	"testing"
)

// burst places one instant's requests through routers routers of a mesh,
// each with its own precise_cache_aware balancer, on one shared (stale)
// picture of the fleet's queued prefill: a router sees its own picks of
// the burst at once and the others' not at all, as when a batch reaches
// every router at the same moment. owner[i] is the router request i
// reaches; every request is a cold prompt of tokens tokens. ranked says
// whether the routers know their rank in the mesh. It returns the number
// of the burst's requests each engine got.
func burst(t *testing.T, engines, routers int, shared []uint64, owner []int, tokens int, ranked bool) []int {
	t.Helper()
	lbs := make([]LoadBalancer, routers)
	views := make([][]uint64, routers)
	for r := range lbs {
		// Every router draws the same tie-breaks: what the mesh must
		// survive is routers that agree, not luck.
		lbs[r] = mustBuild(t, "precise_cache_aware", Spec{Targets: targets(engines), Rand: NewRand(7)})
		views[r] = slices.Clone(shared)
	}
	got := make([]int, engines)
	for _, r := range owner {
		rc := &RouteContext{PromptTokens: tokens, QueuedPrefill: views[r]}
		if ranked {
			rc.Routers, rc.Rank = routers, r
		}
		e := pickOK(t, lbs[r], rc, make([]uint64, engines), nil)
		views[r][e] += uint64(tokens)
		got[e]++
	}
	return got
}

// TestMeshRoutersSpreadABurst: eight routers each get one request of a
// batch at the same instant while one engine looks emptier than the rest.
// Routers that know nothing of each other all send to it (eight requests
// queue on one engine while seven sit nearly idle); ranked routers each
// keep to their own engine, so the batch lands one per engine, as a single
// router would have placed it.
func TestMeshRoutersSpreadABurst(t *testing.T) {
	shared := []uint64{0, 1000, 1000, 1000, 1000, 1000, 1000, 1000}
	owner := []int{0, 1, 2, 3, 4, 5, 6, 7}
	if got := burst(t, 8, 8, shared, owner, 8000, false); got[0] != 8 {
		t.Fatalf("unranked routers: engine 0 got %d of 8 (per engine %v); the scenario should herd", got[0], got)
	}
	got := burst(t, 8, 8, shared, owner, 8000, true)
	for e, n := range got {
		if n != 1 {
			t.Errorf("ranked routers: engine %d got %d requests of the burst, want 1 each (per engine %v)", e, n, got)
		}
	}
}

// TestMeshRoutersSpreadUnevenShares: three routers get a batch of nine
// unevenly (5, 3, 1) on an idle fleet of eight. Unranked routers that
// break ties alike pile each router's first requests onto the same
// engines; ranked ones never put more than two of the batch on an engine.
func TestMeshRoutersSpreadUnevenShares(t *testing.T) {
	shared := make([]uint64, 8)
	owner := []int{0, 0, 1, 0, 2, 1, 0, 1, 0}
	worst := func(got []int) int { return slices.Max(got) }
	if got := burst(t, 8, 3, shared, owner, 8000, false); worst(got) < 3 {
		t.Fatalf("unranked routers: busiest engine got %d of the batch (%v); the scenario should herd", worst(got), got)
	}
	got := burst(t, 8, 3, shared, owner, 8000, true)
	if worst(got) > 2 {
		t.Errorf("ranked routers: busiest engine got %d of the batch (%v), want ≤ 2", worst(got), got)
	}
}

// TestHomeShareKeepsCacheHits: a router's preference for its own engines
// costs half of the request's own prefill, so a prefix resident on
// another router's engine still wins when it saves more than that, and a
// queue at home longer than that sends the request away.
func TestHomeShareKeepsCacheHits(t *testing.T) {
	keys := keysN(20, 3) // 320 tokens of blocks
	idx := newResidencyIndex(4)
	idx.add(1, keys...) // target 1 (rank 1's home of 4 routers) holds it all
	lb := mustBuild(t, "precise_cache_aware", Spec{Targets: targets(4), Residency: idx, Rand: script()})
	rc := &RouteContext{BlockKeys: keys, PromptTokens: 400, QueuedPrefill: make([]uint64, 4), Routers: 4, Rank: 0}
	if got := pickOK(t, lb, rc, make([]uint64, 4), nil); got != 1 {
		t.Errorf("resident prefix on another router's engine: pick %d, want 1", got)
	}
	cold := &RouteContext{PromptTokens: 8000, QueuedPrefill: []uint64{5000, 0, 0, 0}, Routers: 4, Rank: 0}
	if got := pickOK(t, lb, cold, make([]uint64, 4), nil); got == 0 {
		t.Errorf("home queue 5000 tokens longer than elsewhere for an 8000-token prompt: picked home")
	}
	cold.QueuedPrefill = []uint64{3000, 0, 0, 0}
	if got := pickOK(t, lb, cold, make([]uint64, 4), nil); got != 0 {
		t.Errorf("home queue 3000 tokens longer (< half the prompt): pick %d, want home 0", got)
	}
}

// TestHomeShare pins the partition: every target is some router's home,
// and with more routers than targets several share one.
func TestHomeShare(t *testing.T) {
	for _, tc := range []struct{ n, routers int }{{8, 1}, {8, 3}, {8, 8}, {3, 8}, {5, 2}} {
		for t0 := range tc.n {
			homes := 0
			for r := range tc.routers {
				if HomeShare(t0, tc.n, tc.routers, r) {
					homes++
				}
			}
			if homes == 0 {
				t.Errorf("n=%d routers=%d: target %d is no router's home", tc.n, tc.routers, t0)
			}
		}
		for r := range tc.routers {
			n := 0
			for t0 := range tc.n {
				if HomeShare(t0, tc.n, tc.routers, r) {
					n++
				}
			}
			if want := max(tc.n/max(tc.routers, 1), 1); n < want {
				t.Errorf("n=%d routers=%d: router %d has %d home targets, want ≥ %d", tc.n, tc.routers, r, n, want)
			}
		}
	}
}
