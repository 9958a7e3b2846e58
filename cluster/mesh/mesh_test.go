package mesh

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/rolter/rolter/internal/testwait"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newHarness(t *testing.T, cfg HarnessConfig) *Harness {
	t.Helper()
	h, err := NewHarness(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	waitMembers(t, h)
	return h
}

func waitMembers(t *testing.T, h *Harness) {
	t.Helper()
	want := len(h.Routers) + len(h.Sidecars)
	testwait.For(t, 10*time.Second, "every node sees the whole pool", func() bool {
		for _, n := range h.members() {
			if n.NumMembers() != want {
				return false
			}
		}
		return true
	})
}

// viewMatches reports whether router r's view of sidecar i's engine is EXACT
// and holds exactly truth (checked key by key, plus the size).
func viewMatches(r *Router, url string, truth []uint64) bool {
	tg := r.View().Targets([]string{url})
	if tg.State(0) != StateExact {
		return false
	}
	e := tg.engines[0]
	set := e.set.Load()
	if set == nil || set.Len() != len(truth) {
		return false
	}
	for _, k := range truth {
		if n, ok := tg.ResidentPrefix(0, []uint64{k}); !ok || n != 1 {
			return false
		}
	}
	return true
}

func TestResidencyReachesEveryRouter(t *testing.T) {
	h := newHarness(t, HarnessConfig{Routers: 3, Sidecars: 2, Seed: 1})
	r := rand.New(rand.NewPCG(11, 12))
	truth := map[int][]uint64{}
	for i, s := range h.Sidecars {
		keys := randomKeys(r, 300)
		s.Publisher().Apply(ResidencyDelta{Added: keys, State: StateExact})
		truth[i] = keys
	}
	check := func(what string) {
		t.Helper()
		testwait.For(t, 5*time.Second, what, func() bool {
			for _, rt := range h.Routers {
				for i := range h.Sidecars {
					if !viewMatches(rt, EngineURL(i), truth[i]) {
						return false
					}
				}
			}
			return true
		})
	}
	check("initial residency on every router")

	t.Run("removals and additions", func(t *testing.T) {
		s := h.Sidecars[0]
		gone := truth[0][:100]
		fresh := randomKeys(r, 50)
		s.Publisher().Apply(ResidencyDelta{Removed: gone, Added: fresh})
		truth[0] = append(slices.Clone(truth[0][100:]), fresh...)
		check("delta applied on every router")
		for _, rt := range h.Routers {
			tg := rt.View().Targets([]string{EngineURL(0)})
			if n, ok := tg.ResidentPrefix(0, []uint64{fresh[0], gone[0]}); !ok || n != 1 {
				t.Errorf("%s: ResidentPrefix = %d,%v, want 1,true (removed key must stop the prefix)", rt.Name(), n, ok)
			}
		}
	})
	t.Run("cleared", func(t *testing.T) {
		keys := randomKeys(r, 10)
		h.Sidecars[1].Publisher().Apply(ResidencyDelta{Cleared: true, Added: keys})
		truth[1] = keys
		check("clear applied on every router")
	})
	t.Run("degraded is never exact", func(t *testing.T) {
		h.Sidecars[1].Publisher().Apply(ResidencyDelta{State: StateDegraded})
		testwait.For(t, 5*time.Second, "DEGRADED on every router", func() bool {
			for _, rt := range h.Routers {
				tg := rt.View().Targets([]string{EngineURL(1)})
				if _, ok := tg.ResidentPrefix(0, truth[1][:1]); ok || tg.State(0) != StateDegraded {
					return false
				}
			}
			return true
		})
	})
}

func TestLateJoinerConvergesFromFullState(t *testing.T) {
	h := newHarness(t, HarnessConfig{Routers: 1, Sidecars: 2, Seed: 2})
	r := rand.New(rand.NewPCG(13, 14))
	truth := [][]uint64{randomKeys(r, 5000), randomKeys(r, 20)}
	for i, s := range h.Sidecars {
		s.Publisher().Apply(ResidencyDelta{Added: truth[i]})
	}
	testwait.For(t, 5*time.Second, "first router converges", func() bool { return viewMatches(h.Routers[0], EngineURL(0), truth[0]) })

	late, err := h.AddRouter(t.Context(), "router-late")
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "late router converges via full state", func() bool {
		return viewMatches(late, EngineURL(0), truth[0]) && viewMatches(late, EngineURL(1), truth[1])
	})
	if late.Stats().FullsApplied.Load() == 0 {
		t.Error("late router applied no full state")
	}
}

