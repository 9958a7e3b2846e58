package meshstate

import (
	"context"
	"time"
)

// The order of the first picks of an instant. Routers that receive
// requests at one instant all see the same picture, and no publication
// arrives in zero time, so each one's first pick lands on the same
// emptiest engine (a router's later picks of the instant see its first
// at once). Ordering them by rank ends that: a router announces an
// intent the moment a request reaches it, and a pick waits until every
// lower-ranked router with an intent of the same instant has published
// the pick that followed it. Rank 0 never waits, waits only point to lower
// ranks (no cycle), and every wait is bounded, so a silent or dead peer
// costs at most the bound.
//
// The windows follow the delay of the other routers' messages (PeerDelay,
// PeerHop without it): an intent made at a pick's arrival reaches it one
// delay later, and a lower rank's pick one delay after that rank went.
const (
	// MaxPeerDelay caps the delay the windows stretch to, so that a
	// transport's bad estimate (clock skew between hosts) costs a pick at
	// most (R−1)·IntentWindow(MaxPeerDelay).
	MaxPeerDelay = 25 * time.Millisecond
)

// PeerDelay is an optional Transport capability, type-asserted: the
// one-way delay of the other routers' messages lately (cluster/mesh
// estimates it from its intents' ages on arrival; the simulator knows its
// own). It must not block; Arrive reads it once per request.
type PeerDelay interface {
	PeerDelay() time.Duration
}

// IntentWindow is, for other routers' messages delay late, how far apart
// an intent and an arrival may be and still be of the same instant, how
// long a pick listens for the lower-ranked routers' intents before it
// goes without them, and the wait allowed per lower rank: MaxHold with the
// delay in PeerHop's place (PublishGap of slack beyond it), at least
// MaxHold.
func IntentWindow(delay time.Duration) time.Duration {
	return max(MaxHold, min(max(delay, 0), MaxPeerDelay)+PublishGap)
}

// IntentBound is the longest the ordering delays a pick at rank: one
// IntentWindow per router ranked below it (at least one), so the last of R
// routers waits at most (R−1)·IntentWindow(delay).
func IntentBound(rank int, delay time.Duration) time.Duration {
	w := IntentWindow(delay)
	return max(w, time.Duration(rank)*w)
}

// PeerPick is what this router knows of another router's pending pick
// (Intents.PeerPicks).
type PeerPick struct {
	// Rank is the rank the router announced with its latest intent.
	Rank int
	// Intent is when its latest intent was made (its clock; zero: none).
	Intent time.Time
	// Pending is true while the router's newest message that arrived
	// still carries that intent: its pick has not been published.
	Pending bool
}

// Intents is an optional Transport capability, type-asserted, that orders
// the first picks of an instant by rank. Neither method may block; both
// run on the request path.
//
// Intend sets this router's pending intent: at non-zero announces "the
// router of rank has a pick pending since at", sent to the other routers
// at once (not after PublishGap) and carried by every publication after
// it; at zero withdraws it, and the next message (at once) says it is no
// longer pending.
//
// Resolve says the next Publish carries the pick that followed the
// pending intent: that publication says the intent is resolved, in the
// same message as the loads (a peer must not see the intent resolved
// before the loads it waited for).
//
// PeerPicks appends to buf, for every other router it has heard an intent
// from, what its newest message says (a router's messages are taken in
// the order it made them).
type Intents interface {
	Intend(rank int, at time.Time)
	Resolve()
	PeerPicks(buf []PeerPick) []PeerPick
}

// IntentsReceived is an optional capability of an Intents transport: how
// many intents of other routers it has received, for the state's metrics.
type IntentsReceived interface {
	IntentsReceived() uint64
}

// Hold reasons, the label of rolter_mesh_pick_hold_seconds.
const (
	// HoldIntent: the pick waited for a lower-ranked router's pick of the
	// same instant.
	HoldIntent = "intent"
	// HoldInstant: the pick followed this router's own pick within
	// MaxHold and waited for the other routers' picks of that instant.
	HoldInstant = "instant"
)

// Pick is one request's place in the order (Arrive), passed to Ready and
// Release. Its zero value is a pick that never waits.
type Pick struct {
	at    time.Time
	last  int64 // this router's own pick before it (unix nanos; 0: none)
	rank  int
	order bool // ordered by rank: the transport carries intents
	// window is IntentWindow for the peer delay at arrival.
	window time.Duration
	// intent is this router's pending intent p was counted under
	// (Release); zero: none.
	intent time.Time
}

// window is IntentWindow for the transport's peer delay now (PeerHop
// without one).
func (s *State) window() time.Duration {
	if pd, ok := s.tr.(PeerDelay); ok {
		return IntentWindow(pd.PeerDelay())
	}
	return IntentWindow(PeerHop)
}

// IntentsSent returns how many intents this router announced.
func (s *State) IntentsSent() uint64 { return s.intentsSent.Load() }

// At is when p's request arrived (Arrive's now).
func (p Pick) At() time.Time { return p.at }

// Arrive places a request that reached this router at now in the order
// of its instant and returns its Pick. With other routers and a
// transport that carries intents, it announces this router's intent
// unless one is pending already (the last-ranked router announces none:
// nobody waits for it). The caller then asks Ready, and calls Release
// when the request leaves before its pick. It does not allocate.
func (s *State) Arrive(now time.Time) Pick {
	live, rank := s.Routers()
	p := Pick{at: now, last: s.lastPick.Load(), rank: rank}
	if live <= 1 {
		return p
	}
	it, ok := s.tr.(Intents)
	if !ok {
		return p
	}
	p.order = true
	p.window = s.window()
	if rank >= live-1 {
		return p
	}
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if s.intentAt.IsZero() || now.Sub(s.intentAt) > p.window {
		s.intentAt, s.intentWaiters = now, 0
		it.Intend(rank, now)
		s.intentsSent.Add(1)
	}
	s.intentWaiters++
	p.intent = s.intentAt
	return p
}

