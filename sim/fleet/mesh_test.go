package fleet

import (
	"slices"
	"testing"
	"time"

	"github.com/rolter/rolter/router/meshstate"
	"github.com/rolter/rolter/strategies"
)

// Replica 0 serves A; ten seconds later replica 1 serves B, which extends
// A. Through the mesh replica 1 learns where A went (its 64/128/256-byte
// prefix records match B's) and cache_aware pins B there, so B finds A's
// 4 blocks cached. Isolated, or with a gossip delay longer than the gap,
// replica 1 knows nothing and places B by load and a coin toss.
func TestMeshSharesPrefixObservations(t *testing.T) {
	w := mustPrepare(t, []Request{
		{At: 0, Tokens: seqTokens(0, 64), MaxTokens: 1},
		{At: 10 * time.Second, Tokens: seqTokens(0, 80), MaxTokens: 1},
	})
	run := func(seed uint64, isolated bool, delay time.Duration) Result {
		return mustRun(t, Config{Strategy: "cache_aware", Engines: 2, Routers: 2, Arrival: RoundRobinArrival,
			GossipDelay: delay, PeerDelay: delay, Isolated: isolated, Seed: seed}, w)
	}
	missed := map[string]int{}
	for seed := uint64(1); seed <= 8; seed++ {
		if got := run(seed, false, 250*time.Millisecond).CachedTokens; got != 64 {
			t.Errorf("seed %d, mesh: B found %d cached tokens, want A's 64", seed, got)
		}
		if run(seed, true, 250*time.Millisecond).CachedTokens == 0 {
			missed["isolated"]++
		}
		if run(seed, false, 20*time.Second).CachedTokens == 0 {
			missed["record not yet arrived"]++
		}
	}
	for _, k := range []string{"isolated", "record not yet arrived"} {
		if missed[k] == 0 {
			t.Errorf("%s: B hit A's blocks on all 8 seeds; without the record it should be a coin toss", k)
		}
	}
}

// pipeline's session pins and prefix observations reach the other
// replicas, so a chat session's later turns, spread at random over four
// replicas, still find its earlier turns' engine warm.
func TestMeshKeepsConversationsWarm(t *testing.T) {
	w := smallChat(t, 21)
	cfg := Config{Strategy: "pipeline", Engines: 4, Routers: 4, Arrival: RandomArrival, Rate: 0.5, Seed: 2,
		GossipDelay: 250 * time.Millisecond}
	shared := mustRun(t, cfg, w)
	cfg.Isolated = true
	alone := mustRun(t, cfg, w)
	if shared.HitRate <= alone.HitRate {
		t.Errorf("hit rate with the mesh %.4f, isolated %.4f: sharing should keep sessions warm", shared.HitRate, alone.HitRate)
	}
}

// The other replicas' published counts and prefill sums reach a replica
// once they are PeerDelay old, newest publication first; a replica's own
// publication never comes back to it through the mesh.
func TestPeerLoadsArriveAfterTheGossipDelay(t *testing.T) {
	r := &run{cfg: Config{Routers: 3, PeerDelay: 250 * time.Millisecond}, keys: map[string]int{"engine-0": 0, "engine-1": 1}}
	r.engines = []*node{{lag: &lagged{res: newResidency()}}, {lag: &lagged{res: newResidency()}}}
	for k := range 3 {
		r.routers = append(r.routers, &replica{state: meshstate.New(gossip{r: r, k: k}, vclock{now: &r.now}.Now, meshstate.Options{})})
	}
	ms := time.Millisecond
	pub := func(at time.Duration, k int, inflight, prefill uint64) {
		r.now = at
		gossip{r: r, k: k}.Publish([]meshstate.EngineLoad{{Engine: "engine-0", Inflight: inflight, Prefill: prefill}}, time.Time{})
	}
	pub(0, 0, 5, 5000)
	pub(100*ms, 1, 1, 700)
	pub(200*ms, 2, 1, 300)
	pub(600*ms, 1, 2, 1200)
	tests := []struct {
		now               time.Duration
		k                 int
		key               string
		inflight, prefill uint64
		why               string
	}{
		{200 * ms, 0, "engine-0", 0, 0, "nothing published has arrived yet"},
		{350 * ms, 0, "engine-0", 1, 700, "replica 1's first publication"},
		{450 * ms, 0, "engine-0", 2, 1000, "both peers'"},
		{900 * ms, 0, "engine-0", 3, 1500, "replica 1's newer publication replaces its older"},
		{900 * ms, 1, "engine-0", 6, 5300, "replica 1 sees 0 and 2, not itself"},
		{900 * ms, 0, "engine-1", 0, 0, "engine 1 has none"},
	}
	for _, tc := range tests {
		r.now = tc.now
		st := r.routers[tc.k].state
		if q, _ := st.Load(tc.key); q != tc.inflight {
			t.Errorf("at %v replica %d %s: load %d, want %d (%s)", tc.now, tc.k, tc.key, q, tc.inflight, tc.why)
		}
		if got := st.PeerPrefill(tc.key); got != tc.prefill {
			t.Errorf("at %v replica %d %s: peer prefill %d, want %d (%s)", tc.now, tc.k, tc.key, got, tc.prefill, tc.why)
		}
	}
}

