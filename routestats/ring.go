// Package routestats owns the per-route, per-target serving figures the
// dashboard's route page shows: each router keeps a bounded in-memory Ring
// of time buckets (10 s over the last 5 minutes, 1 min over the last hour)
// counting attempts, errors, retries and the prompt and cached tokens
// engines report, with latency and TTFT histograms;
// the Ring's Report is the mergeable form routers exchange over the
// admin API's telemetry channel, and Summarize folds the reports of every
// router into the windows and chart points the page draws. Nothing here
// is durable: Grafana stays the place for long history.
package routestats

import (
	"sort"
	"sync"
	"time"
)

// Ring resolutions: Fine covers FineWindow, Coarse covers CoarseWindow.
const (
	FineStep     = 10 * time.Second
	FineWindow   = 5 * time.Minute
	CoarseStep   = time.Minute
	CoarseWindow = time.Hour

	fineLen   = int(FineWindow / FineStep)
	coarseLen = int(CoarseWindow / CoarseStep)

	// MaxSeries bounds the (pool, target) pairs a Ring tracks (each holds
	// 90 buckets of about 280 bytes, ≈25 KB; ≈25 MB at the bound); attempts
	// on further pairs are counted in Dropped only. A pair idle for an hour
	// is forgotten.
	MaxSeries = 1024
)

// Attempt is one upstream attempt's outcome as the request path records it.
type Attempt struct {
	// Retry is true for every attempt of a request but its first.
	Retry bool
	// OK is false for a connect error, a retryable status or a broken
	// stream.
	OK bool
	// Latency is the attempt's duration; TTFT the time to the first
	// response byte sent to the client, when FirstByte says one was.
	Latency, TTFT time.Duration
	FirstByte     bool
	// At is when the attempt ended (zero: the Ring reads its clock). The
	// request path passes the time it already read.
	At time.Time
	// PromptTokens and CachedTokens are the response's usage.prompt_tokens
	// and usage.prompt_tokens_details.cached_tokens; zero PromptTokens: the
	// engine reported no cached tokens.
	PromptTokens, CachedTokens uint64
}

// bucket is one time slot of one series.
type bucket struct {
	slot                      int64 // unix time / step; identifies the slot
	attempts, errors, retries uint32
	prompt, cached            uint64 // tokens, where the engine reported cached tokens
	latency, ttft             hist
}

func (b *bucket) add(a Attempt) {
	b.attempts++
	if a.Retry {
		b.retries++
	}
	if !a.OK {
		b.errors++
	}
	b.latency.add(a.Latency)
	if a.PromptTokens > 0 {
		b.prompt += a.PromptTokens
		b.cached += min(a.CachedTokens, a.PromptTokens)
	}
	if a.FirstByte {
		b.ttft.add(a.TTFT)
	}
}

// series is one (pool, target) pair's two rings. gone is set when the
// Ring forgot the pair (Report): a handle on it records nothing more.
type series struct {
	provider string
	mu       sync.Mutex
	gone     bool
	last     time.Time
	fine     [fineLen]bucket
	coarse   [coarseLen]bucket
}

func slotOf(t time.Time, step time.Duration) int64 { return t.UnixNano() / int64(step) }

// add records a at now; false when the series is gone.
func (s *series) add(now time.Time, a Attempt) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return false
	}
	s.last = now
	addTo(s.fine[:], FineStep, now, a)
	addTo(s.coarse[:], CoarseStep, now, a)
	return true
}

func addTo(ring []bucket, step time.Duration, now time.Time, a Attempt) {
	slot := slotOf(now, step)
	b := &ring[slot%int64(len(ring))]
	if b.slot != slot {
		*b = bucket{slot: slot}
	}
	b.add(a)
}

// Ring is one router's in-memory stats. Record is safe for concurrent use
// and allocates only the first time a (pool, target) pair is seen; a
// caller recording the same pair again and again keeps its Handle.
type Ring struct {
	now func() time.Time

	mu      sync.RWMutex
	pools   map[string]map[string]*series // pool key → target label
	n       int
	dropped uint64
}

