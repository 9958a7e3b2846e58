package meshstate

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rolter/rolter/strategies"
)

// fakeTransport records what the state sends and answers Engine from a
// table.
type fakeTransport struct {
	mu        sync.Mutex
	shared    []Record
	published [][]EngineLoad
	changed   []time.Time
	remote    map[string]Remote
}

func (f *fakeTransport) Share(r Record) { f.shared = append(f.shared, r) }
func (f *fakeTransport) Publish(l []EngineLoad, changed time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.published = append(f.published, append([]EngineLoad(nil), l...))
	f.changed = append(f.changed, changed)
}

// sent returns what was published so far and the change times.
func (f *fakeTransport) sent() ([][]EngineLoad, []time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]EngineLoad(nil), f.published...), append([]time.Time(nil), f.changed...)
}

func (f *fakeTransport) Engine(key string) (Remote, bool) { r, ok := f.remote[key]; return r, ok }

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newState(tr *fakeTransport) (*State, *clock) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	return New(tr, c.now, Options{}), c
}

// Counts go out PublishGap after the oldest change they carry, with every
// change made in the meantime, and at least every Heartbeat unchanged; a
// change undone before it was due is not sent.
func TestTickPublishesOnChangeAndHeartbeat(t *testing.T) {
	tr := &fakeTransport{}
	s, c := newState(tr)
	one := []EngineLoad{{Engine: "e1", Inflight: 1, Prefill: 100}}
	two := []EngineLoad{{Engine: "e1", Inflight: 2, Prefill: 300}}
	three := []EngineLoad{{Engine: "e1", Inflight: 3, Prefill: 900}}
	t0 := c.t
	steps := []struct {
		after   time.Duration
		changed bool // Changed(now) before the Tick
		loads   []EngineLoad
		want    bool
		why     string
	}{
		{0, false, one, true, "the first publication"},
		{time.Millisecond, true, two, false, "changed just now: not due yet"},
		{PublishGap / 2, true, three, false, "changed again within the window"},
		{PublishGap / 2, false, two, true, "PublishGap after the oldest change, carrying the newest counts"},
		{PublishGap, false, two, false, "unchanged"},
		{time.Millisecond, true, one, false, "changed"},
		{time.Millisecond / 2, false, two, false, "undone before it was due"},
		{PublishGap, false, two, false, "nothing to send"},
		{Heartbeat, false, two, true, "unchanged, Heartbeat since the last"},
	}
	for i, st := range steps {
		c.t = c.t.Add(st.after)
		if st.changed {
			s.Changed(c.t)
		}
		if got := s.Tick(c.t, st.loads); got != st.want {
			t.Fatalf("step %d (%s): published %v, want %v", i, st.why, got, st.want)
		}
	}
	if n := len(tr.published); n != 3 || tr.published[1][0].Prefill != 300 {
		t.Fatalf("published %v", tr.published)
	}
	if first := t0.Add(time.Millisecond); !tr.changed[0].Equal(t0) || !tr.changed[1].Equal(first) || !tr.changed[2].IsZero() {
		t.Errorf("publications carry change times %v; want %v (the table was new), the oldest change (%v), none", tr.changed, t0, first)
	}
}

// The router's publish loop sends a pick to the peers PublishGap after it
// happened, not at the next heartbeat: the change signal wakes it.
func TestRunPublishesAChangeWithinPublishGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := &fakeTransport{}
		s := New(tr, time.Now, Options{})
		var mu sync.Mutex
		load := []EngineLoad{{Engine: "e1"}}
		changes := make(chan struct{}, 1)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.Run(ctx, func() []EngineLoad {
				mu.Lock()
				defer mu.Unlock()
				return append([]EngineLoad(nil), load...)
			}, changes)
		}()
		// The first heartbeat publishes the idle table.
		time.Sleep(Heartbeat)
		synctest.Wait()
		pubs, _ := tr.sent()
		before := len(pubs)
		mu.Lock()
		load[0].Inflight, load[0].Prefill = 1, 4000 // a pick
		mu.Unlock()
		picked := time.Now()
		changes <- struct{}{}
		time.Sleep(PublishGap - time.Microsecond)
		synctest.Wait()
		if pubs, _ := tr.sent(); len(pubs) != before {
			t.Fatalf("published before PublishGap had passed")
		}
		time.Sleep(time.Microsecond)
		synctest.Wait()
		pubs, changed := tr.sent()
		if len(pubs) != before+1 || pubs[before][0].Prefill != 4000 {
			t.Fatalf("PublishGap after the pick: %d publications, want %d with the pick", len(pubs), before+1)
		}
		if !changed[before].Equal(picked) {
			t.Errorf("publication says its change was made at %v, want %v", changed[before], picked)
		}
		cancel()
		<-done
	})
}

