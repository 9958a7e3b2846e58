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
	// wake asks the provider's health loop for a probe now (the breaker
	// just opened); buffered 1, sent without blocking.
	wake chan struct{}

	mu        sync.Mutex
	openedAt  time.Time // when the breaker last opened
	failures  int       // consecutive request failures (breaker)
	probeFail int       // consecutive health probe failures
	probeOK   int       // consecutive health probe successes while down
}

func newUpstream(name string) *upstream {
	u := &upstream{name: name, wake: make(chan struct{}, 1)}
	u.healthy.Store(true)
	return u
}

// unavailableAt says why the provider cannot take an attempt at n (Unix
// nanoseconds), or "" when it can. It never blocks.
func (u *upstream) unavailableAt(n int64) string {
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
// half-open probe slot when the breaker's open period is over (trial: the
// attempt is that probe); false means another request claimed it first and
// the attempt must pick again.
func (u *upstream) admit(now time.Time) (ok, trial bool) {
	st := breakerState(u.state.Load())
	if st == breakerClosed {
		return true, false
	}
	if st == breakerOpen && now.UnixNano() < u.openUntil.Load() {
		return false, false
	}
	if !u.probing.CompareAndSwap(false, true) {
		return false, false
	}
	u.state.Store(int32(breakerHalfOpen))
	return true, true
}

// healthCheckOK records a successful active health check that started at
// began: an open breaker's open period ends now, so the next request is its
// half-open probe. A check that began before the breaker opened says
// nothing about the failures that opened it and is ignored. It reports
// whether it cut an open period short.
func (u *upstream) healthCheckOK(began, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := now.UnixNano()
	if breakerState(u.state.Load()) != breakerOpen || u.openUntil.Load() <= n || began.Before(u.openedAt) {
		return false
	}
	u.openUntil.Store(n)
	return true
}

// troubled reports whether the provider is unhealthy or its breaker is not
// closed: its health loop then probes at the recovery cadence.
func (u *upstream) troubled() bool {
	return !u.healthy.Load() || breakerState(u.state.Load()) != breakerClosed
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
		u.openedAt = now
		u.openUntil.Store(now.Add(openFor).UnixNano())
		u.state.Store(int32(breakerOpen))
		u.probing.Store(false)
		if st == breakerClosed {
			// Not after a failed half-open probe: that waits for the
			// next probe at the recovery cadence, or every request of an
			// engine that fails requests but passes health checks would
			// be a probe.
			select {
			case u.wake <- struct{}{}:
			default:
			}
		}
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
