package overhead

import "math"

// searchMaxRate is the max-rate search: rates start × factor^k up to
// limit while sustained says the rate held; after the first step that
// fails, bisect more steps between the last rate that held and that one,
// each at their geometric middle (rounded to a whole rate), so with the
// default ×1.5 and two bisections the answer is within 1.5^(1/4), 11 %, of
// the rate where the proxy stops holding, not within one 50 % step.
// It returns the highest rate that held (0: not even start) and the
// lowest that failed above it (0: none failed up to limit). A step is
// one call of sustained; the caller decides how often a failing rate is
// retried.
func searchMaxRate(start, factor, limit float64, bisect int, sustained func(rate float64) bool) (held, failed float64) {
	for rate := start; rate <= limit; rate *= factor {
		if !sustained(rate) {
			failed = rate
			break
		}
		held = rate
	}
	if held == 0 || failed == 0 {
		return held, failed
	}
	for range bisect {
		mid := math.Round(math.Sqrt(held * failed))
		if mid <= held || mid >= failed {
			break
		}
		if sustained(mid) {
			held = mid
		} else {
			failed = mid
		}
	}
	return held, failed
}
