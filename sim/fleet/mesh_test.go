package fleet

import (
	"testing"
	"time"
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
			GossipDelay: delay, Isolated: isolated, Seed: seed}, w)
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

// The other replicas' in-flight counts arrive as published at the last
// 250 ms tick that is at least the gossip delay old; a replica's own count
// never comes back to it through the mesh.
func TestPeerInflightFolding(t *testing.T) {
	r := &run{cfg: Config{Routers: 3, GossipDelay: 250 * time.Millisecond}}
	for range 3 {
		r.routers = append(r.routers, &replica{mesh: newMeshPeer(2)})
	}
	ms := time.Millisecond
	r.routers[1].mesh.begins[0] = []time.Duration{100 * ms, 600 * ms}
	r.routers[1].mesh.ends[0] = []time.Duration{900 * ms}
	r.routers[2].mesh.begins[0] = []time.Duration{200 * ms}
	r.routers[0].mesh.begins[0] = []time.Duration{0}
	tests := []struct {
		now        time.Duration
		k, e       int
		want       uint64
		whyNotZero string
	}{
		{200 * ms, 0, 0, 0, "nothing published yet has arrived"},
		{400 * ms, 0, 0, 0, "tick 0 shows no peer request yet"},
		{500 * ms, 0, 0, 2, "tick 250 ms: one request from each peer"},
		{1000 * ms, 0, 0, 3, "tick 750 ms: replica 1 has two in flight"},
		{1200 * ms, 0, 0, 3, "tick 750 ms still: the end at 900 ms is published at 1 s"},
		{1500 * ms, 0, 0, 2, "tick 1250 ms"},
		{1500 * ms, 1, 0, 2, "replica 1 sees 0 and 2, not itself"},
		{1500 * ms, 0, 1, 0, "engine 1 has none"},
	}
	for _, tc := range tests {
		r.now = tc.now
		if got := r.peerInflight(tc.k, tc.e); got != tc.want {
			t.Errorf("at %v replica %d engine %d: %d, want %d (%s)", tc.now, tc.k, tc.e, got, tc.want, tc.whyNotZero)
		}
	}
	r.cfg.Isolated = true
	if got := r.peerInflight(0, 0); got != 0 {
		t.Errorf("isolated replicas see %d peer requests", got)
	}
}