func TestSidecarKilledGoesStaleAndNeutral(t *testing.T) {
	h := newHarness(t, HarnessConfig{Routers: 2, Sidecars: 2, Seed: 3})
	keys := randomKeys(rand.New(rand.NewPCG(1, 5)), 50)
	dead := h.Sidecars[0]
	dead.Publisher().Apply(ResidencyDelta{Added: keys})
	dead.Publisher().SetStatus(EngineStatus{MetricsOK: true, Running: 3, Waiting: 1})
	rt := h.Routers[0]
	tg := rt.View().Targets([]string{EngineURL(0), EngineURL(1)})
	testwait.For(t, 5*time.Second, "engine EXACT with load", func() bool {
		q, ok := tg.Load(0)
		return viewMatches(rt, EngineURL(0), keys) && ok && q == 4
	})
	if got := rt.View().Engines("m"); len(got) != 2 {
		t.Fatalf("discovered %d engines, want 2", len(got))
	}
	changed := rt.View().Changed()

	start := time.Now()
	dead.Close() // killed: no leave message
	testwait.For(t, 10*time.Second, "killed sidecar's engine STALE", func() bool { return tg.State(0) == StateStale })
	t.Logf("STALE after %v", time.Since(start).Round(time.Millisecond))
	if n, ok := tg.ResidentPrefix(0, keys); ok || n != 0 {
		t.Errorf("stale engine ResidentPrefix = %d,%v, want neutral 0,false", n, ok)
	}
	if _, ok := tg.Load(0); ok {
		t.Error("stale engine still reports load")
	}
	if _, _, ok := tg.Occupancy(0); ok {
		t.Error("stale engine still reports occupancy")
	}
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Error("discovery change not signalled")
	}
	if got := rt.View().Engines("m"); len(got) != 1 || got[0].EngineURL != EngineURL(1) {
		t.Errorf("discovery after kill = %+v, want only %s", got, EngineURL(1))
	}
	if set := tg.engines[0].set.Load(); set != nil {
		t.Errorf("stale engine index still holds %d bytes", set.Bytes())
	}
}

// TestLossyLinksConvergeWithoutFalseDeaths runs memberlist's LAN timing
// (probe timeout 500 ms), as production does: FastTiming's 100 ms ack
// deadline is missed by a scheduler stall of the loaded test process
// alone, and then a live member could be declared dead whatever the loss
// (1 run in 24 with -race, three test processes at once).
func TestLossyLinksConvergeWithoutFalseDeaths(t *testing.T) {
	h := newHarness(t, HarnessConfig{Routers: 2, Sidecars: 3, Seed: 4, Timing: &Timing{}})
	for _, tr := range h.Transports {
		tr.SetLoss(0.2)
	}
	r := rand.New(rand.NewPCG(15, 16))
	truth := make([][]uint64, len(h.Sidecars))
	for round := range 20 {
		for i, s := range h.Sidecars {
			add := randomKeys(r, 40)
			var rm []uint64
			if len(truth[i]) > 20 {
				rm = truth[i][:20]
				truth[i] = truth[i][20:]
			}
			s.Publisher().Apply(ResidencyDelta{Added: add, Removed: rm})
			truth[i] = append(truth[i], add...)
		}
		if round%5 == 0 {
			time.Sleep(60 * time.Millisecond) // spread the load over several flushes
		}
	}
	testwait.For(t, 20*time.Second, "every router converges despite 20% loss", func() bool {
		for _, rt := range h.Routers {
			for i := range h.Sidecars {
				if !viewMatches(rt, EngineURL(i), truth[i]) {
					return false
				}
			}
		}
		return true
	})
	var dropped uint64
	for _, tr := range h.Transports {
		dropped += tr.PacketsDropped.Load()
	}
	if dropped == 0 {
		t.Fatal("the lossy transport dropped nothing")
	}
	for _, n := range h.members() {
		if got := n.NumMembers(); got != len(h.Routers)+len(h.Sidecars) {
			t.Errorf("%s sees %d members: a live node was declared dead", n.Name(), got)
		}
	}
	for _, rt := range h.Routers {
		if got := len(rt.View().Engines("")); got != len(h.Sidecars) {
			t.Errorf("%s discovers %d engines, want %d", rt.Name(), got, len(h.Sidecars))
		}
	}
}

