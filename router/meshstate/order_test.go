package meshstate

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// metrics gathers s's metrics by name.
func metrics(t *testing.T, s *State) map[string][]*dto.Metric {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]*dto.Metric{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf.GetMetric()
	}
	return out
}

// timeouts is s's rolter_mesh_intent_timeouts_total.
func timeouts(t *testing.T, s *State) float64 {
	t.Helper()
	return metrics(t, s)["rolter_mesh_intent_timeouts_total"][0].GetCounter().GetValue()
}

// orderTransport is a transport that carries intents: it records this
// router's intents (and where they fell among its publications) and
// answers PeerPicks from a table the test changes, closing PeerNews at
// each change as a message's arrival does.
type orderTransport struct {
	fakeTransport
	live, rank int

	omu     sync.Mutex
	peers   []PeerPick
	news    chan struct{}
	intends []string // "intent" / "withdraw" / "resolve" / "publish", in call order
}

func newOrderTransport(live, rank int) *orderTransport {
	return &orderTransport{live: live, rank: rank, news: make(chan struct{})}
}

func (o *orderTransport) Routers() (int, int) { return o.live, o.rank }

func (o *orderTransport) Publish(l []EngineLoad, changed time.Time) {
	o.fakeTransport.Publish(l, changed)
	o.omu.Lock()
	o.intends = append(o.intends, "publish")
	o.omu.Unlock()
}

func (o *orderTransport) Intend(rank int, at time.Time) {
	o.omu.Lock()
	defer o.omu.Unlock()
	if at.IsZero() {
		o.intends = append(o.intends, "withdraw")
		return
	}
	o.intends = append(o.intends, "intent")
}

func (o *orderTransport) Resolve() {
	o.omu.Lock()
	defer o.omu.Unlock()
	o.intends = append(o.intends, "resolve")
}

func (o *orderTransport) PeerPicks(buf []PeerPick) []PeerPick {
	o.omu.Lock()
	defer o.omu.Unlock()
	return append(buf, o.peers...)
}

func (o *orderTransport) PeerPublished() time.Time { return time.Time{} }

func (o *orderTransport) PeerNews() <-chan struct{} {
	o.omu.Lock()
	defer o.omu.Unlock()
	return o.news
}

// hear is a message of another router arriving: its state is now p.
func (o *orderTransport) hear(p PeerPick) {
	o.omu.Lock()
	defer o.omu.Unlock()
	for i := range o.peers {
		if o.peers[i].Rank == p.Rank {
			o.peers[i] = p
			p.Rank = -1
		}
	}
	if p.Rank >= 0 {
		o.peers = append(o.peers, p)
	}
	close(o.news)
	o.news = make(chan struct{})
}

func (o *orderTransport) calls() string {
	o.omu.Lock()
	defer o.omu.Unlock()
	return strings.Join(o.intends, ",")
}

// timedWait is s.Wait(ctx) and how long it took.
func timedWait(s *State, ctx context.Context) (time.Duration, error) {
	start := time.Now()
	err := s.Wait(ctx)
	return time.Since(start), err
}

// Rank 0 never waits, even with another router's intent pending, and
// announces its own intent for the routers ranked after it.
func TestRankZeroNeverWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newOrderTransport(3, 0)
		tr.hear(PeerPick{Rank: 1, Intent: time.Now(), Pending: true})
		s := New(tr, time.Now, Options{})
		if d, err := timedWait(s, t.Context()); d != 0 || err != nil {
			t.Errorf("rank 0 waited %v (%v)", d, err)
		}
		if got := tr.calls(); got != "intent" {
			t.Errorf("rank 0's calls: %q, want one intent", got)
		}
	})
}

