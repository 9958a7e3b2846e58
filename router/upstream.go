package router

import (
	"sync"
	"sync/atomic"
	"time"
)

// breakerState is a circuit breaker's position.
type breakerState int32

const (
	breakerClosed breakerState = iota
	breakerOpen
	breakerHalfOpen // open period over: one probe request may pass
)

func (b breakerState) String() string {
	return [...]string{"closed", "open", "half_open"}[b]
}

// upstream is the per-provider state that outlives config snapshots:
// circuit breaker and active health (429 parking is per target: parking.go). It is keyed by provider
// name and api_base, so a provider pointed at a new address starts fresh.
//
// Readers (eligibility checks on the hot path) use atomics only; state
// transitions take mu.
type upstream struct {
	name string

	openUntil atomic.Int64 // unix nanos the breaker stays open until
	state     atomic.Int32 // breakerState
	probing   atomic.Bool  // a half-open probe is in flight
	healthy   atomic.Bool

	mu        sync.Mutex
	failures  int // consecutive request failures (breaker)
	probeFail int // consecutive health probe failures
	probeOK   int // consecutive health probe successes while down
}

func newUpstream(name string) *upstream {
	u := &upstream{name: name}
	u.healthy.Store(true)
	return u
}

// unavailable says why the provider cannot take an attempt at now, or ""
// when it can. It never blocks.
func (u *upstream) unavailable(now time.Time) string {
	n := now.UnixNano()
	if !u.healthy.Load() {
		return "unhealthy"
	}
	switch breakerState(u.state.Load()) {
	case breakerOpen:
		if n < u.openUntil.Load() {
			return "breaker_open"
		}
		if u.probing.Load() {
			return "breaker_half_open"
		}
	case breakerHalfOpen:
		if u.probing.Load() {
			return "breaker_half_open"
		}
	}
	return ""
}

// retryIn is how long until the provider may become available again (0 if
// unknown or now).
func (u *upstream) retryIn(now time.Time) time.Duration {
	n := now.UnixNano()
	if breakerState(u.state.Load()) == breakerOpen {
		if o := u.openUntil.Load(); o > n {
			return time.Duration(o - n)
		}
	}
	return 0
}

// admit is called once a target on this provider is picked. It claims the
// half-open probe slot when the breaker's open period is over; false means
// another request claimed it first and the attempt must pick again.
func (u *upstream) admit(now time.Time) bool {
	st := breakerState(u.state.Load())
	if st == breakerClosed {
		return true
	}
	if st == breakerOpen && now.UnixNano() < u.openUntil.Load() {
		return false
	}
	if !u.probing.CompareAndSwap(false, true) {
		return false
	}
	u.state.Store(int32(breakerHalfOpen))
	return true
}

// success records a request that the provider served; it closes the
// breaker. It returns the state left behind when that changed.
func (u *upstream) success() (from breakerState, changed bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.failures = 0
	from = breakerState(u.state.Load())
	u.probing.Store(false)
	if from != breakerClosed {
		u.state.Store(int32(breakerClosed))
		return from, true
	}
	return from, false
}

// failure records a failed request. threshold consecutive failures, or a
// failed half-open probe, open the breaker for openFor. It reports whether
// this call opened it.
func (u *upstream) failure(now time.Time, threshold int, openFor time.Duration) (opened bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.failures++
	st := breakerState(u.state.Load())
	if st == breakerHalfOpen || (st == breakerClosed && u.failures >= threshold) {
		u.openUntil.Store(now.Add(openFor).UnixNano())
		u.state.Store(int32(breakerOpen))
		u.probing.Store(false)
		return true
	}
	return false
}

// release gives the half-open probe slot back when the probe attempt ended
// without a verdict on the provider (client cancelled, 4xx).
func (u *upstream) release() {
	if breakerState(u.state.Load()) == breakerHalfOpen {
		u.probing.Store(false)
	}
}

// probed records one active health probe. It returns the new health and
// whether it changed.
func (u *upstream) probed(ok bool, downAfter, upAfter int) (healthy, changed bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	was := u.healthy.Load()
	if ok {
		u.probeFail = 0
		if !was {
			u.probeOK++
			if u.probeOK >= upAfter {
				u.probeOK = 0
				u.healthy.Store(true)
				return true, true
			}
		}
		return was, false
	}
	u.probeOK = 0
	u.probeFail++
	if was && u.probeFail >= downAfter {
		u.healthy.Store(false)
		return false, true
	}
	return was, false
}