func TestEncryption(t *testing.T) {
	key := []byte("0123456789abcdef")
	t.Run("required unless insecure", func(t *testing.T) {
		_, err := StartRouter(t.Context(), Config{Name: "x"}, nil)
		if !errors.Is(err, ErrNoGossipKey) {
			t.Fatalf("err = %v, want ErrNoGossipKey", err)
		}
		_, err = StartRouter(t.Context(), Config{Name: "x", Key: []byte("short")}, nil)
		if !errors.Is(err, ErrBadGossipKey) {
			t.Fatalf("err = %v, want ErrBadGossipKey", err)
		}
	})
	t.Run("key from env and file", func(t *testing.T) {
		enc := base64.StdEncoding.EncodeToString(key)
		got, err := LoadKey("", func(k string) string {
			if k == KeyEnv {
				return enc
			}
			return ""
		})
		if err != nil || string(got) != string(key) {
			t.Fatalf("env key = %q, %v", got, err)
		}
		path := filepath.Join(t.TempDir(), "gossip.key")
		if err := os.WriteFile(path, []byte(enc+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := LoadKey(path, nil); err != nil || string(got) != string(key) {
			t.Fatalf("file key = %q, %v", got, err)
		}
		if _, err := LoadKey("", func(string) string { return "not base64!" }); !errors.Is(err, ErrBadGossipKey) {
			t.Fatalf("bad key err = %v", err)
		}
		if got, err := LoadKey("", func(string) string { return "" }); got != nil || err != nil {
			t.Fatalf("no key = %q, %v", got, err)
		}
	})
	t.Run("same key joins, other key cannot", func(t *testing.T) {
		h := newHarness(t, HarnessConfig{Routers: 1, Sidecars: 1, Seed: 5, Key: key})
		keys := []uint64{1, 2, 3}
		h.Sidecars[0].Publisher().Apply(ResidencyDelta{Added: keys})
		testwait.For(t, 5*time.Second, "encrypted pool converges", func() bool { return viewMatches(h.Routers[0], EngineURL(0), keys) })

		tr, err := NewLoopbackTransport(99)
		if err != nil {
			t.Fatal(err)
		}
		_, err = StartSidecar(t.Context(), Config{Name: "intruder", Meta: Meta{EngineURL: "http://evil"},
			Key: []byte("fedcba9876543210"), Transport: tr, Timing: FastTiming}, []string{h.Routers[0].Addr()})
		if err == nil {
			t.Fatal("a node with another key joined the pool")
		}
	})
}

func TestHostileSummariesDroppedAndCapped(t *testing.T) {
	h := newHarness(t, HarnessConfig{Routers: 1, Sidecars: 1, Seed: 6, Configure: func(c *Config) {
		c.Router.MaxBlocksPerEngine = 1000
	}})
	rt, sc := h.Routers[0], h.Sidecars[0]
	sc.Publisher().Apply(ResidencyDelta{Added: []uint64{1}})
	tg := rt.View().Targets([]string{EngineURL(0)})
	testwait.For(t, 5*time.Second, "engine EXACT", func() bool { return tg.State(0) == StateExact })
	deliver := (*delegate)(rt.core).NotifyMsg

	t.Run("malformed messages counted", func(t *testing.T) {
		before := rt.Stats().Malformed.Load()
		bad := [][]byte{
			{},
			{msgResidencyDelta, 0xff, 0xff},
			{99, 1, 2, 3},
			append([]byte{msgEngineStatus}, 0x0a, 0x05),
			{msgResync, 0x08, 0x01, 0x12, 0x01, 's'}, // resync is not for routers
		}
		for _, b := range bad {
			deliver(b)
		}
		if got := rt.Stats().Malformed.Load() - before; got != uint64(len(bad)) {
			t.Errorf("malformed counter rose by %d, want %d", got, len(bad))
		}
		if tg.State(0) != StateExact {
			t.Errorf("state = %v after junk, want EXACT", tg.State(0))
		}
	})
	t.Run("exported as metrics", func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		if err := reg.Register(rt.Collector()); err != nil {
			t.Fatal(err)
		}
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var malformed float64
		for _, f := range fams {
			if f.GetName() == "rolter_gossip_malformed_total" {
				malformed = f.GetMetric()[0].GetCounter().GetValue()
			}
		}
		if malformed != float64(rt.Stats().Malformed.Load()) || malformed == 0 {
			t.Errorf("rolter_gossip_malformed_total = %v, stats say %d", malformed, rt.Stats().Malformed.Load())
		}
	})
	t.Run("unknown sender ignored", func(t *testing.T) {
		before := rt.Stats().UnknownSender.Load()
		deliver(encodeStatus(&statusMsg{From: "nobody", Seq: 1, Status: EngineStatus{Running: 5}}))
		if rt.Stats().UnknownSender.Load() != before+1 {
			t.Error("status from an unknown node not counted")
		}
	})
	t.Run("absurd values clamped", func(t *testing.T) {
		deliver(encodeStatus(&statusMsg{From: sc.Name(), Seq: 1 << 40, Epoch: 1, Status: EngineStatus{
			MetricsOK: true, Running: 1 << 62, Waiting: 1 << 62, KVUsage: 50, LMCacheKnown: true, LMCacheOccupancy: -2}}))
		q, ok := tg.Load(0)
		if !ok || q != 2*maxCount {
			t.Errorf("Load = %d,%v, want clamped %d", q, ok, 2*maxCount)
		}
		if occ, _, ok := tg.Occupancy(0); !ok || occ != 0 {
			t.Errorf("Occupancy = %v,%v, want 0,true", occ, ok)
		}
		if u, ok := tg.KVUsage(0); !ok || u != 1 {
			t.Errorf("KVUsage = %v,%v, want 1,true", u, ok)
		}
	})
	t.Run("block count capped", func(t *testing.T) {
		r := rand.New(rand.NewPCG(17, 18))
		sc.Publisher().Apply(ResidencyDelta{Added: randomKeys(r, 5000)})
		testwait.For(t, 5*time.Second, "over-cap engine DEGRADED", func() bool { return tg.State(0) == StateDegraded })
		if n := tg.engines[0].set.Load().Len(); n > 1000 {
			t.Errorf("router holds %d blocks, cap is 1000", n)
		}
		if rt.Stats().KeysDropped.Load() == 0 {
			t.Error("dropped keys not counted")
		}
		if _, ok := tg.ResidentPrefix(0, []uint64{1}); ok {
			t.Error("a capped (partial) view is scored as exact")
		}
	})
}

func TestEngineCapRefusesFloods(t *testing.T) {
	h := newHarness(t, HarnessConfig{Routers: 1, Sidecars: 3, Seed: 7, Configure: func(c *Config) { c.Router.MaxEngines = 2 }})
	rt := h.Routers[0]
	if got := len(*rt.View().engines.Load()); got > 2 {
		t.Errorf("router holds %d engines, cap is 2", got)
	}
	if rt.Stats().EnginesRefused.Load() == 0 {
		t.Error("refused engine not counted")
	}
}

func TestRoutersShareInflightAndLearned(t *testing.T) {
	h := newHarness(t, HarnessConfig{Routers: 3, Sidecars: 1, Seed: 8})
	sc := h.Sidecars[0]
	sc.Publisher().SetStatus(EngineStatus{MetricsOK: true, Running: 2, Waiting: 1})
	a, b, c := h.Routers[0].View(), h.Routers[1].View(), h.Routers[2].View()
	url := EngineURL(0)
	publishInflight(h.Routers[1], map[string]uint64{url: 5})
	publishInflight(h.Routers[2], map[string]uint64{url: 7})
	// The engine's queue (3) and the routers' in-flight (5 + 7) are two
	// estimates of the same outstanding requests: a router sees the larger,
	// less its own in-flight (which it adds itself), never their sum.
	testwait.For(t, 5*time.Second, "router a sees b's and c's in-flight, which exceed the engine's queue", func() bool {
		q, ok := a.Load(url)
		return ok && q == 5+7
	})
	testwait.For(t, 5*time.Second, "router b sees max(queue 3 − own 5, c's 7) = 7", func() bool {
		q, ok := b.Load(url)
		return ok && q == 7
	})
	publishInflight(h.Routers[2], map[string]uint64{})
	testwait.For(t, 5*time.Second, "c's in-flight drops to zero", func() bool { q, _ := a.Load(url); return q == 5 })
	sc.Publisher().SetStatus(EngineStatus{MetricsOK: true, Running: 16, Waiting: 4})
	testwait.For(t, 5*time.Second, "a deep engine queue dominates the routers' in-flight", func() bool {
		q, _ := a.Load(url)
		return q == 20
	})
	testwait.For(t, 5*time.Second, "router b sees queue 20 less its own 5", func() bool {
		q, ok := b.Load(url)
		return ok && q == 20-5
	})
	_ = c

	rec := Learned{Kind: LearnedPin, Model: "m", Target: url, Key: 42, TTL: time.Minute}
	h.Routers[0].Share(rec)
	for _, r := range h.Routers[1:] {
		select {
		case got := <-r.Learned():
			if got.Key != 42 || got.Kind != LearnedPin || got.Target != url || got.From != h.Routers[0].Name() {
				t.Errorf("received %+v", got)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("learned record not received")
		}
	}
}

func TestClusterSnapshot(t *testing.T) {
	h := newHarness(t, HarnessConfig{Routers: 2, Sidecars: 1, Seed: 9})
	sc := h.Sidecars[0]
	sc.Publisher().Apply(ResidencyDelta{Added: []uint64{10, 11, 12}})
	sc.Publisher().SetStatus(EngineStatus{MetricsOK: true, Running: 1, Waiting: 2, KVUsage: 0.5, MaxLoras: 2,
		Adapters: []string{"sql"}, LMCacheKnown: true, LMCacheOccupancy: 0.75})
	rt := h.Routers[0]
	tg := rt.View().Targets([]string{EngineURL(0)})
	testwait.For(t, 5*time.Second, "engine known", func() bool {
		res, known := tg.AdapterResident(0, "sql")
		return tg.State(0) == StateExact && res && known
	})
	snap := rt.Snapshot()
	if len(snap.Routers) != 2 || len(snap.Engines) != 1 || snap.Self != rt.Name() {
		t.Fatalf("snapshot = %+v", snap)
	}
	e := snap.Engines[0]
	if e.EngineURL != EngineURL(0) || e.State != "EXACT" || e.ResidentBlocks != 3 || e.Running != 1 || e.Waiting != 2 ||
		e.KVUsage != 0.5 || e.LMCacheOccupancy == nil || *e.LMCacheOccupancy != 0.75 || !slices.Equal(e.Adapters, []string{"sql"}) ||
		!slices.Equal(e.Models, []string{"m"}) || e.AgeMS < 0 || e.AgeMS > 3000 ||
		!e.KVEvents || !e.LMCache { // EXACT residency from events, a fresh LMCache figure

		t.Errorf("engine snapshot = %+v", e)
	}
	if res, known := tg.AdapterResident(0, "other"); res || !known {
		t.Errorf("AdapterResident(other) = %v,%v, want false,true", res, known)
	}
}

// BenchmarkHotPath measures the reads strategies make on every pick; each
// must report 0 allocs/op.
func BenchmarkHotPath(b *testing.B) {
	h, err := NewHarness(context.Background(), HarnessConfig{Routers: 1, Sidecars: 1, Seed: 10})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	keys := randomKeys(rand.New(rand.NewPCG(1, 2)), 50000)
	h.Sidecars[0].Publisher().Apply(ResidencyDelta{Added: keys})
	h.Sidecars[0].Publisher().SetStatus(EngineStatus{MetricsOK: true, Running: 1, Adapters: []string{"a", "b", "c"}, LMCacheKnown: true})
	v := h.Routers[0].View()
	tg := v.Targets([]string{EngineURL(0)})
	testwait.For(b, 10*time.Second, "engine EXACT with a status", func() bool {
		_, _, ok := tg.Occupancy(0)
		return ok && tg.State(0) == StateExact
	})
	query := keys[:32]
	out := make([]int, 1)
	url := EngineURL(0)
	cases := []struct {
		name string
		f    func(*testing.B)
	}{
		{"ResidentPrefix/32", func(b *testing.B) {
			if n, ok := tg.ResidentPrefix(0, query); !ok || n != 32 {
				b.Fatal(fmt.Sprint(n, ok))
			}
		}},
		{"ResidentPrefixes/32", func(*testing.B) { tg.ResidentPrefixes(query, out) }},
		{"Load", func(*testing.B) { v.Load(url) }},
		{"Occupancy", func(*testing.B) { tg.Occupancy(0) }},
		{"AdapterResident", func(*testing.B) { tg.AdapterResident(0, "c") }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.f(b)
			}
		})
	}
}

