package strategies

import (
	"math"
	"strings"
	"sync"
)

// PreciseResidency scores the exact leading fraction of the request's
// block keys resident on a target: n_i / len(BlockKeys), where n_i is how
// many keys, from the first, the target's KV-event stream says it holds
// (Spec.Residency, batched through ResidencyBatch when offered). A target
// whose view is unknown, stale, degraded or gapped, and every target of a
// request without block keys, scores 0: neutral, so load decides. Inputs:
// RouteContext.BlockKeys, Spec.Residency.
type PreciseResidency struct{ res Residency }

// Score implements Scorer.
func (s PreciseResidency) Score(c *Cycle, cands []int, out []float64) {
	keys := c.Ctx.BlockKeys
	if s.res == nil || len(keys) == 0 {
		return
	}
	if b, ok := s.res.(ResidencyBatch); ok {
		got := c.ints[:c.n]
		b.ResidentPrefixes(keys, got)
		for k, t := range cands {
			if n := got[t]; n > 0 {
				out[k] = float64(min(n, len(keys))) / float64(len(keys))
			}
		}
		return
	}
	for k, t := range cands {
		if n, ok := s.res.ResidentPrefix(t, keys); ok && n > 0 {
			out[k] = float64(min(n, len(keys))) / float64(len(keys))
		}
	}
}

// CacheCapacity scores an LMCache tier by its free capacity, 1 − occupancy,
// when the controller reports the cache available and holding something
// but not full (0 < occupancy < 1). An empty, saturated, unavailable,
// failed or stale cache scores 0: neutral, so load decides. Inputs:
// Spec.Cache.
type CacheCapacity struct{ sig CacheSignal }

// Score implements Scorer.
func (s CacheCapacity) Score(_ *Cycle, cands []int, out []float64) {
	if s.sig == nil {
		return
	}
	for k, t := range cands {
		occ, avail, ok := s.sig.Occupancy(t)
		if ok && avail && occ > 0 && occ < 1 {
			out[k] = 1 - occ
		}
	}
}

// DefaultMaxLoRAs mirrors vLLM's --max-loras default (LoRAConfig.max_loras
// = 1): how many adapters an engine holds in GPU memory at once.
const DefaultMaxLoRAs = 1

// LoRAResidency scores 1 for a target holding the request's adapter
// resident and 0 otherwise; every target scores 0 when the request names no
// adapter (the scorer is inert) or when no target holds it (an all-cold
// adapter). Residency is the mesh's view of the engine's loaded adapters
// when it has a fresh one (Spec.Adapters), else what the target served
// recently: a per-target LRU of adapters sized like --max-loras (Spec.MaxLoRAs,
// default DefaultMaxLoRAs), learned in Observe. Inputs: RouteContext.Adapter,
// Spec.Adapters, Spec.MaxLoRAs.
type LoRAResidency struct {
	known AdapterResidency
	lrus  []adapterLRU
}

// NewLoRAResidency returns the scorer over n targets.
func NewLoRAResidency(n, maxLoRAs int, known AdapterResidency) *LoRAResidency {
	if maxLoRAs <= 0 {
		maxLoRAs = DefaultMaxLoRAs
	}
	s := &LoRAResidency{known: known, lrus: make([]adapterLRU, n)}
	for i := range s.lrus {
		s.lrus[i].names = make([]string, 0, maxLoRAs)
		s.lrus[i].used = make([]uint64, 0, maxLoRAs)
	}
	return s
}

// Score implements Scorer.
func (s *LoRAResidency) Score(c *Cycle, cands []int, out []float64) {
	a := c.Ctx.Adapter
	if a == "" {
		return
	}
	for k, t := range cands {
		if s.Resident(t, a) {
			out[k] = 1
		}
	}
}

// Resident reports whether adapter is taken to be resident on target t.
func (s *LoRAResidency) Resident(t int, adapter string) bool {
	if s.known != nil {
		if res, known := s.known.AdapterResident(t, adapter); known {
			return res
		}
	}
	return s.lrus[t].has(adapter)
}