// Ready is how much longer p must wait at now: 0 when it may pick.
// Otherwise the wait ends by itself after the result at the latest (its
// bound, or the end of its listening for intents); a message another
// router made may end it sooner (PeerNews), and the caller asks again
// then. An ordered pick at rank k waits, until IntentBound(k) after its
// arrival, for every lower rank r: while a router of rank r has an intent
// of its instant (within IntentWindow) still pending, and, for at most
// IntentWindow, while it has heard no intent of rank r at all (both for
// the peer delay at its arrival). A pick on a transport without intents
// that follows this router's own pick within MaxHold waits until a
// publication another router made since arrives, or MaxHold has passed.
// reason is what it waits for (HoldIntent or HoldInstant). It does not
// allocate.
func (s *State) Ready(p Pick, now time.Time) (wait time.Duration, reason string) {
	wait, reason, _ = s.ready(p, now)
	return wait, reason
}

// ready is Ready; timedOut is set when the pick may go only because its
// bound has passed, a lower-ranked router's intent still pending.
func (s *State) ready(p Pick, now time.Time) (wait time.Duration, reason string, timedOut bool) {
	if !p.order {
		if d := s.holdAfter(p.last, now); d > 0 {
			return d, HoldInstant, false
		}
		return 0, "", false
	}
	if p.rank == 0 {
		return 0, "", false
	}
	bound := p.at.Add(max(p.window, time.Duration(p.rank)*p.window))
	s.peerMu.Lock()
	defer s.peerMu.Unlock()
	s.peerBuf = s.tr.(Intents).PeerPicks(s.peerBuf[:0])
	peers := s.peerBuf
	until := time.Time{}
	listen := p.at.Add(p.window)
	for r := range p.rank {
		heard, pending := false, false
		for _, q := range peers {
			if q.Rank != r || q.Intent.IsZero() {
				continue
			}
			if d := q.Intent.Sub(p.at); d < -p.window || d > p.window {
				continue
			}
			heard = true
			pending = pending || q.Pending
		}
		switch {
		case pending:
			until = bound
		case !heard && now.Before(listen) && until.IsZero():
			until = listen
		}
	}
	if until.IsZero() {
		return 0, "", false
	}
	if !now.Before(bound) {
		return 0, "", until == bound
	}
	return until.Sub(now), HoldIntent, false
}

// Release takes p off this router's intent: a request that leaves before
// its pick, or goes on without one, calls it. When the last waiter on a
// pending intent leaves and no pick followed it, the intent is withdrawn
// (Intents.Intend with zero), so no other router waits for a pick that
// will not come. Calling it after the pick is harmless.
func (s *State) Release(p Pick) {
	if p.intent.IsZero() {
		return
	}
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if !s.intentAt.Equal(p.intent) {
		return
	}
	s.intentWaiters = max(s.intentWaiters-1, 0)
	if s.intentWaiters > 0 || s.lastPick.Load() >= s.intentAt.UnixNano() {
		return
	}
	s.intentAt = time.Time{}
	s.tr.(Intents).Intend(p.rank, time.Time{})
}

// picked is the part of Picked that concerns the order: a pick after this
// router announced an intent is published at once (Due), not after
// PublishGap, since other routers wait for it.
func (s *State) picked(now time.Time) {
	s.pubMu.Lock()
	if !s.intentAt.IsZero() && !now.Before(s.intentAt) {
		s.urgent = true
	}
	s.pubMu.Unlock()
}

// resolveLocked runs before a publication, pubMu held: when this
// router's pending intent was followed by a pick, the publication is that
// pick's, and it goes without the intent (Intents.Resolve).
func (s *State) resolveLocked() {
	s.urgent = false
	if s.intentAt.IsZero() || s.lastPick.Load() < s.intentAt.UnixNano() {
		return
	}
	s.intentAt = time.Time{}
	if it, ok := s.tr.(Intents); ok {
		it.Resolve()
	}
}

// Wait holds the caller before its first pick as Arrive and Ready say, in
// real time: it returns nil when the pick may go and ctx's error when ctx
// ends first (the client left; the request's intent is released at once).
// The router calls it once per request; the simulator calls Arrive, Ready
// and Release itself.
func (s *State) Wait(ctx context.Context) error {
	start := s.now()
	p := s.Arrive(start)
	d, reason, _ := s.ready(p, start)
	if d <= 0 {
		return nil
	}
	pn, _ := s.tr.(PeerNews)
	var news <-chan struct{}
	if pn != nil {
		news = pn.PeerNews()
	}
	// A message may have arrived between ready and PeerNews: ask again.
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.Release(p)
			return ctx.Err()
		case <-t.C:
		case <-news:
			news = pn.PeerNews()
		}
		d, _, timedOut := s.ready(p, s.now())
		if d > 0 {
			t.Reset(d)
			continue
		}
		s.observeHold(reason, start, timedOut)
		return nil
	}
}

// observeHold records a hold that began at start, for reason; bound says
// it ended on its bound with a peer's pick still pending.
func (s *State) observeHold(reason string, start time.Time, bound bool) {
	s.held.WithLabelValues(reason).Observe(s.now().Sub(start).Seconds())
	if bound {
		s.intentTimeouts.Inc()
	}
}