func TestDivergedViewRepairedByDigest(t *testing.T) {
	h := newHarness(t, HarnessConfig{Routers: 1, Sidecars: 1, Seed: 12})
	rt := h.Routers[0]
	keys := randomKeys(rand.New(rand.NewPCG(21, 22)), 500)
	h.Sidecars[0].Publisher().Apply(ResidencyDelta{Added: keys})
	testwait.For(t, 5*time.Second, "converged", func() bool { return viewMatches(rt, EngineURL(0), keys) })
	// Let the start-up settle (the join's full state and any full the
	// router asked for when a delta beat it): two more statuses applied
	// with the view still matching, so what repairs the corruption below
	// can only be the digest check.
	e := rt.View().lookup(EngineURL(0))
	statusSeq := func() uint64 { e.mu.Lock(); defer e.mu.Unlock(); return e.statusSeq }
	seq0 := statusSeq()
	testwait.For(t, 5*time.Second, "two more statuses applied", func() bool {
		return statusSeq() >= seq0+2 && viewMatches(rt, EngineURL(0), keys)
	})
	fulls := rt.Stats().FullsApplied.Load()

	// Corrupt the router's copy behind the protocol's back, as a lost
	// update that no sequence number noticed would.
	e.mu.Lock()
	e.set.Load().Remove(keys[7])
	e.set.Load().Add(12345)
	e.mu.Unlock()
	testwait.For(t, 5*time.Second, "status digest detects the divergence and a full state repairs it", func() bool {
		return viewMatches(rt, EngineURL(0), keys)
	})
	if rt.Stats().Divergences.Load() == 0 || rt.Stats().FullsApplied.Load() <= fulls {
		t.Errorf("divergences %d, fulls %d: repair did not go through the digest check",
			rt.Stats().Divergences.Load(), rt.Stats().FullsApplied.Load())
	}
	if n, ok := rt.View().Targets([]string{EngineURL(0)}).ResidentPrefix(0, []uint64{12345}); !ok || n != 0 {
		t.Errorf("the stray key is still resident: %d,%v", n, ok)
	}
}