// NewRing returns an empty Ring reading time from now (nil: time.Now).
func NewRing(now func() time.Time) *Ring {
	if now == nil {
		now = time.Now
	}
	return &Ring{now: now, pools: map[string]map[string]*series{}}
}

// Record adds one attempt of pool (a route model, "slug/*" or
// "provider/*") on target (its "provider/model" label) of provider.
func (r *Ring) Record(pool, provider, target string, a Attempt) {
	for {
		s := r.series(pool, provider, target)
		if s == nil || (&Handle{r: r, s: s}).Add(a) {
			return
		}
	}
}

// Handle is one (pool, target) pair of a Ring, for a caller that records
// many attempts on the pair: Add goes to the pair's buckets without the
// Ring's lookup. Safe for concurrent use.
type Handle struct {
	r *Ring
	s *series
}

// Handle returns the handle of the pair, which it creates when new; nil
// when the Ring is full (the attempt is counted in Dropped).
func (r *Ring) Handle(pool, provider, target string) *Handle {
	if s := r.series(pool, provider, target); s != nil {
		return &Handle{r: r, s: s}
	}
	return nil
}

// series returns the pair's series, created when new (nil: the Ring is
// full).
func (r *Ring) series(pool, provider, target string) *series {
	r.mu.RLock()
	s := r.pools[pool][target]
	r.mu.RUnlock()
	if s == nil {
		s = r.create(pool, provider, target)
	}
	return s
}

// Add records a on the pair. It reports false, recording nothing, once
// the Ring has forgotten the pair (idle for CoarseWindow, see Report):
// the caller takes a new Handle.
func (h *Handle) Add(a Attempt) bool {
	at := a.At
	if at.IsZero() {
		at = h.r.now()
	}
	return h.s.add(at, a)
}

func (r *Ring) create(pool, provider, target string) *series {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.pools[pool]
	if s := m[target]; s != nil {
		return s
	}
	if r.n >= MaxSeries {
		r.dropped++
		return nil
	}
	if m == nil {
		m = map[string]*series{}
		r.pools[pool] = m
	}
	s := &series{provider: provider}
	m[target] = s
	r.n++
	return s
}

// Dropped counts attempts not recorded because the Ring was full.
func (r *Ring) Dropped() uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.dropped
}

// Report returns every pair's buckets still inside their window, sorted by
// pool then target, and forgets pairs idle for longer than CoarseWindow.
func (r *Ring) Report() []Route {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []Route{}
	for pool, m := range r.pools {
		route := Route{Pool: pool}
		for target, s := range m {
			s.mu.Lock()
			idle := now.Sub(s.last) > CoarseWindow
			s.gone = idle
			t := Target{Target: target, Provider: s.provider,
				Fine:   emit(s.fine[:], slotOf(now, FineStep)),
				Coarse: emit(s.coarse[:], slotOf(now, CoarseStep))}
			s.mu.Unlock()
			if idle {
				delete(m, target)
				r.n--
				continue
			}
			route.Targets = append(route.Targets, t)
		}
		if len(m) == 0 {
			delete(r.pools, pool)
			continue
		}
		sort.Slice(route.Targets, func(i, j int) bool { return route.Targets[i].Target < route.Targets[j].Target })
		out = append(out, route)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pool < out[j].Pool })
	return out
}

// emit returns the non-empty buckets of ring whose slot is within its
// length of current, oldest first.
func emit(ring []bucket, current int64) []Bucket {
	var out []Bucket
	for _, b := range ring {
		if b.attempts == 0 || b.slot > current || current-b.slot >= int64(len(ring)) {
			continue
		}
		out = append(out, Bucket{Slot: b.slot, Attempts: b.attempts, Errors: b.errors, Retries: b.retries,
			PromptTokens: b.prompt, CachedTokens: b.cached, Latency: b.latency.sparse(), TTFT: b.ttft.sparse()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Slot < out[j].Slot })
	return out
}
