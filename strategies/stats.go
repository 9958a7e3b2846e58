package strategies

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Tracker holds learned per-target state keyed by target identity, so that
// a config reload (which rebuilds every balancer) keeps latency EWMAs,
// predicted-latency models and counters. One Tracker lives for the router
// process.
type Tracker struct {
	mu sync.Mutex
	m  map[string]*TargetStats
	ch *changes
}

// changes signals that some target's in-flight count or queued prefill
// changed: a flag set on the first change, and a one-slot channel woken
// when it was clear.
type changes struct {
	dirty atomic.Bool
	c     chan struct{}
}

func (c *changes) note() {
	if c != nil && !c.dirty.Load() && c.dirty.CompareAndSwap(false, true) {
		select {
		case c.c <- struct{}{}:
		default:
		}
	}
}

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker {
	return &Tracker{m: make(map[string]*TargetStats), ch: &changes{c: make(chan struct{}, 1)}}
}

// Changes returns a channel that receives after a target's in-flight
// count or queued prefill changed (Begin, End, QueuePrefill, PrefillDone)
// since the last receive: a router's mesh publishes on it. Changes between
// two receives are coalesced into one; a change costs the writer one
// atomic load when a signal is already pending. One goroutine should
// receive.
func (t *Tracker) Changes() <-chan struct{} { return t.ch.c }

// Note signals Changes without a count changing: something else the
// receiver publishes with the counts changed (the router's admission
// waiters per band). It costs what a count change costs.
func (t *Tracker) Note() { t.ch.note() }

// Rearm must be called by Changes' receiver after each receive, before
// reading the counts: the next change signals again.
func (t *Tracker) Rearm() { t.ch.dirty.Store(false) }

// Target returns the stats for id, creating them on first use. Call it when
// building a snapshot, not per request.
func (t *Tracker) Target(id string) *TargetStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.m[id]
	if !ok {
		s = &TargetStats{id: id, ch: t.ch}
		t.m[id] = s
	}
	return s
}

// Outcome is what the router reports when an attempt on a target ends.
type Outcome struct {
	// Success is true for a completed 2xx response.
	Success bool
	// Latency is the attempt's total duration.
	Latency time.Duration
	// QueueDepth is the request's queue depth on the target as QueueDepth
	// defines it: the load the balancer was given for the target at the
	// pick. predicted_latency trains on it and predicts from the same
	// quantity.
	QueueDepth uint64
	// PromptTokens is the request's prompt size in tokens.
	PromptTokens int
	// At is when the attempt ended.
	At time.Time
}

// QueueDepth is the one definition of a request's queue depth on target
// i, shared by predicted_latency's training (Outcome.QueueDepth) and its
// prediction: loads[i] as the router handed it to PickEligible, read
// before the request's own increment. With a mesh that is this router's
// in-flight plus what the mesh folds in for the engine (router.EngineView);
// whatever the router feeds as load, training and prediction see the same
// thing.
func QueueDepth(loads []uint64, i int) uint64 { return loadOf(loads, i) }

// EWMAAlpha is the smoothing factor of the latency EWMA (compat.md).
const EWMAAlpha = 0.3

// TargetStats is the learned state of one target. Writers are the router's
// request goroutines (Begin/End); readers are strategies on the hot path.
// Reads are lock-free.
type TargetStats struct {
	id       string
	inFlight atomic.Int64
	picks    atomic.Uint64 // attempts begun
	samples  atomic.Uint64 // successful completions
	ewmaBits atomic.Uint64 // latency EWMA in ms, float64 bits; 0 = none
	lastNano atomic.Int64  // unix nanos of the last successful sample
	prefill  atomic.Int64  // prompt tokens of attempts awaiting a first token
	model    nlms
	ch       *changes // the tracker's change signal; nil outside one
}

// ID returns the target identity.
func (s *TargetStats) ID() string { return s.id }

// Begin records that an attempt started on the target and returns the
// in-flight count before the increment.
func (s *TargetStats) Begin() uint64 {
	s.picks.Add(1)
	n := s.inFlight.Add(1) - 1
	s.ch.note()
	return uint64(n)
}

// End records the end of an attempt started with Begin. Only successful
// attempts teach the latency EWMA and the predicted-latency model.
func (s *TargetStats) End(o Outcome) {
	s.inFlight.Add(-1)
	s.ch.note()
	if !o.Success {
		return
	}
	ms := float64(o.Latency) / float64(time.Millisecond)
	if ms < 0 || math.IsNaN(ms) {
		return
	}
	for {
		old := s.ewmaBits.Load()
		next := ms
		if old != 0 {
			prev := math.Float64frombits(old)
			next = prev + EWMAAlpha*(ms-prev)
		}
		if next == 0 {
			next = math.SmallestNonzeroFloat64
		}
		if s.ewmaBits.CompareAndSwap(old, math.Float64bits(next)) {
			break
		}
	}
	s.samples.Add(1)
	if !o.At.IsZero() {
		s.lastNano.Store(o.At.UnixNano())
	}
	s.model.learn(float64(o.QueueDepth), float64(o.PromptTokens)/1000, ms)
}

// InFlight returns this router's in-flight attempts on the target.
func (s *TargetStats) InFlight() uint64 {
	if v := s.inFlight.Load(); v > 0 {
		return uint64(v)
	}
	return 0
}

// QueuePrefill records that an attempt queued n uncached prompt tokens
// for prefill on the target (its prompt minus the prefix resident when it
// was picked). The attempt calls PrefillDone with the same n exactly once:
// at its first token, or when it ends (fails, is cancelled) without one.
func (s *TargetStats) QueuePrefill(n uint64) {
	s.prefill.Add(int64(n))
	s.ch.note()
}

// PrefillDone takes n tokens queued by QueuePrefill off the target.
func (s *TargetStats) PrefillDone(n uint64) {
	s.prefill.Add(-int64(n))
	s.ch.note()
}

// QueuedPrefill returns the prompt tokens this router's attempts on the
// target still wait to prefill (Σ QueuePrefill − Σ PrefillDone).
func (s *TargetStats) QueuedPrefill() uint64 {
	if v := s.prefill.Load(); v > 0 {
		return uint64(v)
	}
	return 0
}

// Picks returns how many attempts this router started on the target.
func (s *TargetStats) Picks() uint64 { return s.picks.Load() }

// Samples returns the number of successful completions observed.
func (s *TargetStats) Samples() uint64 { return s.samples.Load() }

// LatencyEWMA returns the smoothed latency in ms, ok=false before the first
// successful sample.
func (s *TargetStats) LatencyEWMA() (ms float64, ok bool) {
	b := s.ewmaBits.Load()
	if b == 0 {
		return 0, false
	}
	return math.Float64frombits(b), true
}

// LastSample returns when the last successful sample landed (zero if none).
func (s *TargetStats) LastSample() time.Time {
	n := s.lastNano.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// Predict returns the predicted latency in ms of a request with
// promptKTokens thousand prompt tokens joining a queue of queueDepth, or
// ok=false while the model has fewer than MinPredictSamples samples.
func (s *TargetStats) Predict(queueDepth uint64, promptKTokens float64) (ms float64, ok bool) {
	return s.model.predict(float64(queueDepth), promptKTokens)
}

// Coefficients returns the model's current (w0, w1, w2).
func (s *TargetStats) Coefficients() (w0, w1, w2 float64) { return s.model.coefficients() }