func TestResidentPrefixesBatch(t *testing.T) {
	h := newHarness(t, HarnessConfig{Routers: 1, Sidecars: 2, Seed: 13})
	h.Sidecars[0].Publisher().Apply(ResidencyDelta{Added: []uint64{1, 2, 3}})
	h.Sidecars[1].Publisher().Apply(ResidencyDelta{Added: []uint64{1}, State: StateDegraded})
	tg := h.Routers[0].View().Targets([]string{EngineURL(0), EngineURL(1), "http://127.0.0.1:1/"})
	out := make([]int, 3)
	testwait.For(t, 5*time.Second, "batch answers per target", func() bool {
		tg.ResidentPrefixes([]uint64{1, 2, 9, 3}, out)
		return slices.Equal(out, []int{2, -1, -1})
	})
}

func TestPublisherResetSendsOnlyTheDifference(t *testing.T) {
	h := newHarness(t, HarnessConfig{Routers: 1, Sidecars: 1, Seed: 14})
	p := h.Sidecars[0].Publisher()
	r := rand.New(rand.NewPCG(23, 24))
	keys := randomKeys(r, 2000)
	p.Reset(keys, StateExact)
	testwait.For(t, 5*time.Second, "first snapshot applied", func() bool { return viewMatches(h.Routers[0], EngineURL(0), keys) })
	settled(t, h)
	st := h.Sidecars[0].Stats()
	p.mu.Lock()
	seq := p.seq
	p.mu.Unlock()
	fulls, resent, sent := st.FullsSent.Load(), st.DeltasResent.Load(), st.AppBytesSent.Load()
	next := append(slices.Clone(keys[10:]), randomKeys(r, 10)...)
	p.Reset(next, StateExact)
	testwait.For(t, 5*time.Second, "second snapshot applied", func() bool { return viewMatches(h.Routers[0], EngineURL(0), next) })
	grew := st.AppBytesSent.Load() - sent
	// What the Reset published: the deltas after seq, as the sidecar keeps
	// them to resend.
	published := 0
	p.mu.Lock()
	for _, d := range p.ring {
		if d.seq > seq {
			published += len(d.msg)
		}
	}
	p.mu.Unlock()
	if published == 0 || published > 2000 {
		t.Errorf("a snapshot differing in 20 keys was published as %d bytes of deltas; the difference should be ~200", published)
	}
	// On the wire it is the same, unless the repair protocol sent a full
	// state or resent deltas meanwhile (settled makes that rare).
	if st.FullsSent.Load() == fulls && st.DeltasResent.Load() == resent && grew > 2000 {
		t.Errorf("a snapshot differing in 20 keys cost %d bytes; the difference should be ~200", grew)
	}
}

