package router

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// retryable reports whether an upstream status may be retried on another
// target (compat.md: 408, 429, 5xx).
func retryable(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500
}

// backoff returns the full-jitter delay before retry n (n ≥ 1): uniform in
// [0, min(base·2^(n-1), max)]. draw returns a uniform float in [0,1).
func backoff(n int, base, maxDelay time.Duration, draw func() float64) time.Duration {
	ceil := base
	for i := 1; i < n && ceil < maxDelay; i++ {
		ceil *= 2
	}
	ceil = min(ceil, maxDelay)
	return time.Duration(draw() * float64(ceil+1))
}

// parseRetryAfter reads a Retry-After header (delta seconds or HTTP date).
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return t.Sub(now), true
	}
	return 0, false
}

// retryBudget caps retries at a fraction of client requests so that an
// outage of every target cannot multiply the load on the fleet: each
// request deposits ratio tokens, each retry spends one, and the balance is
// capped at burst (which is also where it starts), so over any run
// retries ≤ burst + ratio·requests. The retry after a failed half-open
// breaker probe is not charged (at most one per provider per open period,
// whatever the request rate).
type retryBudget struct {
	milli atomic.Int64 // tokens × 1000
	ratio int64        // milli-tokens deposited per request
	burst int64        // milli-token cap
}

// The budget's burst is [breaker] failures within these bounds: a target
// failing every request is retried away from until its breaker opens, even
// on a fresh budget and a pool of two, so no client sees its error.
const (
	minRetryBurst = 3
	maxRetryBurst = 16
)

// retryBurst is the burst of a budget beside a breaker that opens after
// failures consecutive failures.
func retryBurst(failures int) int64 {
	return int64(min(max(failures, minRetryBurst), maxRetryBurst))
}

func newRetryBudget(ratio float64, burst int64) *retryBudget {
	b := &retryBudget{ratio: int64(ratio * 1000), burst: burst * 1000}
	b.milli.Store(b.burst)
	return b
}

// deposit records one client request.
func (b *retryBudget) deposit() {
	for {
		old := b.milli.Load()
		next := min(old+b.ratio, b.burst)
		if next == old || b.milli.CompareAndSwap(old, next) {
			return
		}
	}
}

// spend takes one retry token; false when the budget is exhausted.
func (b *retryBudget) spend() bool {
	for {
		old := b.milli.Load()
		if old < 1000 {
			return false
		}
		if b.milli.CompareAndSwap(old, old-1000) {
			return true
		}
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