// newsTransport is a fakeTransport with peer news and a router count.
type newsTransport struct {
	fakeTransport
	live int
	mu   sync.Mutex
	pub  time.Time
	news chan struct{}
}

func (n *newsTransport) Routers() (int, int) { return n.live, 0 }
func (n *newsTransport) PeerPublished() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.pub
}
func (n *newsTransport) PeerNews() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.news
}

// arrive is another router's publication made at made arriving now.
func (n *newsTransport) arrive(made time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pub = made
	close(n.news)
	n.news = make(chan struct{})
}

// A pick that follows this router's own pick within MaxHold waits for the
// other routers' picks of the same instant: until a publication of
// another router made since arrives, or MaxHold has passed, or the client
// leaves. A router alone, or one that has not picked lately, never waits.
func TestHoldWaitsForPeersPicksOfTheSameInstant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		wait := func(s *State, ctx context.Context) (time.Duration, error) {
			start := time.Now()
			err := s.Wait(ctx)
			return time.Since(start), err
		}
		alone := New(&newsTransport{live: 1, news: make(chan struct{})}, time.Now, Options{})
		alone.Picked(time.Now())
		if d, _ := wait(alone, t.Context()); d != 0 {
			t.Errorf("a router alone waited %v", d)
		}

		tr := &newsTransport{live: 3, news: make(chan struct{})}
		s := New(tr, time.Now, Options{})
		if d, _ := wait(s, t.Context()); d != 0 {
			t.Errorf("waited %v before any pick", d)
		}
		s.Picked(time.Now())
		if d, err := wait(s, t.Context()); d != MaxHold || err != nil {
			t.Errorf("right after a pick, no peer news: waited %v (%v), want MaxHold %v", d, err, MaxHold)
		}
		time.Sleep(MaxHold)
		if d, _ := wait(s, t.Context()); d != 0 {
			t.Errorf("MaxHold after the last pick: waited %v, want 0", d)
		}

		// Released when a peer's publication made after the pick arrives.
		s.Picked(time.Now())
		picked := time.Now()
		go func() {
			time.Sleep(time.Millisecond)
			tr.arrive(picked.Add(-time.Millisecond)) // made before the pick: no news
			time.Sleep(time.Millisecond / 2)
			tr.arrive(picked.Add(time.Millisecond / 2)) // made after it
		}()
		if d, err := wait(s, t.Context()); d != 3*time.Millisecond/2 || err != nil {
			t.Errorf("peer news 1.5 ms after the pick: waited %v (%v), want 1.5ms", d, err)
		}
		if d, _ := wait(s, t.Context()); d != 0 {
			t.Errorf("with the peers' news already in: waited %v", d)
		}

		// Released when the client leaves.
		s.Picked(time.Now())
		ctx, cancel := context.WithCancel(t.Context())
		go func() { time.Sleep(time.Millisecond / 4); cancel() }()
		if d, err := wait(s, ctx); d != time.Millisecond/4 || err == nil {
			t.Errorf("client gone after 0.25 ms: waited %v, err %v; want 0.25ms and ctx's error", d, err)
		}
	})
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
	c.t = c.t.Add(Heartbeat / 2)
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

// The other routers' admission waiters for a pool are, per band, the
// largest count over the pool's engines (every router publishes a pool's
// waiters on each of its engines); engines with no peer counts add
// nothing, and a change in a router's waiters alone is published.
func TestPoolWaiting(t *testing.T) {
	tr := &fakeTransport{remote: map[string]Remote{
		"e1": {PeersOK: true, Waiting: [3]uint64{4, 1, 0}},
		"e2": {PeersOK: true, Waiting: [3]uint64{2, 1, 3}},
		"e3": {Waiting: [3]uint64{9, 9, 9}}, // no peer counts: stale
	}}
	s, c := newState(tr)
	if got := s.PoolWaiting([]string{"e1", "e2", "e3", "unknown"}); got != [3]uint64{4, 1, 3} {
		t.Fatalf("PoolWaiting %v, want [4 1 3]", got)
	}
	if got := s.PoolWaiting(nil); got != [3]uint64{} {
		t.Fatalf("no engines: %v", got)
	}
	s.Tick(c.t, []EngineLoad{{Engine: "e1", Inflight: 1}})
	c.t = c.t.Add(PublishGap)
	waiters := []EngineLoad{{Engine: "e1", Inflight: 1, Waiting: [3]uint64{0, 0, 2}}}
	s.Tick(c.t, waiters) // the change is seen here, due PublishGap later
	c.t = c.t.Add(PublishGap)
	if !s.Tick(c.t, waiters) {
		t.Fatal("a change in waiters alone was not published")
	}
}