// settled waits until the exchange between the harness's first sidecar
// and first router is over: two messages (statuses) reach the router while
// the sidecar sends no full state and resends no delta and the router
// asks for no resync and applies no full state. Until then the
// full state a router's join queued, or one a status that overtook the
// first snapshot asked for, may still be on its way, carrying the whole
// snapshot again.
func settled(t *testing.T, h *Harness) {
	t.Helper()
	sc, rs := h.Sidecars[0].Stats(), h.Routers[0].Stats()
	counts := func() [4]uint64 {
		return [4]uint64{sc.FullsSent.Load(), sc.DeltasResent.Load(), rs.ResyncsAsked.Load(), rs.FullsApplied.Load()}
	}
	since, from := counts(), rs.MsgsReceived.Load()
	testwait.For(t, 10*time.Second, "the sidecar and the router settled", func() bool {
		now := counts()
		if now != since {
			since, from = now, rs.MsgsReceived.Load()
			return false
		}
		return rs.MsgsReceived.Load() >= from+2
	})
}

func TestEngineOwnershipAndHandover(t *testing.T) {
	h := newHarness(t, HarnessConfig{Routers: 1, Sidecars: 1, Seed: 15})
	rt := h.Routers[0]
	orig := h.Sidecars[0]
	orig.Publisher().Apply(ResidencyDelta{Added: []uint64{1, 2}})
	testwait.For(t, 5*time.Second, "owner's residency", func() bool { return viewMatches(rt, EngineURL(0), []uint64{1, 2}) })

	second, err := h.AddSidecar(t.Context(), "sidecar-restarted", EngineURL(0), "m")
	if err != nil {
		t.Fatal(err)
	}
	unknown := rt.Stats().UnknownSender.Load()
	second.Publisher().Apply(ResidencyDelta{Added: []uint64{7}})
	testwait.For(t, 5*time.Second, "claim counted as a conflict", func() bool { return rt.Stats().Conflicts.Load() > 0 })
	// The claimant's delta and statuses reach the router and are dropped
	// (it does not own the engine): wait for the dropped delta and two
	// statuses before checking that nothing of it was applied.
	testwait.For(t, 5*time.Second, "the claimant's messages dropped", func() bool {
		return rt.Stats().UnknownSender.Load() >= unknown+3
	})
	if !viewMatches(rt, EngineURL(0), []uint64{1, 2}) {
		t.Fatal("a second sidecar claiming the URL displaced the live owner")
	}

	if err := orig.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the other sidecar takes over after the owner leaves", func() bool {
		return viewMatches(rt, EngineURL(0), []uint64{7})
	})
}

func TestDiscoveryFollowsJoins(t *testing.T) {
	h := newHarness(t, HarnessConfig{Routers: 1, Sidecars: 1, Seed: 16})
	v := h.Routers[0].View()
	changed := v.Changed()
	if got := v.Engines("llama"); len(got) != 0 {
		t.Fatalf("engines for llama before any joined: %+v", got)
	}
	if _, err := h.AddSidecar(t.Context(), "sidecar-llama", "HTTP://127.0.0.1:30000/", "llama", "llama-lora"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no change notification for a joining engine")
	}
	testwait.For(t, 5*time.Second, "new engine discovered", func() bool {
		got := v.Engines("llama")
		return len(got) == 1 && got[0].EngineURL == "http://127.0.0.1:30000" && got[0].NodeID == "sidecar-llama"
	})
	if got := v.Engines("m"); len(got) != 1 || got[0].EngineURL != EngineURL(0) {
		t.Errorf("engines for m = %+v", got)
	}
}

func TestRoutersReportAppliedConfigVersion(t *testing.T) {
	h := newHarness(t, HarnessConfig{Routers: 2, Sidecars: 1, Seed: 9})
	a, b := h.Routers[0], h.Routers[1]
	if _, ok := b.share.configVersion(a.Name()); ok {
		t.Fatal("a version is known before any was published")
	}
	testwait.For(t, 15*time.Second, "the routers see each other", func() bool {
		return len(a.Snapshot().Routers) == 2 && len(b.Snapshot().Routers) == 2
	})
	// An idle router (no in-flight requests) still reports its version.
	a.PublishConfigVersion(7)
	testwait.For(t, 10*time.Second, "b learns a's applied config_version", func() bool {
		v, ok := b.share.configVersion(a.Name())
		return ok && v == 7
	})
	a.PublishConfigVersion(8)
	testwait.For(t, 10*time.Second, "b follows a's next config_version", func() bool {
		v, _ := b.share.configVersion(a.Name())
		return v == 8
	})
	var seen uint64
	for _, r := range b.Snapshot().Routers {
		if r.NodeID == h.Routers[0].Name() || r.ConfigVersion == 8 {
			seen = max(seen, r.ConfigVersion)
		}
	}
	if seen != 8 {
		t.Errorf("b's snapshot does not carry a's config_version 8: %+v", b.Snapshot().Routers)
	}
}

