package router

import (
	"sync"
	"sync/atomic"
	"time"
)

// parking is the 429 parking of one target: the provider/model pair an
// attempt used (the target's label, "provider/*" for a passthrough
// member). An upstream that answers 429 with Retry-After for one model
// says nothing about the provider's other models, so only the pair is
// parked (compat.md: "a 429 with Retry-After parks the target"), on every
// pool that lists it. It outlives config snapshots like the breaker.
//
// Readers (eligibility on the hot path) load one atomic; park writes it.
type parking struct {
	until  atomic.Int64 // unix nanos; 0 = never parked
	reason atomic.Pointer[string]
}

// parked reports whether the target is parked at now.
func (p *parking) parked(now time.Time) bool {
	u := p.until.Load()
	return u != 0 && now.UnixNano() < u
}

// retryIn is how long the parking lasts past now (0: not parked).
func (p *parking) retryIn(now time.Time) time.Duration {
	if d := p.until.Load() - now.UnixNano(); d > 0 {
		return time.Duration(d)
	}
	return 0
}

// park keeps the target out of rotation until now+d, never shortening a
// longer parking, and records why.
func (p *parking) park(now time.Time, d time.Duration, reason string) time.Time {
	until := now.Add(d).UnixNano()
	for {
		old := p.until.Load()
		if old >= until {
			return time.Unix(0, old)
		}
		if p.until.CompareAndSwap(old, until) {
			p.reason.Store(&reason)
			return time.Unix(0, until)
		}
	}
}

// state returns the parking's end and reason when parked at now.
func (p *parking) state(now time.Time) (until time.Time, reason string, ok bool) {
	if !p.parked(now) {
		return time.Time{}, "", false
	}
	if r := p.reason.Load(); r != nil {
		reason = *r
	}
	return time.Unix(0, p.until.Load()), reason, true
}

// parkings holds every target's parking by label for the process life.
type parkings struct {
	mu sync.Mutex
	m  map[string]*parking
}

// get returns label's parking, creating it on first use. Snapshot builds
// call it, never requests.
func (ps *parkings) get(label string) *parking {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.m == nil {
		ps.m = map[string]*parking{}
	}
	p, ok := ps.m[label]
	if !ok {
		p = &parking{}
		ps.m[label] = p
	}
	return p
}
