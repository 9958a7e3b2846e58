package strategies

import (
	"fmt"
	"strings"
)

// Explanation says why one pick went where it did, for the router's trace
// of a sampled request. Filling one allocates, so the router asks for it
// only when the request is traced; PickEligible stays allocation-free.
type Explanation struct {
	// Eligible counts the targets the router's mask allowed.
	Eligible int
	// Score is the chosen target's total and Components its terms, in the
	// strategy's order. Both are empty for a strategy without scores.
	Score      float64
	Components []ScoreComponent
	// RunnerUp is the eligible target with the next-best total (-1: none)
	// and RunnerUpScore that total.
	RunnerUp      int
	RunnerUpScore float64
	// Mode names how the pick was made: "scored", "tie" (the top totals
	// were equal and a draw decided), "single" (one candidate), and for
	// adaptive "blend", "exploration", "warmup" or "fallback".
	Mode string
	// Fallback is why a scoring strategy did not use its primary signal:
	// "cold" (adaptive lacks evidence), "kill_switch" (adaptive routing
	// is disabled), "all_neutral" (every candidate scored the same, so
	// the pick was a random draw); "" when it did.
	Fallback string
}

// ScoreComponent is one weighted term of a pick's total.
type ScoreComponent struct {
	Name   string
	Weight float64
	// Score is the term's value in [0, 1] before the weight.
	Score float64
}

// Explainer is a LoadBalancer that can say why it picked. PickExplained
// picks exactly as PickEligible would and fills ex.
type Explainer interface {
	PickExplained(ctx *RouteContext, loads []uint64, eligible Eligible, ex *Explanation) (int, bool)
}

// PickExplained picks with lb and fills ex: fully when lb is an Explainer,
// otherwise with the eligible count and Mode "unscored".
func PickExplained(lb LoadBalancer, ctx *RouteContext, loads []uint64, eligible Eligible, ex *Explanation) (int, bool) {
	*ex = Explanation{RunnerUp: -1}
	if e, ok := lb.(Explainer); ok {
		return e.PickExplained(ctx, loads, eligible, ex)
	}
	for i := range loads {
		if isEligible(eligible, i) {
			ex.Eligible++
		}
	}
	ex.Mode = "unscored"
	return lb.PickEligible(ctx, loads, eligible)
}

// scorerName is the name a trace shows for s: its type without package
// or pointer, in snake case ("LeastLoad" → "least_load").
func scorerName(s Scorer) string {
	t := fmt.Sprintf("%T", s)
	t = t[strings.LastIndexByte(t, '.')+1:]
	var b strings.Builder
	for i, r := range t {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// explainTotals fills ex's score, runner-up, mode and fallback from the
// candidates' totals and the winning position k.
func explainTotals(ex *Explanation, cands []int, totals []float64, k int) {
	const eps = 1e-9
	ex.Score = totals[k]
	ex.RunnerUp = -1
	for j, v := range totals {
		if j != k && (ex.RunnerUp < 0 || v > ex.RunnerUpScore) {
			ex.RunnerUp, ex.RunnerUpScore = cands[j], v
		}
	}
	switch {
	case len(cands) == 1:
		ex.Mode = "single"
	case ex.RunnerUp >= 0 && ex.RunnerUpScore >= ex.Score-eps:
		ex.Mode = "tie"
	default:
		ex.Mode = "scored"
	}
	if len(cands) > 1 {
		lo, hi := totals[0], totals[0]
		for _, v := range totals {
			lo, hi = min(lo, v), max(hi, v)
		}
		if hi-lo < eps {
			ex.Fallback = "all_neutral"
		}
	}
}