// Routers' queued-prefill sums travel with their in-flight counts: a
// router's view sums the others' (Remote, what meshstate reads) and its
// snapshot (GET /api/v1/cluster's engines) adds its own.
func TestRoutersSharePrefill(t *testing.T) {
	h := newHarness(t, HarnessConfig{Routers: 3, Sidecars: 1, Seed: 12})
	h.Sidecars[0].Publisher().SetStatus(EngineStatus{MetricsOK: true, Running: 1})
	a, b, c := h.Routers[0], h.Routers[1], h.Routers[2]
	url := EngineURL(0)
	a.PublishLoads(map[string]Load{url: {Inflight: 1, Prefill: 50}}, time.Now())
	b.PublishLoads(map[string]Load{url: {Inflight: 2, Prefill: 800}}, time.Now())
	c.PublishLoads(map[string]Load{url: {Prefill: 200}}, time.Now()) // all its requests past prefill but one still counted
	testwait.For(t, 5*time.Second, "a sees b's and c's prefill sums", func() bool {
		r, ok := a.View().Remote(url)
		return ok && r.PeersOK && r.Prefill == 1000 && r.Inflight == 2
	})
	var got uint64
	for _, e := range a.Snapshot().Engines {
		if e.EngineURL == url {
			got = e.QueuedPrefillTokens
		}
	}
	if got != 1050 {
		t.Errorf("snapshot queued_prefill_tokens %d, want 1050 (own 50 + peers' 1000)", got)
	}
	b.PublishLoads(map[string]Load{}, time.Now())
	testwait.For(t, 5*time.Second, "b's sum leaves a's view when b publishes none", func() bool {
		r, _ := a.View().Remote(url)
		return r.Prefill == 200
	})
}

// Routers' admission waiters per band travel with their loads, even from
// a router with nothing in flight on the engine (all its requests wait),
// and leave the others' views when it has none.
func TestRoutersShareAdmissionWaiters(t *testing.T) {
	h := newHarness(t, HarnessConfig{Routers: 3, Sidecars: 1, Seed: 13})
	a, b, c := h.Routers[0], h.Routers[1], h.Routers[2]
	url := EngineURL(0)
	b.PublishLoads(map[string]Load{url: {Waiting: [3]uint64{4, 0, 1}}}, time.Now())
	c.PublishLoads(map[string]Load{url: {Inflight: 2, Waiting: [3]uint64{0, 3, 2}}}, time.Now())
	testwait.For(t, 5*time.Second, "a sees b's and c's waiters", func() bool {
		r, ok := a.View().Remote(url)
		return ok && r.PeersOK && r.Waiting == [3]uint64{4, 3, 3}
	})
	b.PublishLoads(map[string]Load{}, time.Now())
	testwait.For(t, 5*time.Second, "b's waiters leave a's view when b has none", func() bool {
		r, _ := a.View().Remote(url)
		return r.Waiting == [3]uint64{0, 3, 2}
	})
}

// publishInflight publishes in-flight counts alone.
func publishInflight(r *Router, counts map[string]uint64) {
	loads := make(map[string]Load, len(counts))
	for u, n := range counts {
		loads[u] = Load{Inflight: n}
	}
	r.PublishLoads(loads, time.Now())
}

// A load change goes to the other routers as the engines that changed
// alone, stamped with when it was made and when it was sent: the receiver
// keeps the other engines' loads, times the change's age on arrival
// (rolter_mesh_peer_load_age_seconds), and its PeerPublished and PeerNews
// move.
func TestRoutersSendLoadChangesAlone(t *testing.T) {
	h := newHarness(t, HarnessConfig{Routers: 2, Sidecars: 2, Seed: 14})
	a, b := h.Routers[0], h.Routers[1]
	e0, e1 := EngineURL(0), EngineURL(1)
	a.PublishLoads(map[string]Load{e0: {Inflight: 3, Prefill: 300}, e1: {Inflight: 1, Prefill: 100}}, time.Now())
	testwait.For(t, 5*time.Second, "b sees a's loads", func() bool {
		r0, _ := b.View().Remote(e0)
		r1, _ := b.View().Remote(e1)
		return r0.Prefill == 300 && r1.Prefill == 100
	})
	// a's heartbeat repeats every load (a full send) on its own ticker; one
	// that falls between the doctored record below and the change would
	// resend e0 and prove nothing, so such a round is run again.
	fullAt := func() time.Time {
		a.share.mu.Lock()
		defer a.share.mu.Unlock()
		return a.share.fullAt
	}
	var before, changed time.Time
	var news <-chan struct{}
	for round := 1; ; round++ {
		before = b.PeerPublished()
		news = b.PeerNews()
		full := fullAt()
		a.share.mu.Lock()
		a.share.sent[e0] = Load{Inflight: 99, Prefill: 9900} // what b would hold if e0 were resent
		a.share.mu.Unlock()
		changed = time.Now()
		prefill := uint64(700 + round)
		a.PublishLoads(map[string]Load{e0: {Inflight: 99, Prefill: 9900}, e1: {Inflight: 2, Prefill: prefill}}, changed)
		testwait.For(t, 5*time.Second, "b sees e1's change", func() bool {
			r1, _ := b.View().Remote(e1)
			return r1.Prefill == prefill
		})
		if !fullAt().Equal(full) {
			if round == 5 {
				t.Fatal("a's heartbeat repeated every load in each of 5 rounds; the change of e1 alone was never isolated")
			}
			// Put e0 back as b holds it after the repeat, and go again.
			a.PublishLoads(map[string]Load{e0: {Inflight: 3, Prefill: 300}, e1: {Inflight: 1, Prefill: 100}}, time.Now())
			testwait.For(t, 5*time.Second, "b sees a's loads again", func() bool {
				r0, _ := b.View().Remote(e0)
				return r0.Prefill == 300
			})
			continue
		}
		break
	}
	if r0, _ := b.View().Remote(e0); r0.Prefill != 300 {
		t.Errorf("b's e0 prefill %d after a change of e1 alone: want the 300 it had (e0 was not resent)", r0.Prefill)
	}
	// b applies a message's loads before it closes PeerNews and after it
	// records when the message was sent: the view can show e1's change a
	// moment before the channel closes.
	select {
	case <-news:
	case <-time.After(5 * time.Second):
		t.Error("PeerNews not closed by a's message")
	}
	if after := b.PeerPublished(); !after.After(before) || after.Before(changed) {
		t.Errorf("PeerPublished %v → %v; want it to move past the change at %v", before, after, changed)
	}
	var m dto.Metric
	if err := b.share.age.Write(&m); err != nil {
		t.Fatal(err)
	}
	if n := m.GetHistogram().GetSampleCount(); n < 2 {
		t.Errorf("age histogram has %d samples, want one per change message (2)", n)
	}
}

