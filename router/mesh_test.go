package router

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
	"github.com/rolter/rolter/strategies"
)

type fakeEngineView map[string]uint64

func (f fakeEngineView) Load(apiBase string) (uint64, bool) {
	q, ok := f[apiBase]
	return q, ok
}

// PeerPrefill reports 1000 prompt tokens per unit of queue.
func (f fakeEngineView) PeerPrefill(apiBase string) uint64 { return 1000 * f[apiBase] }

// Routers reports a mesh of three routers, this one ranked second.
func (f fakeEngineView) Routers() (int, int) { return 3, 1 }

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
strategy = "power_of_two"
targets = [{provider = "a"}, {provider = "b"}]
[[provider_groups]]
name = "g"
slug = "g"
members = [{provider = "b"}, {provider = "a"}]
`, nil, func(o *Options) {
		o.Engine = fakeEngineView{a.URL: 7, b.URL: 2} // other routers' and the engines' queues
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
	res.pool.targets[1].stats.QueuePrefill(300) // its prompt waits for prefill
	defer res.pool.targets[1].stats.PrefillDone(300)
	at := attempt{s: h.srv, sn: sn, res: res, rc: &strategies.RouteContext{}, r: &stdFront{r: &http.Request{}}}
	at.tried, at.loads, at.queued = make([]bool, 2), make([]uint64, 2), make([]uint64, 2)
	if _, ok := at.pick(false); !ok {
		t.Fatal("no pick")
	}
	if at.loads[0] != 7 || at.loads[1] != 3 {
		t.Fatalf("loads %v, want [7 (mesh queue) 3 (mesh queue 2 + local in-flight 1)]", at.loads)
	}
	if q := at.rc.QueuedPrefill; len(q) != 2 || q[0] != 7000 || q[1] != 2300 {
		t.Fatalf("QueuedPrefill %v, want [7000 (peers) 2300 (peers 2000 + own 300)]", q)
	}
	if got := h.srv.LoadsByBase(); got[b.URL] != (BaseLoad{Inflight: 1, Prefill: 300}) || got[a.URL] != (BaseLoad{}) {
		t.Fatalf("LoadsByBase %v, want %s: {1 300} (counted once though b is in the route, the group and its pin)", got, b.URL)
	}
}

// A strategy that reads no loads (round_robin) is not given every
// target's: only the picked target's is read, folded the same way, for
// the queue depth its attempt's outcome records.
func TestLoadBlindPickReadsOnlyThePickedLoad(t *testing.T) {
	a := newEngine(t, okChat)
	b := newEngine(t, okChat)
	h := newHarnessWith(t, providers("a", a.URL, "b", b.URL)+`
[[routes]]
model = "m"
strategy = "round_robin"
targets = [{provider = "a"}, {provider = "b"}]
`, nil, func(o *Options) { o.Engine = fakeEngineView{a.URL: 7, b.URL: 2} })
	sn := h.srv.snap.Load()
	res, _ := sn.resolve("m")
	res.pool.targets[1].stats.Begin()
	defer res.pool.targets[1].stats.End(strategies.Outcome{})
	at := attempt{s: h.srv, sn: sn, res: res, rc: &strategies.RouteContext{}, r: &stdFront{r: &http.Request{}}}
	at.tried, at.loads, at.queued = make([]bool, 2), make([]uint64, 2), make([]uint64, 2)
	picked := map[int]bool{}
	for range 2 {
		clear(at.tried)
		clear(at.loads)
		idx, ok := at.pick(false)
		if !ok {
			t.Fatal("no pick")
		}
		picked[idx] = true
		want := [2]uint64{7, 3}[idx]
		if at.loads[idx] != want || at.loads[1-idx] != 0 {
			t.Fatalf("picked %d: loads %v, want %d at %d and the other unread", idx, at.loads, want, idx)
		}
		if at.rc.QueuedPrefill != nil {
			t.Fatalf("QueuedPrefill %v, want none for round_robin", at.rc.QueuedPrefill)
		}
	}
	if len(picked) != 2 {
		t.Fatalf("round_robin picked %v over two requests, want both targets", picked)
	}
}

type recordingLearner struct {
	mu       sync.Mutex
	recalls  []string // pool + " " + bases
	observed []string // pool + " " + apiBase + " " + prompt
}

func (l *recordingLearner) Recall(pool string, lb strategies.LoadBalancer, bases []string, rc *strategies.RouteContext) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lb == nil {
		panic("nil balancer")
	}
	l.recalls = append(l.recalls, pool+" "+strings.Join(bases, ","))
}

func (l *recordingLearner) Observed(pool, apiBase string, rc *strategies.RouteContext) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.observed = append(l.observed, pool+" "+apiBase+" "+rc.Prompt)
}

// TestLearnerSeesEveryRoutedRequest: the mesh learner is asked to recall
// before the pick, with the pool's target bases, and told which target
// served the prompt after it.
func TestLearnerSeesEveryRoutedRequest(t *testing.T) {
	a := newEngine(t, okChat)
	l := &recordingLearner{}
	h := newHarnessWith(t, providers("a", a.URL)+`
