package meshstate

import (
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/strategies"
)

// fakeTransport records what the state sends and answers Engine from a
// table.
type fakeTransport struct {
	shared    []Record
	published [][]EngineLoad
	remote    map[string]Remote
}

func (f *fakeTransport) Share(r Record) { f.shared = append(f.shared, r) }
func (f *fakeTransport) Publish(l []EngineLoad) {
	f.published = append(f.published, append([]EngineLoad(nil), l...))
}
func (f *fakeTransport) Engine(key string) (Remote, bool) { r, ok := f.remote[key]; return r, ok }

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newState(tr *fakeTransport) (*State, *clock) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	return New(tr, c.now, Options{}), c
}

// Counts go out when they change, no sooner than PublishGap after the
// last publication, and at least every Heartbeat unchanged.
func TestTickPublishesOnChangeAndHeartbeat(t *testing.T) {
	tr := &fakeTransport{}
	s, c := newState(tr)
	one := []EngineLoad{{Engine: "e1", Inflight: 1, Prefill: 100}}
	two := []EngineLoad{{Engine: "e1", Inflight: 2, Prefill: 300}}
	steps := []struct {
		after time.Duration
		loads []EngineLoad
		want  bool
		why   string
	}{
		{0, one, true, "first publication"},
		{10 * time.Millisecond, two, false, "changed, but within PublishGap of the last"},
		{PublishGap, two, true, "changed, PublishGap later"},
		{PublishGap, two, false, "unchanged"},
		{Heartbeat, two, true, "unchanged, Heartbeat since the last"},
		{PublishGap, one, true, "changed again"},
	}
	for i, st := range steps {
		c.t = c.t.Add(st.after)
		if got := s.Tick(c.t, st.loads); got != st.want {
			t.Fatalf("step %d (%s): published %v, want %v", i, st.why, got, st.want)
		}
	}
	if n := len(tr.published); n != 4 || tr.published[1][0].Prefill != 300 {
		t.Fatalf("published %v", tr.published)
	}
}

// The load fold: the engine's queue and the routers' in-flight are two
// estimates of the same requests; the larger wins, less this router's own
// in-flight as it last published it.
func TestLoadFold(t *testing.T) {
	tr := &fakeTransport{remote: map[string]Remote{
		"deep":  {Queue: 20, QueueOK: true, Inflight: 6, PeersOK: true},
		"peers": {Queue: 3, QueueOK: true, Inflight: 12, Prefill: 9000, PeersOK: true},
		"cold":  {},
	}}
	s, c := newState(tr)
	s.Tick(c.t, []EngineLoad{{Engine: "deep", Inflight: 5}, {Engine: "peers", Inflight: 5}})
	tests := []struct {
		key     string
		want    uint64
		ok      bool
		prefill uint64
	}{
		{"deep", 15, true, 0},     // queue 20 − own 5 beats peers' 6
		{"peers", 12, true, 9000}, // peers' 12 beat queue 3 − own 5
		{"cold", 0, false, 0},     // nothing known
		{"unknown", 0, false, 0},  // not in the view
	}
	for _, tc := range tests {
		q, ok := s.Load(tc.key)
		if q != tc.want || ok != tc.ok {
			t.Errorf("Load(%s) = %d, %v; want %d, %v", tc.key, q, ok, tc.want, tc.ok)
		}
		if p := s.PeerPrefill(tc.key); p != tc.prefill {
			t.Errorf("PeerPrefill(%s) = %d, want %d", tc.key, p, tc.prefill)
		}
	}
}

// recorder is a balancer with both mesh hooks.
type recorder struct {
	prefixAt []int
	pins     map[string]int
}

func (*recorder) Name() string                                        { return "recorder" }
func (*recorder) Pick(*strategies.RouteContext, []uint64) (int, bool) { return 0, true }
func (*recorder) PickEligible(*strategies.RouteContext, []uint64, strategies.Eligible) (int, bool) {
	return 0, true
}
func (*recorder) Observe(int, *strategies.RouteContext)            {}
func (r *recorder) ObservePrefixRemote(target int, _ string)       { r.prefixAt = append(r.prefixAt, target) }
func (r *recorder) PinSession(key string, target int, _ time.Time) { r.pins[key] = target }

