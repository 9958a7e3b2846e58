package fleet

import (
	"slices"
	"testing"
	"time"

	"github.com/rolter/rolter/router/admission"
	"github.com/rolter/rolter/sim/engine"
	"github.com/rolter/rolter/sim/workload"
)

// burstWorkload lays a synthetic chat workload on a short burst over
// capacity for 2 engines.
func burstWorkload(t *testing.T) *Workload {
	t.Helper()
	shape := Burst{Base: 0.5, Peak: 2, Warm: 5 * time.Second, Hold: 15 * time.Second, Cool: 5 * time.Second}
	unit := mustPrepare(t, FromWorkload(must(workload.Synthetic("chat", 3, 500, 1))))
	capacity := CachedCapacity(unit, 2, engine.Config{}, 0.6)
	reqs := FromWorkload(must(workload.Synthetic("chat", 3, shape.Requests(capacity)*11/10, capacity)))
	laid, err := shape.Apply(reqs, capacity, 3)
	if err != nil {
		t.Fatal(err)
	}
	return mustPrepare(t, laid)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Over capacity, admission serves critical requests well ahead of
// sheddable ones, rejects or expires instead of queueing without bound,
// and loses no request; the same run without admission treats every band
// alike.
func TestAdmissionUnderBurst(t *testing.T) {
	w := burstWorkload(t)
	cfg := Config{Strategy: "power_of_two", Engines: 2, Routers: 1, GossipDelay: 250 * time.Millisecond,
		Arrival: RandomArrival, Seed: 1}
	off := mustRun(t, cfg, w)
	acfg := admission.DefaultConfig()
	acfg.Thresholds = admission.Thresholds{MaxLoad: 24}
	cfg.Admission = &acfg
	on := mustRun(t, cfg, w)

	crit, shed := on.Bands[admission.Critical], on.Bands[admission.Sheddable]
	if crit.TTFT.P90 >= off.Bands[admission.Critical].TTFT.P90 {
		t.Errorf("critical p90 %v with admission, %v without: no better", crit.TTFT.P90, off.Bands[admission.Critical].TTFT.P90)
	}
	if crit.Wait.P90 >= shed.Wait.P90 {
		t.Errorf("critical waited %v (p90), sheddable %v: priority not applied", crit.Wait.P90, shed.Wait.P90)
	}
	if shed.Rejected+shed.Expired == 0 {
		t.Error("no sheddable request was turned away over capacity")
	}
	for b, r := range on.Bands {
		if r.Served+r.Rejected+r.Expired != r.Requests {
			t.Errorf("%s: %d requests, %d served + %d rejected + %d expired", admission.Band(b), r.Requests, r.Served, r.Rejected, r.Expired)
		}
	}
	for b, r := range off.Bands {
		if r.Served != r.Requests || r.Wait.P90 != 0 {
			t.Errorf("without admission %s: served %d of %d, waited %v", admission.Band(b), r.Served, r.Requests, r.Wait.P90)
		}
	}
	if again := mustRun(t, cfg, w); again.Bands != on.Bands {
		t.Error("the same admission run gave different results")
	}
}

// With several routers, a router that releases as if it were alone sends
// into room another router is filling at the same moment. Publishing each
// router's waiters per band (Queue.Release's share, the pool-wide queue
// bound and the Spread estimate) keeps them apart: fewer admitted requests
// reach an engine that all routers' counts together showed full.
func TestPublishedQueuesKeepRoutersFromStampeding(t *testing.T) {
	w := burstWorkload(t)
	acfg := admission.DefaultConfig()
	cfg := Config{Strategy: "power_of_two", Engines: 2, Routers: 2, GossipDelay: 250 * time.Millisecond,
		Arrival: RandomArrival, Seed: 1, Admission: &acfg, AloneQueues: true}
	alone := mustRun(t, cfg, w)
	cfg.AloneQueues = false
	shared := mustRun(t, cfg, w)
	over := func(r Result) (n int) {
		for _, b := range r.Bands {
			n += b.Overfull
		}
		return n
	}
	if s, a := over(shared), over(alone); s*4 > a*3 {
		t.Errorf("%d admitted requests reached a full engine with the waiters published, %d alone: want at most 3/4", s, a)
	}
	for b, r := range shared.Bands {
		if r.Served+r.Rejected+r.Expired != r.Requests {
			t.Errorf("%s: %d requests, %d served + %d rejected + %d expired", admission.Band(b), r.Requests, r.Served, r.Rejected, r.Expired)
		}
	}
}

// A request admission lets through at once reaches its pick as the
// router's does after its gate: through the mesh's hold. With room for
// every request, each one waits before its pick exactly as long as it
// does with admission off (the hold of same-instant picks, R=2), and not
// at all when the replica routes alone.
func TestAdmittedAtOnceHeldAsWithoutAdmission(t *testing.T) {
	w := mustPrepare(t, []Request{
		{At: 0, Tokens: seqTokens(0, 64), MaxTokens: 1},
		{At: 0, Tokens: seqTokens(100, 164), MaxTokens: 1},
		{At: 0, Tokens: seqTokens(200, 264), MaxTokens: 1},
		{At: 0, Tokens: seqTokens(300, 364), MaxTokens: 1},
		{At: time.Second, Tokens: seqTokens(400, 464), MaxTokens: 1},
	})
	waits := func(routers int, acfg *admission.Config) []time.Duration {
		r, err := simulate(t.Context(), Config{Strategy: "precise_cache_aware", Engines: 4, Routers: routers,
			Arrival: RoundRobinArrival, PeerDelay: time.Millisecond, Seed: 1, Admission: acfg}, w)
		if err != nil {
			t.Fatal(err)
		}
		var at []time.Duration
		for i := range r.flights {
			if acfg != nil && r.adm.let[i] != r.arrived[i] {
				t.Fatalf("R=%d: request %d queued in admission; the test wants room for every request", routers, i)
			}
			at = append(at, r.flights[i].at-r.arrived[i])
		}
		return at
	}
	acfg := admission.DefaultConfig()
	for _, routers := range []int{1, 2} {
		off, on := waits(routers, nil), waits(routers, &acfg)
		if !slices.Equal(on, off) {
			t.Errorf("R=%d: waits before the pick %v with admission, %v without", routers, on, off)
		}
		held := slices.ContainsFunc(off, func(d time.Duration) bool { return d > 0 })
		if held != (routers > 1) {
			t.Errorf("R=%d: waits %v: a pick held %v, want %v", routers, off, held, routers > 1)
		}
	}
}

// A request admission releases from its queue is held like any other
// before its pick: with two routers some released requests wait between
// their release and their pick (a release follows that router's picks
// of the same tick), none is picked before its release, and none is left
// held when the run ends.
func TestReleasedRequestsGoThroughTheHold(t *testing.T) {
	acfg := admission.DefaultConfig()
	r, err := simulate(t.Context(), Config{Strategy: "power_of_two", Engines: 2, Routers: 2,
		GossipDelay: 250 * time.Millisecond, Arrival: RandomArrival, Seed: 1, Admission: &acfg}, burstWorkload(t))
	if err != nil {
		t.Fatal(err)
	}
	released, held := 0, 0
	for i := range r.flights {
		if r.fates[i] != served || r.adm.let[i] == r.arrived[i] {
			continue
		}
		released++
		wait := r.flights[i].at - r.adm.let[i]
		if wait < 0 {
			t.Fatalf("request %d picked %v before admission released it", i, -wait)
		}
		if wait > 0 {
			held++
		}
	}
	if released == 0 {
		t.Fatal("admission released nothing from its queues; the burst should queue")
	}
	if held == 0 {
		t.Errorf("none of %d released requests was held before its pick", released)
	}
	if len(r.held) != 0 {
		t.Errorf("%d requests still held when the run ended", len(r.held))
	}
}