// A pick at rank k waits for a lower-ranked router's pending intent of the
// same instant until that router's pick arrives, then goes at once; a
// higher-ranked router's intent and an intent of another instant are no
// reason to wait. The last-ranked router announces no intent.
func TestRankWaitsForALowerRanksPickOfTheSameInstant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newOrderTransport(3, 2)
		s := New(tr, time.Now, Options{})
		now := time.Now()
		tr.hear(PeerPick{Rank: 0, Intent: now.Add(-time.Second), Pending: true}) // another instant
		tr.hear(PeerPick{Rank: 1, Intent: now, Pending: true})
		go func() {
			time.Sleep(time.Millisecond)
			tr.hear(PeerPick{Rank: 0, Intent: now, Pending: true}) // rank 0's intent of this instant
			time.Sleep(time.Millisecond)
			tr.hear(PeerPick{Rank: 1, Intent: now}) // rank 1 picked; rank 0 still pending
			time.Sleep(time.Millisecond / 2)
			tr.hear(PeerPick{Rank: 0, Intent: now}) // rank 0 picked
		}()
		if d, err := timedWait(s, t.Context()); d != 5*time.Millisecond/2 || err != nil {
			t.Errorf("waited %v (%v), want 2.5ms: until both lower ranks' picks arrived", d, err)
		}
		if got := tr.calls(); got != "" {
			t.Errorf("the last rank announced %q, want nothing", got)
		}

		// Rank 1 does not wait for rank 2's intent.
		mid := newOrderTransport(3, 1)
		ms := New(mid, time.Now, Options{})
		mid.hear(PeerPick{Rank: 0, Intent: time.Now()})
		mid.hear(PeerPick{Rank: 2, Intent: time.Now(), Pending: true})
		if d, _ := timedWait(ms, t.Context()); d != 0 {
			t.Errorf("rank 1 waited %v for rank 2", d)
		}
	})
}

// A pick hears nothing of a lower rank: it listens IntentWindow for an
// intent of its instant, then goes. A lower rank whose intent stays
// pending (a silent or dead router) holds it at most IntentBound, counted
// as a timeout.
func TestTheBoundEndsAWaitOnASilentPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newOrderTransport(4, 1)
		s := New(tr, time.Now, Options{})
		if d, _ := timedWait(s, t.Context()); d != IntentWindow(PeerHop) {
			t.Errorf("nothing heard: waited %v, want IntentWindow %v", d, IntentWindow(PeerHop))
		}
		if n := timeouts(t, s); n != 0 {
			t.Errorf("listening counted %v timeouts", n)
		}

		tr = newOrderTransport(4, 3)
		s = New(tr, time.Now, Options{})
		now := time.Now()
		tr.hear(PeerPick{Rank: 0, Intent: now})
		tr.hear(PeerPick{Rank: 1, Intent: now, Pending: true}) // never picks
		tr.hear(PeerPick{Rank: 2, Intent: now})
		if d, err := timedWait(s, t.Context()); d != IntentBound(3, PeerHop) || err != nil {
			t.Errorf("a silent rank 1: waited %v (%v), want IntentBound(3) %v", d, err, IntentBound(3, PeerHop))
		}
		if IntentBound(3, PeerHop) != 3*MaxHold {
			t.Errorf("IntentBound(3) = %v, want 3 × MaxHold", IntentBound(3, PeerHop))
		}
		if n := timeouts(t, s); n != 1 {
			t.Errorf("timeouts %v, want 1", n)
		}
	})
}

// A client that leaves ends its wait at once, and its router withdraws
// the intent nobody will pick after, so no other router waits for it.
func TestAClientLeavingEndsTheWaitAndWithdrawsTheIntent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newOrderTransport(3, 1)
		s := New(tr, time.Now, Options{})
		tr.hear(PeerPick{Rank: 0, Intent: time.Now(), Pending: true})
		ctx, cancel := context.WithCancel(t.Context())
		go func() { time.Sleep(time.Millisecond / 4); cancel() }()
		if d, err := timedWait(s, ctx); d != time.Millisecond/4 || err == nil {
			t.Errorf("client gone after 0.25 ms: waited %v, err %v; want 0.25ms and ctx's error", d, err)
		}
		if got := tr.calls(); got != "intent,withdraw" {
			t.Errorf("calls %q, want the intent withdrawn", got)
		}
	})
}

