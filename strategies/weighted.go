package strategies

import (
	"sync"
	"sync/atomic"
)

// maxSchedule bounds the precomputed weighted schedule (one int32 per slot);
// pools whose weights sum past it run the live algorithm on every pick.
const maxSchedule = 1 << 16

// Weighted is nginx's smooth weighted round-robin. Each pick, every
// eligible target i adds its weight w_i to its running value c_i; the
// target with the largest c_i wins (lowest index on ties) and subtracts the
// sum of the eligible weights. Over any window of Σw picks with every
// target eligible, target i is chosen exactly w_i times and the choices are
// interleaved (3:1 gives a a b a, never a a a b). Inputs: Target.Weight
// (integers ≥ 1; smaller values count as 1) and the eligibility mask.
//
// Because the sequence is periodic with period Σw, it is computed once at
// Build and a pick is one atomic increment plus a slot read. When the slot's
// target is ineligible, the pick runs the live algorithm over the eligible
// targets only, so the missing target's share is redistributed in
// proportion to the others' weights, as nginx does.
type Weighted struct {
	weights  []int64
	schedule []int32 // nil when Σw > maxSchedule
	next     atomic.Uint64

	mu      sync.Mutex
	current []int64
}

var _ LoadBalancer = (*Weighted)(nil)

func newWeighted(s Spec) (LoadBalancer, error) {
	w := &Weighted{weights: make([]int64, len(s.Targets)), current: make([]int64, len(s.Targets))}
	var total int64
	for i, t := range s.Targets {
		w.weights[i] = int64(max(t.Weight, 1))
		total += w.weights[i]
	}
	if total <= maxSchedule {
		w.schedule = make([]int32, total)
		for k := range w.schedule {
			i, _ := w.live(nil)
			w.schedule[k] = int32(i)
		}
		clear(w.current)
	}
	return w, nil
}

// Name implements LoadBalancer.
func (*Weighted) Name() string { return "weighted" }

// Pick implements LoadBalancer.
func (w *Weighted) Pick(ctx *RouteContext, loads []uint64) (int, bool) {
	return w.PickEligible(ctx, loads, nil)
}

// PickEligible implements LoadBalancer. A retry (ctx.Retry) reads the next
// slot of the schedule without taking it, so a failing target does not
// move the rotation of the requests that follow.
func (w *Weighted) PickEligible(ctx *RouteContext, _ []uint64, eligible Eligible) (int, bool) {
	if w.schedule != nil {
		var k uint64
		if ctx != nil && ctx.Retry {
			k = w.next.Load() % uint64(len(w.schedule))
		} else {
			k = (w.next.Add(1) - 1) % uint64(len(w.schedule))
		}
		if i := int(w.schedule[k]); isEligible(eligible, i) {
			return i, true
		}
	}
	return w.live(eligible)
}

// live runs one step of smooth weighted round-robin over the eligible
// targets.
func (w *Weighted) live(eligible Eligible) (int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	best := -1
	var total int64
	for i, wt := range w.weights {
		if !isEligible(eligible, i) {
			continue
		}
		w.current[i] += wt
		total += wt
		if best < 0 || w.current[i] > w.current[best] {
			best = i
		}
	}
	if best < 0 {
		return 0, false
	}
	w.current[best] -= total
	return best, true
}

// Observe implements LoadBalancer; weighted learns nothing.
func (*Weighted) Observe(int, *RouteContext) {}