// The replicas run the router's mesh code, not a copy of it: each holds a
// *meshstate.State (the type `rolter router` builds in cmd/rolter) over
// this package's virtual-time transport, and what a replica's balancer
// learns from the others arrives through that state's File and Recall.
func TestReplicasRunTheRoutersMeshState(t *testing.T) {
	w := mustPrepare(t, []Request{{At: 0, Tokens: seqTokens(0, 64), MaxTokens: 1}})
	r := &run{cfg: Config{Strategy: "cache_aware", Engines: 2, Routers: 2, Seed: 1}, w: w}
	for range 2 {
		r.engines = append(r.engines, &node{lag: &lagged{res: newResidency()}})
	}
	if err := r.buildRouters(); err != nil {
		t.Fatal(err)
	}
	for k, rep := range r.routers {
		var st *meshstate.State = rep.state // the router's type, not a copy
		if st == nil {
			t.Fatalf("replica %d has no meshstate.State", k)
		}
	}
	// Replica 0 observes a pick; replica 1 files the record through its
	// meshstate and publishes nothing of its own.
	rc := w.reqs[0].rc
	r.routers[0].state.Observed(meshPool, engineKey(1), &rc)
	if len(r.learned) == 0 {
		t.Fatal("meshstate.State.Observed shared nothing through the simulator's transport")
	}
	r.now = time.Second
	r.deliver(1)
	var got []int
	r.routers[1].state.Recall(meshPool, importRecorder{&got}, r.keyOf, &rc)
	if len(got) == 0 || got[0] != 1 {
		t.Errorf("replica 1 imported %v, want engine 1 (what replica 0 shared)", got)
	}
}

// importRecorder is a balancer with the prefix hook that records imports.
type importRecorder struct{ got *[]int }

func (importRecorder) Name() string                                        { return "recorder" }
func (importRecorder) Pick(*strategies.RouteContext, []uint64) (int, bool) { return 0, true }
func (importRecorder) Observe(int, *strategies.RouteContext)               {}
func (i importRecorder) ObservePrefixRemote(target int, _ string)          { *i.got = append(*i.got, target) }
func (importRecorder) PickEligible(*strategies.RouteContext, []uint64, strategies.Eligible) (int, bool) {
	return 0, true
}

