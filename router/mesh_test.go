package router

import (
	"net/http"
	"sync"
	"testing"

	"github.com/rolter/rolter/strategies"
)

type fakeEngineView map[string]uint64

func (f fakeEngineView) Load(apiBase string) (uint64, bool) {
	q, ok := f[apiBase]
	return q, ok
}

type recordingSources struct {
	mu    sync.Mutex
	calls [][]string
}

func (r *recordingSources) Sources(bases []string) (strategies.Residency, strategies.CacheSignal, strategies.AdapterResidency) {
	r.mu.Lock()
	r.calls = append(r.calls, append([]string(nil), bases...))
	r.mu.Unlock()
	return nil, nil, nil
}

func TestLoadsFoldEngineQueueWithLocalInFlight(t *testing.T) {
	a := newEngine(t, okChat)
	b := newEngine(t, okChat)
	src := &recordingSources{}
	h := newHarnessWith(t, providers("a", a.URL, "b", b.URL)+`
[[routes]]
model = "m"
targets = [{provider = "a"}, {provider = "b"}]
[[provider_groups]]
name = "g"
slug = "g"
members = [{provider = "b"}, {provider = "a"}]
`, nil, func(o *Options) {
		o.Engine = fakeEngineView{a.URL: 7} // b: no fresh summary
		o.Sources = src
	})
	// Once per pool while building: the route, the group, two pins.
	if len(src.calls) != 4 || src.calls[0][0] != a.URL || src.calls[0][1] != b.URL || src.calls[1][0] != b.URL {
		t.Fatalf("Sources calls %v", src.calls)
	}
	sn := h.srv.snap.Load()
	res, _ := sn.resolve("m")
	res.pool.targets[1].stats.Begin() // one local request in flight on b
	defer res.pool.targets[1].stats.End(strategies.Outcome{})
	at := attempt{s: h.srv, sn: sn, res: res, rc: &strategies.RouteContext{}, r: &http.Request{}}
	at.tried, at.loads = make([]bool, 2), make([]uint64, 2)
	if _, ok := at.pick(); !ok {
		t.Fatal("no pick")
	}
	if at.loads[0] != 7 || at.loads[1] != 1 {
		t.Fatalf("loads %v, want [7 (engine queue) 1 (local in-flight)]", at.loads)
	}
}