// Observe records that target served ctx.Adapter.
func (s *LoRAResidency) Observe(target int, ctx *RouteContext) {
	if ctx.Adapter != "" {
		s.lrus[target].touch(ctx.Adapter)
	}
}

// adapterLRU is the bounded set of adapters one target served most
// recently.
type adapterLRU struct {
	mu    sync.RWMutex
	tick  uint64
	names []string
	used  []uint64 // used[i]: tick of names[i]'s last use
}

func (l *adapterLRU) has(a string) bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	for _, n := range l.names {
		if n == a {
			return true
		}
	}
	return false
}

func (l *adapterLRU) touch(a string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tick++
	for i, n := range l.names {
		if n == a {
			l.used[i] = l.tick
			return
		}
	}
	if len(l.names) < cap(l.names) {
		l.names = append(l.names, strings.Clone(a))
		l.used = append(l.used, l.tick)
		return
	}
	oldest := 0
	for i, u := range l.used {
		if u < l.used[oldest] {
			oldest = i
		}
	}
	l.names[oldest], l.used[oldest] = strings.Clone(a), l.tick
}

// PredictedLatency scores min prediction / prediction_i over the candidates
// the model can predict, where prediction_i = w0 + w1·queue_depth_i +
// w2·prompt_ktokens is target i's NLMS model (TargetStats.Predict) and
// queue_depth_i is QueueDepth(loads, i), the load the request would join,
// the same quantity the model trained on. A target below MinPredictSamples successes predicts
// nothing and is unknown, neither slow nor fast: it scores the mean of the
// predicted candidates' scores, so it ranks below the best predicted
// target but still takes its share of the traffic when that target is
// loaded, and reaches the samples it needs. (Scoring it 0 made it the
// slowest of all: once one target had 8 successes the others starved below
// 8 and the route piled onto the first learned targets.) When no
// candidate can be predicted every score is 0, so a cold route is a
// least-load pipeline. Inputs: loads, RouteContext.PromptTokens,
// Spec.Stats.
type PredictedLatency struct{ stats []*TargetStats }

// minPredictMs keeps a near-zero prediction from dividing by zero.
const minPredictMs = 1e-3

// Score implements Scorer.
func (s PredictedLatency) Score(c *Cycle, cands []int, out []float64) {
	kTok := float64(c.Ctx.PromptTokens) / 1000
	mn := math.Inf(1)
	known := 0
	for k, t := range cands {
		ms, ok := s.stats[t].Predict(QueueDepth(c.Loads, t), kTok)
		if !ok {
			out[k] = -1
			continue
		}
		ms = max(ms, minPredictMs)
		out[k] = ms
		mn = min(mn, ms)
		known++
	}
	if known == 0 {
		clear(out)
		return
	}
	sum := 0.0
	for k := range out {
		if out[k] >= 0 {
			out[k] = mn / out[k]
			sum += out[k]
		}
	}
	mean := sum / float64(known)
	for k := range out {
		if out[k] < 0 {
			out[k] = mean
		}
	}
}

// LeastPrefill is least load measured in prefill work: it scores 1 −
// queued_i / max queued over the candidates (1 for every candidate when
// none has any), where queued_i is RouteContext.QueuedPrefill[i], the
// prompt tokens waiting for prefill on target i. Without that signal (nil
// or shorter than the target list) it is LeastLoad over request counts.
// Inputs: RouteContext.QueuedPrefill, else loads.
type LeastPrefill struct{}

// Score implements Scorer.
func (l LeastPrefill) Score(c *Cycle, cands []int, out []float64) {
	q := c.Ctx.QueuedPrefill
	if len(q) < c.n {
		LeastLoad{}.Score(c, cands, out)
		return
	}
	// out holds each candidate's queued work until it is a score.
	var mx float64
	for k, t := range cands {
		out[k] = float64(q[t])
		mx = max(mx, out[k])
	}
	for k := range cands {
		if mx == 0 {
			out[k] = 1
		} else {
			out[k] = 1 - out[k]/mx
		}
	}
}