// A pick after this router's intent is published at once, not PublishGap
// later, and that publication resolves the intent (in one message, so no
// peer lets a pick go before the loads it waited for have arrived).
func TestAPickAfterAnIntentIsPublishedAtOnce(t *testing.T) {
	tr := newOrderTransport(2, 0)
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := New(tr, c.now, Options{})
	s.Tick(c.t, nil) // the first heartbeat
	c.t = c.t.Add(time.Second)
	p := s.Arrive(c.t)
	if d, _ := s.Ready(p, c.t); d != 0 {
		t.Fatalf("rank 0 must wait %v", d)
	}
	s.Picked(c.t)
	s.Changed(c.t)
	if at, ok := s.Due(); !ok || !at.Equal(c.t) {
		t.Errorf("a pick after an intent is due at %v (%v), want at once (%v)", at, ok, c.t)
	}
	if !s.Tick(c.t, []EngineLoad{{Engine: "a", Inflight: 1}}) {
		t.Fatal("the pick was not published at once")
	}
	if got := tr.calls(); got != "publish,intent,resolve,publish" {
		t.Errorf("calls %q, want the intent, then the pick's publication resolving it", got)
	}
	// The next change, with no intent pending, waits PublishGap again.
	c.t = c.t.Add(time.Second)
	s.Changed(c.t)
	if at, _ := s.Due(); !at.Equal(c.t.Add(PublishGap)) {
		t.Errorf("a change without an intent is due at %v, want PublishGap later", at)
	}
}

// The hold histogram says why a pick waited.
func TestHoldReasonsAreLabelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newOrderTransport(3, 1)
		s := New(tr, time.Now, Options{})
		go func() {
			time.Sleep(time.Millisecond)
			tr.hear(PeerPick{Rank: 0, Intent: time.Now().Add(-time.Millisecond)})
		}()
		if d, _ := timedWait(s, t.Context()); d != time.Millisecond {
			t.Errorf("waited %v, want 1ms", d)
		}
		m := metrics(t, s)
		holds := m["rolter_mesh_pick_hold_seconds"]
		if len(holds) != 1 {
			t.Fatalf("%d hold series, want 1", len(holds))
		}
		if got := holds[0].GetLabel()[0].GetValue(); got != HoldIntent {
			t.Errorf("reason %q, want %q", got, HoldIntent)
		}
		if h := holds[0].GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 0.001 {
			t.Errorf("hold histogram %d samples, sum %v; want 1 of 1ms", h.GetSampleCount(), h.GetSampleSum())
		}
		if w := m["rolter_mesh_intent_window_seconds"][0].GetGauge().GetValue(); w != MaxHold.Seconds() {
			t.Errorf("window gauge %v, want MaxHold", w)
		}
		for _, c := range m["rolter_mesh_intents_total"] {
			if c.GetLabel()[0].GetValue() == "sent" && c.GetCounter().GetValue() != 1 {
				t.Errorf("intents sent %v, want 1", c.GetCounter().GetValue())
			}
		}
	})
}

// delayTransport is an orderTransport that reports a peer delay.
type delayTransport struct {
	*orderTransport
	delay time.Duration
}

func (d delayTransport) PeerDelay() time.Duration { return d.delay }

// The windows follow the peers' delay: a pick listens for an intent as
// long as one takes to arrive, and waits per lower rank as long, never
// less than MaxHold and never more than MaxPeerDelay allows.
func TestTheWindowsFollowThePeerDelay(t *testing.T) {
	if w := IntentWindow(time.Millisecond); w != MaxHold {
		t.Errorf("IntentWindow(1ms) = %v, want MaxHold", w)
	}
	if w := IntentWindow(10 * time.Millisecond); w != 10*time.Millisecond+PublishGap {
		t.Errorf("IntentWindow(10ms) = %v, want 10ms + PublishGap", w)
	}
	if w := IntentWindow(time.Hour); w != MaxPeerDelay+PublishGap {
		t.Errorf("IntentWindow(1h) = %v, want capped at MaxPeerDelay + PublishGap", w)
	}
	synctest.Test(t, func(t *testing.T) {
		tr := delayTransport{newOrderTransport(3, 1), 10 * time.Millisecond}
		s := New(tr, time.Now, Options{})
		now := time.Now()
		go func() {
			time.Sleep(10 * time.Millisecond) // rank 0's intent, 10 ms on the way
			tr.hear(PeerPick{Rank: 0, Intent: now, Pending: true})
			time.Sleep(time.Millisecond) // and its pick, 1 ms after it
			tr.hear(PeerPick{Rank: 0, Intent: now})
		}()
		if d, err := timedWait(s, t.Context()); d != 11*time.Millisecond || err != nil {
			t.Errorf("waited %v (%v), want 11ms: until rank 0's pick, 10 ms late", d, err)
		}
		if n := timeouts(t, s); n != 0 {
			t.Errorf("%v timeouts, want none: the window covered the delay", n)
		}
	})
}
