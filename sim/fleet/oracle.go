package fleet

import (
	"math/rand/v2"
	"slices"
	"time"
)

// oraclePick is the oracle router: with the true, instant state of every
// engine (its prefix cache, its outstanding requests and how far each has
// got) it picks the engine that minimises this request's predicted time
// to first token under the engine's step model:
//
//	work  = prefill tokens still queued ahead of it + its own uncached tokens
//	steps = ⌈work / MaxNumBatchedTokens⌉
//	TTFT  ≈ work·PrefillToken + steps·(Base + running·DecodeSeq + context·ContextToken)
//	        (+ LoraLoad when its adapter is not resident)
//
// Ties go to the engine with fewer outstanding requests, then the lower
// index. It returns the engine and the request's uncached prompt tokens
// there.
func (r *run) oraclePick(p *prepared) (best, uncached int) {
	m := r.cfg.Engine.Model
	bs := r.cfg.Engine.BlockSize
	budget := r.cfg.Engine.MaxNumBatchedTokens
	limit := min((len(p.Tokens)-1)/bs, len(p.rc.BlockKeys))
	var bestTTFT time.Duration = -1
	bestOut := 0
	for e, n := range r.engines {
		own := len(p.Tokens) - n.lag.res.prefix(p.rc.BlockKeys[:limit])*bs
		work, running, context := own, 0, 0
		for _, f := range n.outstanding {
			if f.done && f.fin <= r.now {
				continue
			}
			running++
			if f.first < 0 || f.first > r.now {
				work += f.uncached
				context += f.prompt
			} else {
				context += f.prompt + f.output/2
			}
		}
		steps := (work + budget - 1) / budget
		step := m.Base + time.Duration(running)*m.DecodeSeq + time.Duration(context)*m.ContextToken
		ttft := time.Duration(work)*m.PrefillToken + time.Duration(steps)*step
		if p.Adapter != "" {
			ttft += r.adapterWait(n, p.Adapter, step)
		}
		if bestTTFT < 0 || ttft < bestTTFT || (ttft == bestTTFT && running < bestOut) {
			best, bestTTFT, bestOut, uncached = e, ttft, running, own
		}
	}
	return best, uncached
}

// adapterWait predicts how long a request for adapter waits on engine n
// for its adapter: nothing when a running request already uses it;
// otherwise, when the batch already holds MaxLoras distinct adapters, until
// the adapter whose requests finish first frees its slot (each running
// request's remaining output times the current step time), plus the load
// time when the adapter is not resident.
func (r *run) adapterWait(n *node, adapter string, step time.Duration) time.Duration {
	busy := map[string]time.Duration{}
	for _, f := range n.outstanding {
		if f.adapter == "" || (f.done && f.fin <= r.now) {
			continue
		}
		left := f.output
		rem := time.Duration(0)
		if f.first < 0 || f.first > r.now {
			rem = time.Duration(f.uncached) * r.cfg.Engine.Model.PrefillToken
		} else if step > 0 {
			left -= int((r.now - f.first) / step)
		}
		rem += time.Duration(max(left, 1)) * step
		busy[f.adapter] = max(busy[f.adapter], rem)
	}
	if _, ok := busy[adapter]; ok {
		return 0
	}
	var wait time.Duration
	if len(busy) >= r.cfg.Engine.MaxLoras {
		wait = -1
		for _, d := range busy {
			if wait < 0 || d < wait {
				wait = d
			}
		}
	}
	if !slices.Contains(n.eng.Stats().ResidentLoras, adapter) {
		wait += r.cfg.Engine.LoraLoad
	}
	return wait
}

// newPicker returns the seeded source that spreads arrivals over replicas.
func newPicker(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, 0x5eed))
}
