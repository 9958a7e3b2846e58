package router

import (
	"testing"

	"github.com/rolter/rolter/strategies"
)

// fakeView answers Load and, as a mesh does, says which engines a sidecar
// reports.
type fakeView struct {
	load     map[string]uint64
	reported map[string]bool
}

func (f fakeView) Load(b string) (uint64, bool) { q, ok := f.load[b]; return q, ok }

type reportingView struct{ fakeView }

func (f reportingView) Reported(b string) bool { return f.reported[b] }

type fakeCache map[int]float64

func (f fakeCache) Occupancy(t int) (float64, bool, bool) { o, ok := f[t]; return o, ok, ok }

type fakeSources struct{ cache strategies.CacheSignal }

func (f fakeSources) Sources([]string) (strategies.Residency, strategies.CacheSignal, strategies.AdapterResidency) {
	return nil, f.cache, nil
}

// Where a sidecar reports the engine it wins over the router's own
// scrape; elsewhere the scrape answers, folded with the other routers'
// in-flight counts the mesh has for the engine.
func TestSidecarWinsOverTheRoutersOwnPolls(t *testing.T) {
	mesh := reportingView{fakeView{
		load:     map[string]uint64{"sidecar": 3, "gossip-only": 9, "gossip-low": 1},
		reported: map[string]bool{"sidecar": true},
	}}
	scraped := fakeView{load: map[string]uint64{"sidecar": 40, "gossip-only": 5, "gossip-low": 6, "scraped-only": 7}}
	v := PreferLoad(mesh, scraped)
	for _, tc := range []struct {
		base string
		want uint64
		ok   bool
	}{
		{"sidecar", 3, true},      // the sidecar's answer, not the scrape's 40
		{"gossip-only", 9, true},  // other routers' 9 in flight > the scraped 5
		{"gossip-low", 6, true},   // the scraped queue > other routers' 1
		{"scraped-only", 7, true}, // no mesh data at all
		{"nobody", 0, false},      // neutral
	} {
		if q, ok := v.Load(tc.base); q != tc.want || ok != tc.ok {
			t.Errorf("%s: %d %v, want %d %v", tc.base, q, ok, tc.want, tc.ok)
		}
	}
	// A primary that cannot say whether a sidecar reports: its answer wins
	// whenever it has one.
	plain := PreferLoad(mesh.fakeView, scraped)
	if q, _ := plain.Load("gossip-low"); q != 1 {
		t.Errorf("plain primary: %d, want its own 1", q)
	}
	if q, ok := PreferLoad(nil, scraped).Load("scraped-only"); !ok || q != 7 {
		t.Errorf("standalone (no mesh): %d %v, want the scrape's 7", q, ok)
	}

	// LMCache: the sidecar's fresh signal first, the router's poll else.
	src := PreferSources(fakeSources{fakeCache{0: 0.9}}, fakeSources{fakeCache{0: 0.1, 1: 0.2}})
	_, cache, _ := src.Sources([]string{"a", "b", "c"})
	for i, want := range []float64{0.9, 0.2} {
		if o, _, ok := cache.Occupancy(i); !ok || o != want {
			t.Errorf("target %d: %v %v, want %v", i, o, ok, want)
		}
	}
	if _, _, ok := cache.Occupancy(2); ok {
		t.Error("target with no signal anywhere is not neutral")
	}
	_, only, _ := PreferSources(fakeSources{}, fakeSources{fakeCache{0: 0.4}}).Sources([]string{"a"})
	if o, _, ok := only.Occupancy(0); !ok || o != 0.4 {
		t.Errorf("no sidecar signal: %v %v, want the poll's 0.4", o, ok)
	}
}

func TestPreferLoadDoesNotAllocate(t *testing.T) {
	v := PreferLoad(reportingView{fakeView{load: map[string]uint64{"a": 1}, reported: map[string]bool{}}},
		fakeView{load: map[string]uint64{"a": 2}})
	if n := testing.AllocsPerRun(100, func() { v.Load("a") }); n != 0 {
		t.Fatalf("Load allocates %v times", n)
	}
}

// prefillView is a mesh-like view that also reports the other routers'
// queued prefill.
type prefillView struct{ reportingView }

func (prefillView) PeerPrefill(b string) uint64 { return 700 }

// The mesh's other-router prefill sums reach the proxy through
// PreferLoad: the engine polls have none, so without the pass-through the
// real router (mesh first, polls second) would never see them.
func TestPreferLoadPassesPeerPrefill(t *testing.T) {
	mesh := prefillView{reportingView{fakeView{load: map[string]uint64{}, reported: map[string]bool{}}}}
	polls := fakeView{load: map[string]uint64{}}
	for name, v := range map[string]EngineView{"mesh first": PreferLoad(mesh, polls), "polls first": PreferLoad(polls, mesh)} {
		pv, ok := v.(PrefillView)
		if !ok || pv.PeerPrefill("a") != 700 {
			t.Errorf("%s: PeerPrefill not passed through (%v)", name, ok)
		}
	}
	if pv, ok := PreferLoad(polls, fakeView{}).(PrefillView); ok && pv.PeerPrefill("a") != 0 {
		t.Error("views without peer prefill report some")
	}
}

func (prefillView) Routers() (int, int) { return 4, 3 }

// The mesh's router count and rank reach the proxy through PreferLoad
// whichever side the mesh is on; with neither a router is alone.
func TestPreferLoadPassesMeshRank(t *testing.T) {
	mesh := prefillView{reportingView{fakeView{load: map[string]uint64{}, reported: map[string]bool{}}}}
	polls := fakeView{load: map[string]uint64{}}
	for name, v := range map[string]EngineView{"mesh first": PreferLoad(mesh, polls), "polls first": PreferLoad(polls, mesh)} {
		if mr, ok := v.(MeshRank); !ok {
			t.Errorf("%s: no MeshRank", name)
		} else if live, rank := mr.Routers(); live != 4 || rank != 3 {
			t.Errorf("%s: Routers() = %d, %d, want 4, 3", name, live, rank)
		}
	}
	if mr, ok := PreferLoad(polls, fakeView{}).(MeshRank); ok {
		if live, rank := mr.Routers(); live != 1 || rank != 0 {
			t.Errorf("views without a mesh: Routers() = %d, %d, want 1, 0", live, rank)
		}
	}
}

type statusView struct {
	fakeView
	waiting map[string]uint64
}

func (s statusView) EngineStatus(b string) (uint64, float64, bool) {
	w, ok := s.waiting[b]
	return w, 0.5, ok
}

// Admission's waiting/KV signal passes through PreferLoad from whichever
// view reports the engine.
func TestPreferLoadPassesEngineStatus(t *testing.T) {
	mesh := statusView{waiting: map[string]uint64{"a": 3}}
	polls := statusView{waiting: map[string]uint64{"b": 7}}
	v, ok := PreferLoad(mesh, polls).(StatusView)
	if !ok {
		t.Fatal("PreferLoad hides StatusView")
	}
	for base, want := range map[string]uint64{"a": 3, "b": 7} {
		if w, _, ok := v.EngineStatus(base); !ok || w != want {
			t.Errorf("%s: waiting %d %v, want %d", base, w, ok, want)
		}
	}
	if _, _, ok := v.EngineStatus("c"); ok {
		t.Error("an engine neither view reports has a status")
	}
}
