package router

import (
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// parking is the 429 parking of one target: the provider/model pair an
// attempt used. An upstream that answers 429 with Retry-After for one
// model says nothing about the provider's other models, so only the pair
// is parked (compat.md: "a 429 with Retry-After parks the target"), on
// every pool that lists it. It outlives config snapshots like the breaker.
// A declared target's pair is its label; a passthrough member forwards the
// caller's model, so its parkings are kept per requested model (forModel).
//
// Readers (eligibility on the hot path) load one atomic, plus one map read
// for a passthrough member that has ever been parked; park writes them.
type parking struct {
	until  atomic.Int64 // unix nanos; 0 = never parked
	reason atomic.Pointer[string]
	// byModel holds a passthrough member's parkings by requested model
	// (string → *parking); any is true once it holds one.
	byModel sync.Map
	any     atomic.Bool
	models  atomic.Int64 // entries in byModel
}

// maxModelParkings bounds a passthrough member's per-model parkings:
// requested models are the caller's to choose. Past it, a 429 parks the
// member as a whole.
const maxModelParkings = 1024

// forModel returns the parking of requested model on a passthrough
// member, creating it when create is set; nil when there is none.
func (p *parking) forModel(model string, create bool) *parking {
	if !create {
		if !p.any.Load() {
			return nil
		}
		v, ok := p.byModel.Load(model)
		if !ok {
			return nil
		}
		return v.(*parking)
	}
	if v, ok := p.byModel.Load(model); ok {
		return v.(*parking)
	}
	if p.models.Load() >= maxModelParkings {
		return p
	}
	v, loaded := p.byModel.LoadOrStore(model, &parking{})
	if !loaded {
		p.models.Add(1)
	}
	p.any.Store(true)
	return v.(*parking)
}

// parked reports whether the target is parked at now.
func (p *parking) parked(now time.Time) bool { return p.parkedAt(now.UnixNano()) }

// parkedAt is parked at n, in Unix nanoseconds.
func (p *parking) parkedAt(n int64) bool {
	u := p.until.Load()
	return u != 0 && n < u
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

// parkings holds every target's parking for the process life, by label
// and api_base: a provider pointed at a new address starts unparked, as
// its breaker does.
type parkings struct {
	mu sync.Mutex
	m  map[string]*parking
}

// get returns key's parking, creating it on first use. Snapshot builds
// call it, never requests.
func (ps *parkings) get(key string) *parking {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.m == nil {
		ps.m = map[string]*parking{}
	}
	p, ok := ps.m[key]
	if !ok {
		p = &parking{}
		ps.m[key] = p
	}
	return p
}

// ParkedTarget is one target parked at the time of a ParkedTargets call.
type ParkedTarget struct {
	// Target is the target's label (provider/model, provider/* for a
	// passthrough member); Model is the requested model a passthrough
	// member is parked for ("" otherwise).
	Target, Model string
	Until         time.Time
	Reason        string
}

// ParkedTargets lists this router's targets parked now (429 with
// Retry-After), sorted by target and model, for the admin API. Off the
// request path.
func (s *Server) ParkedTargets() []ParkedTarget {
	now := s.clock.Now()
	s.parks.mu.Lock()
	defer s.parks.mu.Unlock()
	var out []ParkedTarget
	for key, p := range s.parks.m {
		label, _, _ := strings.Cut(key, "\x00")
		if until, reason, ok := p.state(now); ok {
			out = append(out, ParkedTarget{Target: label, Until: until, Reason: reason})
		}
		p.byModel.Range(func(m, v any) bool {
			if until, reason, ok := v.(*parking).state(now); ok {
				out = append(out, ParkedTarget{Target: label, Model: m.(string), Until: until, Reason: reason})
			}
			return true
		})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Target != out[j].Target {
			return out[i].Target < out[j].Target
		}
		return out[i].Model < out[j].Model
	})
	return out
}

// calm is the pool-wide summary a pick reads instead of every target's
// parking, health and breaker: nothing was parked, unhealthy or with its
// breaker off closed when it was last looked at, and nothing was disturbed
// since. At 64 targets those fields are a cache miss or two per target
// per pick; the summary is one load. Writes that can take a target out
// (a 429 parking, a breaker opening, a failed health check) disturb it,
// each a generation; a pick that finds it disturbed reads every target as
// before and, at most once per calmRecheck, looks at all of them
// (Server.calmAt) to mark it calm again unless a write came meanwhile. A
// parking that ends, a breaker that closes and a provider back to health
// are found that way: they only make targets available.
type calm struct {
	// word is the generation << 1, | 1 while calm.
	word atomic.Uint64
	// check is the instant (Unix ns) before which a pick does not look
	// again.
	check atomic.Int64
}

// calmRecheck bounds how often picks look at every target to find the
// pool calm again while something is parked, unhealthy or open.
const calmRecheck = 100 * time.Millisecond

// disturb marks a write that may take a target out: the summary is no
// longer calm, and a look that began before it cannot mark it so. The
// caller has made its write first.
func (c *calm) disturb() {
	for {
		w := c.word.Load()
		if c.word.CompareAndSwap(w, (w+2)&^1) {
			return
		}
	}
}

// calmAt reports whether no target of sn can be unavailable at n (Unix
// ns) for being parked, unhealthy or having a breaker off closed. False
// says nothing: the caller reads each target.
func (s *Server) calmAt(sn *snapshot, n int64) bool {
	c := &s.calm
	w := c.word.Load()
	if w&1 == 1 {
		return true
	}
	if n < c.check.Load() {
		return false
	}
	c.check.Store(n + int64(calmRecheck))
	if s.anyTrouble(sn, n) {
		return false
	}
	return c.word.CompareAndSwap(w, w|1)
}

// anyTrouble reports whether some provider of sn is unhealthy or has its
// breaker off closed, or some parking (of any snapshot) lasts past n. A
// provider new to a snapshot starts healthy and closed (newUpstream), so
// a config change needs no disturb of its own.
func (s *Server) anyTrouble(sn *snapshot, n int64) bool {
	for _, p := range sn.providers {
		if p.up.troubled() {
			return true
		}
	}
	s.parks.mu.Lock()
	defer s.parks.mu.Unlock()
	for _, pk := range s.parks.m {
		if pk.parkedAt(n) {
			return true
		}
		if pk.any.Load() {
			parked := false
			pk.byModel.Range(func(_, v any) bool {
				parked = v.(*parking).parkedAt(n)
				return !parked
			})
			if parked {
				return true
			}
		}
	}
	return false
}