// A shared record is sent once per (key, target), filed on the other
// side, imported once into a balancer of the same pool, and ignored once
// Learned has passed.
func TestLearnedRecordsShareFileImportExpire(t *testing.T) {
	out := &fakeTransport{}
	a, _ := newState(out)
	rc := &strategies.RouteContext{Prompt: strings.Repeat("system prompt ", 20) + "question", SessionKey: "s1"}
	a.Observed("chat", "e2", rc)
	n := len(out.shared)
	a.Observed("chat", "e2", rc)
	if n == 0 || len(out.shared) != n {
		t.Fatalf("shared %d records, then %d more for the same pick; want some, then none", n, len(out.shared)-n)
	}
	b, c := newState(&fakeTransport{})
	for _, r := range out.shared {
		b.File(r)
	}
	rec := &recorder{pins: map[string]int{}}
	targets := []string{"e1", "e2"}
	b.Recall("chat", rec, targets, rc)
	if len(rec.prefixAt) == 0 || rec.prefixAt[0] != 1 || rec.pins["s1"] != 1 {
		t.Fatalf("imported prefixes at %v, pins %v; want target 1 (e2)", rec.prefixAt, rec.pins)
	}
	again := &recorder{pins: map[string]int{}}
	b.Recall("chat", again, targets, rc)
	if len(again.prefixAt) != 0 || len(again.pins) != 0 {
		t.Fatalf("records imported twice: %v %v", again.prefixAt, again.pins)
	}
	for _, r := range out.shared {
		b.File(r)
	}
	c.t = c.t.Add(Learned + time.Second)
	late := &recorder{pins: map[string]int{}}
	b.Recall("chat", late, targets, rc)
	if len(late.prefixAt) != 0 || len(late.pins) != 0 {
		t.Fatalf("expired records imported: %v %v", late.prefixAt, late.pins)
	}
}

// rankedTransport is a fakeTransport with a router inventory.
type rankedTransport struct {
	fakeTransport
	live, rank int
	reads      int
}

func (r *rankedTransport) Routers() (int, int) { r.reads++; return r.live, r.rank }

// The router count and rank strategies see come from the transport's
// inventory: read when the state is built, then again from Tick once a
// Heartbeat has passed (a router joining changes every router's rank);
// without an inventory a router is alone.
func TestRoutersFollowTheInventory(t *testing.T) {
	if live, rank := New(&fakeTransport{}, time.Now, Options{}).Routers(); live != 1 || rank != 0 {
		t.Errorf("no inventory: Routers() = %d, %d, want 1, 0", live, rank)
	}
	tr := &rankedTransport{live: 3, rank: 2}
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := New(tr, c.now, Options{})
	if live, rank := s.Routers(); live != 3 || rank != 2 {
		t.Fatalf("built with 3 routers, rank 2: Routers() = %d, %d", live, rank)
	}
	tr.live, tr.rank = 4, 1 // a router joined ahead of this one
	c.t = c.t.Add(PublishGap)
	s.Tick(c.t, nil)
	if live, _ := s.Routers(); live != 3 {
		t.Errorf("inventory reread before a Heartbeat passed: live %d", live)
	}
	c.t = c.t.Add(Heartbeat)
	s.Tick(c.t, nil)
	if live, rank := s.Routers(); live != 4 || rank != 1 {
		t.Errorf("after a Heartbeat: Routers() = %d, %d, want 4, 1", live, rank)
	}
	tr.live, tr.rank = 0, 5 // nonsense from a transport is clamped
	c.t = c.t.Add(Heartbeat)
	s.Tick(c.t, nil)
	if live, rank := s.Routers(); live != 1 || rank != 0 {
		t.Errorf("inventory (0, 5): Routers() = %d, %d, want 1, 0", live, rank)
	}
}