// A router's intent reaches the others at once, without a load change,
// and stays pending there until a message of that router without it (the
// pick's publication, or a withdrawal) arrives; PeerNews moves on each.
func TestRoutersSendIntents(t *testing.T) {
	h := newHarness(t, HarnessConfig{Routers: 2, Sidecars: 1, Seed: 15})
	a, b := h.Routers[0], h.Routers[1]
	testwait.For(t, 10*time.Second, "the routers know each other", func() bool {
		return len(a.Snapshot().Routers) == 2 && len(b.Snapshot().Routers) == 2
	})
	peer := func() (PeerIntent, bool) {
		got := b.PeerIntents(nil)
		if len(got) != 1 {
			return PeerIntent{}, false
		}
		return got[0], true
	}
	news := b.PeerNews()
	at := time.Now()
	a.Intend(0, at)
	testwait.For(t, 5*time.Second, "b sees a's pending intent", func() bool {
		p, ok := peer()
		return ok && p.Pending && p.Intent.Equal(at) && p.Rank == 0
	})
	select {
	case <-news:
	default:
		t.Error("PeerNews not closed by a's intent")
	}
	if n := b.IntentsReceived(); n != 1 {
		t.Errorf("b received %d intents, want 1", n)
	}
	if d := b.PeerDelay(); d <= 0 || d > time.Second {
		t.Errorf("b's peer delay estimate %v after a's intent, want its age on arrival, halved", d)
	}
	// A load message while the pick is pending carries the intent.
	publishInflight(a, map[string]uint64{EngineURL(0): 1})
	testwait.For(t, 5*time.Second, "b sees a's load", func() bool {
		r, _ := b.View().Remote(EngineURL(0))
		return r.Inflight == 1
	})
	if p, _ := peer(); !p.Pending {
		t.Error("a's load message dropped its pending intent at b")
	}
	a.Intend(0, time.Time{})
	testwait.For(t, 5*time.Second, "b sees a's intent resolved", func() bool {
		p, ok := peer()
		return ok && !p.Pending && p.Intent.Equal(at)
	})
	if n := b.IntentsReceived(); n != 1 {
		t.Errorf("b received %d intents after the withdrawal, want still 1", n)
	}
	// An intent resolved before its own message went out still reaches b,
	// as resolved, with the pick's loads.
	// As when Intend and the pick's publication come before the sender runs.
	a.share.mu.Lock()
	next := at.Add(time.Second)
	a.share.intent, a.share.intentPending, a.share.intentDirty = next, true, true
	a.share.resolve = true
	a.share.mu.Unlock()
	publishInflight(a, map[string]uint64{EngineURL(0): 2})
	testwait.For(t, 5*time.Second, "b sees a's second intent, resolved, with its load", func() bool {
		p, ok := peer()
		r, _ := b.View().Remote(EngineURL(0))
		return ok && p.Intent.Equal(next) && !p.Pending && r.Inflight == 2
	})
}

// The peer delay estimate follows intents' ages on arrival: half the way
// up at once, a sixteenth of the way down, clamped to [0, 1 s].
func TestPeerDelayEstimate(t *testing.T) {
	s := &routerShare{}
	ms := time.Millisecond
	steps := []struct {
		age, want time.Duration
	}{
		{8 * ms, 4 * ms}, {8 * ms, 6 * ms}, {-5 * ms, 6*ms - 6*ms/16}, {time.Hour, 6*ms - 6*ms/16 + (time.Second-(6*ms-6*ms/16))/2},
	}
	for i, st := range steps {
		s.noteDelay(st.age)
		if got := time.Duration(s.delay.Load()); got != st.want {
			t.Errorf("step %d (age %v): estimate %v, want %v", i, st.age, got, st.want)
		}
	}
}
