package overhead

import (
	"context"
	"math"
)

// The max-rate search. Each path's search is a sequence of rates: start
// × factor^k up to limit while the rate holds; after the first that
// fails, bisect more rates between the last that held and that one, each
// at their geometric middle (rounded to a whole rate), so with the
// default ×1.5 and two bisections the answer is within 1.5^(1/4), 11 %, of
// the rate where the path stops holding, not within one 50 % step.
//
// A rate's verdict is from up to three counted tries (one window each,
// SearchDuration long): it holds as soon as more of its counted tries
// held than failed, and fails at the second counted failure, so a held
// first try decides at once, and one stall in a failed try is outvoted by
// two held ones (held; failed, held, held) while a rate that fails twice
// in three does not hold. A failed try in a disturbed window (the host
// or other tasks took more of the proxy's CPU, or of the generator's,
// than Config.Disturbed; host.go) is not counted: the path is not blamed
// for a neighbour. At most maxExcused failed tries per rate are excused
// that way; after that a disturbed failure counts too, so a machine that
// stays disturbed still ends the search.
//
// The paths' searches are interleaved (interleave): in each round every
// path whose search is not over has one try of its current rate, in
// column order, so a change in what the machine's neighbours do, lasting
// longer than a round, falls on every path alike instead of on the one
// path searched while it lasted.

// maxExcused is how many disturbed failed tries per rate are not counted.
const maxExcused = 2

// SearchTry is one try of the max-rate search: a window at Rate, what it
// measured (WindowRun: Slot is the round of the interleaved search, Used
// says whether the try counted towards its rate's verdict) and whether
// p99 and errors held under the limit.
type SearchTry struct {
	WindowRun
	Rate float64 `json:"rate"`
	Held bool    `json:"held"`
}

// search is one path's max-rate search.
type search struct {
	factor, limit float64
	bisect        int
	held, failed  float64 // highest rate that held, lowest that failed above it (0: none yet)
	rate          float64 // the rate being tried; 0 when the search is over
	bisected      int
	// the current rate's counted held and failed tries, and its excused
	// failures
	holds, fails, excused int
	tries                 []SearchTry // every try, in order
}

func newSearch(start, factor, limit float64, bisect int) *search {
	s := &search{factor: factor, limit: limit, bisect: bisect, rate: start}
	if start > limit {
		s.rate = 0
	}
	return s
}

// done reports whether the search is over.
func (s *search) done() bool { return s.rate == 0 }

// add records a try of the current rate (t.Rate) and moves the search on
// when the rate's verdict is in; it sets t.Used to whether the try
// counted.
func (s *search) add(t SearchTry) {
	t.Used = t.Held || !t.Disturbed || s.excused >= maxExcused
	s.tries = append(s.tries, t)
	switch {
	case !t.Used:
		s.excused++
		return
	case t.Held:
		s.holds++
	default:
		s.fails++
	}
	if s.holds > s.fails {
		s.verdict(true)
	} else if s.fails >= 2 {
		s.verdict(false)
	}
}

// verdict moves the search past the current rate, which held or not.
func (s *search) verdict(held bool) {
	s.holds, s.fails, s.excused = 0, 0, 0
	if held {
		s.held = s.rate
	} else {
		s.failed = s.rate
	}
	if held && s.failed == 0 { // still stepping up
		if s.rate *= s.factor; s.rate > s.limit {
			s.rate = 0
		}
		return
	}
	// the first failure, or a bisection's verdict: bisect again unless
	// nothing held or the bisections are used up
	if s.held == 0 || s.bisected >= s.bisect {
		s.rate = 0
		return
	}
	mid := math.Round(math.Sqrt(s.held * s.failed))
	if mid <= s.held || mid >= s.failed {
		s.rate = 0
		return
	}
	s.bisected++
	s.rate = mid
}

// heldTry is the last counted held try at the highest rate that held:
// what the machine's CPUs did at the path's max rate; nil when no rate
// held.
func (s *search) heldTry() *SearchTry {
	for i := len(s.tries) - 1; i >= 0; i-- {
		if t := &s.tries[i]; t.Used && t.Held && t.Rate == s.held {
			return t
		}
	}
	return nil
}

// interleave runs the searches in rounds until every one is over: in
// each round every search not over tries its current rate once, in
// order. try measures path i at rate; its Slot is set to the round.
func interleave(ctx context.Context, searches []*search, try func(i int, rate float64) SearchTry) {
	for round := 0; ctx.Err() == nil; round++ {
		tried := false
		for i, s := range searches {
			if s.done() || ctx.Err() != nil {
				continue
			}
			tried = true
			t := try(i, s.rate)
			t.Rate, t.Slot = s.rate, round
			s.add(t)
		}
		if !tried {
			return
		}
	}
}
