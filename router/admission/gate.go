package admission

import (
	"context"
	"sync"
	"time"
)

// Outcome is how a request left admission.
type Outcome uint8

// Outcomes, as rolter_admission_total's outcome label spells them.
const (
	Admitted Outcome = iota
	RejectedFull
	Expired
	Cancelled
)

var outcomeNames = [...]string{"admitted", "rejected_full", "expired", "cancelled"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Probe is a pool's state as one router sees it at a release decision.
type Probe struct {
	// Headroom[b] is how many requests of band b the pool's eligible
	// targets take now before every one is saturated for the band (Σ
	// Config.For(b).Headroom). 0: saturated for b, or no live target.
	Headroom [NumBands]int
	// Peers[b] is the band-b waiters the other routers last reported for
	// this pool (0: none or unknown); see Queue.Release.
	Peers [NumBands]int
}

// Observer hears what a Gate does, for metrics. It is called with the
// gate's lock held: it must be quick and must not call the gate.
type Observer interface {
	// Left is called once per request that asked: admitted (waited 0 when
	// it did not queue), rejected_full, expired or cancelled.
	Left(b Band, o Outcome, waited time.Duration)
	// Depth is called when band b's queue length changed to n.
	Depth(b Band, n int)
}

// DefaultTick is the longest a Gate's pump waits between two looks at the
// pool while requests queue (TTLs are checked at each look), and how long
// a release stays counted against the headroom (the released request's
// load reaches the router's counts within it).
const DefaultTick = 20 * time.Millisecond

// GateOptions tune a Gate. The zero value is usable.
type GateOptions struct {
	Now      func() time.Time // default time.Now
	Tick     time.Duration    // default DefaultTick
	Observer Observer
}

// Gate is one pool's admission on one router, safe for concurrent use. A
// request calls Admit before its first pick; a request that ends calls
// Kick (capacity may have freed). While requests queue, a pump goroutine
// looks at the pool every Tick and at every Kick, expires waiters past
// their TTL and releases what Queue.Release allows under the probe and
// the admissions of the last Tick; it exits when the queue is empty.
type Gate struct {
	probe func() Probe
	now   func() time.Time
	tick  time.Duration
	obs   Observer
	kick  chan struct{}

	mu       sync.Mutex
	q        *Queue
	recent   int       // admitted within the tick that began at recentAt
	recentAt time.Time // monotonic
	pumping  bool
}

type ticket struct {
	done    chan struct{}
	outcome Outcome
	as      Band
}

// NewGate returns a gate over cfg that reads the pool through probe.
// probe is called with the gate's lock held, on request goroutines and
// the pump: it must read in-process state only and not block.
func NewGate(cfg Config, probe func() Probe, o GateOptions) *Gate {
	g := &Gate{probe: probe, now: o.Now, tick: o.Tick, obs: o.Observer, kick: make(chan struct{}, 1), q: NewQueue(cfg)}
	if g.now == nil {
		g.now = time.Now
	}
	if g.tick <= 0 {
		g.tick = DefaultTick
	}
	return g
}

// SetConfig changes the gate's configuration (see Queue.SetConfig).
func (g *Gate) SetConfig(cfg Config) {
	g.mu.Lock()
	g.q.SetConfig(cfg)
	g.mu.Unlock()
	g.Kick()
}

// Depth returns the number of requests waiting in band b.
func (g *Gate) Depth(b Band) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.q.Len(b)
}

// Kick tells the gate that capacity may have freed (a request ended, the
// mesh reported). It never blocks.
func (g *Gate) Kick() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// Admit returns when the request may go to the pool's strategy: at once
// when Queue.AdmitsNow says so, otherwise when the pump releases it. It
// also returns when its band is full (RejectedFull), its band's TTL passed
// (Expired) or ctx ended (Cancelled: the request left the queue at once).
// waited is the time spent queued; as is the band the request was
// admitted under (its own, or the band it was promoted to), whose
// thresholds its pick should keep to (Config.Room).
func (g *Gate) Admit(ctx context.Context, b Band, flow string, cost int) (o Outcome, waited time.Duration, as Band) {
	if b >= NumBands {
		b = Standard
	}
	g.mu.Lock()
	now := g.now()
	p := g.probe()
	// Requests admitted within the last tick count against the headroom:
	// a burst arriving together must not all pass before any of them
	// reached an engine and the router's counts.
	if g.q.AdmitsNow(b, p, g.recentCount()) {
		g.recent++
		g.left(b, Admitted, 0)
		g.mu.Unlock()
		return Admitted, 0, b
	}
	t := &ticket{done: make(chan struct{})}
	w := &Waiter{Band: b, Flow: flow, Cost: cost, Value: t}
	if err := g.q.PushAmong(w, now, p); err != nil {
		g.left(b, RejectedFull, 0)
		g.mu.Unlock()
		return RejectedFull, 0, b
	}
	g.depth(b)
	if !g.pumping {
		g.pumping = true
		go g.pump()
	}
	g.mu.Unlock()
	g.Kick()

	select {
	case <-t.done:
		return t.outcome, g.now().Sub(w.Arrived), t.as
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.q.Remove(w) {
		waited = g.now().Sub(w.Arrived)
		g.left(b, Cancelled, waited)
		g.depth(b)
		g.Kick() // the pump exits at once when this was the last waiter
		return Cancelled, waited, b
	}
	// Released (or expired) while the context ended: the decision stands.
	<-t.done
	return t.outcome, g.now().Sub(w.Arrived), t.as
}

// recentCount is how many requests this gate admitted within the last
// tick (their load may not have reached the counts the probe reads yet).
// The window runs on the monotonic clock. Called with g.mu held.
func (g *Gate) recentCount() int {
	if time.Since(g.recentAt) >= g.tick {
		g.recent, g.recentAt = 0, time.Now()
	}
	return g.recent
}

// release hands out the waiters this router may send now (Queue.Release).
// Called with g.mu held.
func (g *Gate) release(now time.Time) {
	recent := g.recentCount()
	n := g.q.Release(now, g.probe(), recent, func(w *Waiter, as Band) {
		w.Value.(*ticket).as = as
		g.finish(w, Admitted, now)
	})
	g.recent = recent + n
}

func (g *Gate) left(b Band, o Outcome, waited time.Duration) {
	if g.obs != nil {
		g.obs.Left(b, o, waited)
	}
}

func (g *Gate) depth(b Band) {
	if g.obs != nil {
		g.obs.Depth(b, g.q.Len(b))
	}
}

// finish ends w's wait with o. Called with g.mu held, w already removed.
func (g *Gate) finish(w *Waiter, o Outcome, now time.Time) {
	t := w.Value.(*ticket)
	t.outcome = o
	g.left(w.Band, o, now.Sub(w.Arrived))
	g.depth(w.Band)
	close(t.done)
}

// pump releases and expires waiters until the queue is empty.
func (g *Gate) pump() {
	ticker := time.NewTicker(g.tick)
	defer ticker.Stop()
	for {
		g.mu.Lock()
		now := g.now()
		g.q.Expire(now, func(w *Waiter) { g.finish(w, Expired, now) })
		if g.q.Total() > 0 {
			g.release(now)
		}
		if g.q.Total() == 0 {
			g.pumping = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		select {
		case <-ticker.C:
		case <-g.kick:
		}
	}
}