[[routes]]
model = "m"
strategy = "cache_aware"
targets = [{provider = "a"}]
`, nil, func(o *Options) { o.Learn = l })
	if code, _, body := h.post("/v1/completions", `{"model":"m","prompt":"hello mesh"}`); code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.recalls) != 1 || l.recalls[0] != "m "+a.URL {
		t.Fatalf("recalls %q", l.recalls)
	}
	if len(l.observed) != 1 || l.observed[0] != "m "+a.URL+" hello mesh" {
		t.Fatalf("observed %q", l.observed)
	}
}

// queueView is an EngineView whose queue the test moves between requests.
type queueView struct {
	mu sync.Mutex
	q  uint64
}

func (v *queueView) set(q uint64) { v.mu.Lock(); v.q = q; v.mu.Unlock() }

func (v *queueView) Load(string) (uint64, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.q, true
}

// predicted_latency trains on the queue depth it predicts from: the load
// the balancer saw, mesh fold included. Here the mesh reports a queue of 0
// or 20 ahead of each request (this router has none in flight) and the
// engine takes 10 ms per queued request; the model must learn that cost.
// Trained on the router's own in-flight count (always 0 here) it learned
// nothing about the queue.
func TestPredictedLatencyTrainsOnTheLoadItPredictsFrom(t *testing.T) {
	view := &queueView{}
	var h *harness
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, b map[string]any) {
		if b != nil {
			view.mu.Lock()
			q := view.q
			view.mu.Unlock()
			h.clock.Advance(time.Duration(50+10*q) * time.Millisecond)
		}
		okChat(w, r, b)
	})
	h = newHarnessWith(t, providers("a", eng.URL)+`
[[routes]]
model = "m"
strategy = "predicted_latency"
targets = [{provider = "a"}]
`, nil, func(o *Options) { o.Engine = view })
	for i := range 400 {
		view.set(uint64(20 * (i % 2)))
		if code, _, body := h.chat("m"); code != 200 {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
	}
	st := h.srv.tracker.Target("a/m")
	idle, _ := st.Predict(0, 0)
	queued, ok := st.Predict(20, 0)
	if !ok {
		t.Fatal("no prediction after 400 successes")
	}
	if d := queued - idle; d < 150 || d > 250 {
		t.Errorf("predicted cost of a 20-deep queue %.0f ms (idle %.0f, queued %.0f), want about 200", d, idle, queued)
	}
}

// holdingLearner is a recordingLearner with a pick hold (PickHold) that
// holds until released or the request's context ends.
type holdingLearner struct {
	recordingLearner
	held    chan struct{} // receives when a request is held
	release chan struct{}
}

func (l *holdingLearner) Wait(ctx context.Context) error {
	l.held <- struct{}{}
	select {
	case <-l.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A request waits on the mesh's pick hold before its first pick, goes to
// the engine once released, and never reaches it when its client leaves
// during the hold.
func TestHeldRequestLeavesWithItsClient(t *testing.T) {
	var served atomic.Int64
	a := newEngine(t, func(w http.ResponseWriter, r *http.Request, b map[string]any) {
		served.Add(1)
		okChat(w, r, b)
	})
	l := &holdingLearner{held: make(chan struct{}, 1), release: make(chan struct{})}
	h := newHarnessWith(t, providers("a", a.URL)+`
[[routes]]
model = "m"
strategy = "precise_cache_aware"
targets = [{provider = "a"}]
`, nil, func(o *Options) { o.Learn = l })
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.api.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	errc := make(chan error, 1)
	go func() {
		resp, err := h.api.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	select {
	case <-l.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the request was never held")
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the cancelled request got a response")
	}
	// The client's Do returns at once; the router sees the departure
	// when its server reads the connection's close, a moment later.
	// Released before that, the held request would go on to its pick as
	// if its client were still there: wait until it ended as a departure.
	testwait.For(t, 5*time.Second, "the held request ended with its client", func() bool {
		return requestsByCode(t, h.srv)["499"] == 1
	})
	go func() { <-l.held; close(l.release) }()
	if code, _, body := h.chat("m"); code != http.StatusOK {
		t.Fatalf("released request: %d %s", code, body)
	}
	if n := served.Load(); n != 1 {
		t.Errorf("engine served %d requests, want 1: the one whose client left during the hold must not reach it", n)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.observed) != 1 {
		t.Errorf("%d picks observed, want 1", len(l.observed))
	}
}

// A request over a pool wider than the attempt's inline buffers takes its
// per-target state from the pool's scratch: the next request there starts
// with no target tried and no load left over.
func TestWidePoolScratchStartsClean(t *testing.T) {
	var cfg strings.Builder
	cfg.WriteString("[[routes]]\nmodel = \"m\"\nstrategy = \"power_of_two\"\ntargets = [")
	var provs []string
	for i := range 20 {
		name := fmt.Sprintf("p%d", i)
		provs = append(provs, name, fmt.Sprintf("http://127.0.0.1:%d", 10+i))
		if i > 0 {
			cfg.WriteString(", ")
		}
		fmt.Fprintf(&cfg, "{provider = %q}", name)
	}
	cfg.WriteString("]\n")
	h := newHarnessWith(t, providers(provs...)+cfg.String(), nil, nil)
	sn := h.srv.snap.Load()
	res, _ := sn.resolve("m")
	for round := range 3 {
		at := attempt{s: h.srv, sn: sn, res: res, rc: &strategies.RouteContext{}, r: &stdFront{r: &http.Request{}}}
		at.sizeTargets()
		if len(at.tried) != 20 || len(at.loads) != 20 || len(at.queued) != 20 {
			t.Fatalf("round %d: sized %d/%d/%d, want 20", round, len(at.tried), len(at.loads), len(at.queued))
		}
		for i := range 20 {
			if at.tried[i] || at.loads[i] != 0 || at.queued[i] != 0 {
				t.Fatalf("round %d: target %d starts tried=%v load=%d queued=%d", round, i, at.tried[i], at.loads[i], at.queued[i])
			}
		}
		for i := range 20 {
			at.tried[i], at.loads[i], at.queued[i] = true, 9, 9
		}
		at.releaseTargets()
	}
}