// Requests of one instant spread over the replicas pick in rank order:
// rank 0 at once, each next rank when the picks of the ranks below it have
// reached it (published at once, PeerDelay on the way); a replica's
// requests of the instant go together. A replica alone never waits, and a
// peer heard from not at all holds it IntentWindow.
func TestReplicasOrderTheFirstPicksOfAnInstant(t *testing.T) {
	ms := time.Millisecond
	at := func(n int, d time.Duration) []Request {
		var out []Request
		for i := range n {
			out = append(out, Request{At: d, Tokens: seqTokens(100*i, 100*i+64), MaxTokens: 1})
		}
		return out
	}
	waited := func(routers int, peer time.Duration, reqs []Request) []time.Duration {
		r, err := simulate(t.Context(), Config{Strategy: "precise_cache_aware", Engines: 4, Routers: routers,
			Arrival: RoundRobinArrival, PeerDelay: peer, Seed: 1}, mustPrepare(t, reqs))
		if err != nil {
			t.Fatal(err)
		}
		var out []time.Duration
		for i := range r.flights {
			out = append(out, r.flights[i].at-r.arrived[i])
		}
		return out
	}
	late := meshstate.IntentWindow(time.Second)
	// Round-robin: request i reaches replica i mod R.
	tests := []struct {
		routers int
		peer    time.Duration
		reqs    []Request
		want    []time.Duration
		why     string
	}{
		{1, ms, at(4, 0), []time.Duration{0, 0, 0, 0}, "alone"},
		{2, ms, append(at(4, 0), at(1, time.Second)...), []time.Duration{0, ms, 0, ms, 0},
			"rank 1 after rank 0's picks arrive; a lone request at rank 0 does not wait"},
		{3, ms, at(6, 0), []time.Duration{0, ms, 2 * ms, 0, ms, 2 * ms}, "a chain: rank 2 after rank 1"},
		{2, 5 * ms, at(4, 0), []time.Duration{0, 5 * ms, 0, 5 * ms}, "the windows follow the peer delay"},
		{3, time.Second, at(3, 0), []time.Duration{0, late, late},
			"a peer delay past MaxPeerDelay: no intent heard in time, each listens its window"},
	}
	for _, tc := range tests {
		if got := waited(tc.routers, tc.peer, tc.reqs); !slices.Equal(got, tc.want) {
			t.Errorf("%s (R=%d, peer delay %v): waited %v, want %v", tc.why, tc.routers, tc.peer, got, tc.want)
		}
	}
	// The wait is part of the request's TTFT.
	r, err := Run(t.Context(), Config{Strategy: "precise_cache_aware", Engines: 4, Routers: 2,
		Arrival: RoundRobinArrival, PeerDelay: ms, Seed: 1}, mustPrepare(t, at(2, 0)))
	if err != nil {
		t.Fatal(err)
	}
	if r.Held != ms {
		t.Errorf("held %v in all, want 1ms (rank 1's request)", r.Held)
	}
}

// Two replicas receiving one request each at the same instant, on an idle
// fleet where every engine is equally good, no longer pick the same
// engine: the second picks after the first's pick reached it. With the
// peer's news too late for the order, some seeds do herd: nothing else
// keeps them apart.
func TestSameInstantPicksOfTwoReplicasSpread(t *testing.T) {
	w := mustPrepare(t, []Request{
		{At: 0, Tokens: seqTokens(0, 512), MaxTokens: 64},
		{At: 0, Tokens: seqTokens(1000, 1512), MaxTokens: 64},
	})
	herded := func(seed uint64, peer time.Duration) bool {
		r, err := simulate(t.Context(), Config{Strategy: "precise_cache_aware", Engines: 2, Routers: 2,
			Arrival: RoundRobinArrival, PeerDelay: peer, GossipDelay: 250 * time.Millisecond, Seed: seed}, w)
		if err != nil {
			t.Fatal(err)
		}
		return r.flights[0].engine == r.flights[1].engine
	}
	blind := 0
	for seed := uint64(1); seed <= 16; seed++ {
		if herded(seed, time.Millisecond) {
			t.Errorf("seed %d: both replicas picked the same engine of two idle ones", seed)
		}
		if herded(seed, time.Second) {
			blind++
		}
	}
	if blind == 0 {
		t.Error("without the peer's pick in time no seed herded: the test cannot tell the order's effect")
	}
}

// The replicas run meshstate's publish rule, not a copy: a pick that
// follows an intent goes out at once (another replica waits for it); a
// pick of the last-ranked replica, which announces no intent, goes out
// PublishGap after it happened.
func TestReplicasPublishAPickAtOnceAfterAnIntent(t *testing.T) {
	w := mustPrepare(t, []Request{{At: 0, Tokens: seqTokens(0, 64), MaxTokens: 4000},
		{At: time.Second, Tokens: seqTokens(0, 64), MaxTokens: 4000},
		{At: 2 * time.Second, Tokens: seqTokens(0, 64), MaxTokens: 1}})
	r, err := simulate(t.Context(), Config{Strategy: "precise_cache_aware", Engines: 2, Routers: 2,
		Arrival: RoundRobinArrival, PeerDelay: time.Millisecond, Seed: 1}, w)
	if err != nil {
		t.Fatal(err)
	}
	first := func(k int) time.Duration {
		for _, p := range r.routers[k].pubs {
			if slices.ContainsFunc(p.inflight, func(n uint64) bool { return n > 0 }) {
				return p.at
			}
		}
		return -1
	}
	if got := first(0); got != 0 {
		t.Errorf("replica 0's pick at 0 (after its intent) first published at %v, want at once", got)
	}
	// It listened IntentWindow for rank 0's intent first.
	if got, want := first(1), time.Second+meshstate.IntentWindow(time.Millisecond)+meshstate.PublishGap; got != want {
		t.Errorf("replica 1's pick at 1s + IntentWindow (last rank, no intent) first published at %v, want %v", got, want)
	}
}
