package overhead

import (
	"context"
	"math"
)

// The max-rate search. Every path's rates lie on one grid: start ×
// factor^(p/2^bisect) for whole p, rounded to a whole rate, so two paths
// whose searches end at the same p report the same rate and equal
// capacity reads equal. A search steps ×factor (p moves by 2^bisect) up
// from start while the rate holds, or down from it while it fails, until
// it has a rate that held below one that failed; then it bisects that
// bracket bisect times, each time at the grid point in its middle (the
// geometric middle), so with the default ×1.5 and four bisections the
// answer is within 1.5^(1/16), 2.6 %, of the rate where the path stops
// holding: the search's resolution.
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
// path whose search is not over has one try of its current rate, the
// order rotating between rounds as the fixed-rate windows' does
// (rotation), so a change in what the machine's neighbours do, lasting
// longer than a round, falls on every path alike instead of on the one
// path searched while it lasted.

// maxExcused is how many disturbed failed tries per rate are not counted.
const maxExcused = 2

// minRate is the lowest rate a search steps down to: below it the path
// held nothing, and its max rate is 0.
const minRate = 1

// SearchTry is one try of the max-rate search: a window at Rate, what it
// measured (WindowRun: Slot is the round of the interleaved search, Used
// says whether the try counted towards its rate's verdict) and whether
// p99 and errors held under the limit.
type SearchTry struct {
	WindowRun
	Rate float64 `json:"rate"`
	Held bool    `json:"held"`
}

// grid is the search's rates: start × factor^(p/fine) for whole p, fine
// = 2^bisect.
type grid struct {
	start, factor float64
	fine          int
}

// resolution is how far apart, as a ratio, a search with this factor
// and bisect bisections leaves the highest rate that held and the lowest
// that failed: one step of its grid.
func resolution(factor float64, bisect int) float64 {
	return math.Pow(factor, 1/float64(int(1)<<bisect))
}

// rate is the grid's rate at p, rounded to whole requests per second.
func (g grid) rate(p int) float64 { return math.Round(g.exact(p)) }

func (g grid) exact(p int) float64 {
	return g.start * math.Pow(g.factor, float64(p)/float64(g.fine))
}

// search is one path's max-rate search.
type search struct {
	grid
	limit float64
	// the grid positions of the highest rate that held and the lowest
	// that failed above it, and whether there is one yet
	held, failed       int
	hasHeld, hasFailed bool
	pos                int  // the position being tried
	over               bool // the search is done
	// the current rate's counted held and failed tries, and its excused
	// failures
	holds, fails, excused int
	tries                 []SearchTry // every try, in order
}

func newSearch(start, factor, limit float64, bisect int) *search {
	s := &search{grid: grid{start: start, factor: factor, fine: 1 << bisect}, limit: limit}
	s.over = s.rate(0) > limit || s.exact(0) < minRate
	return s
}

// done reports whether the search is over.
func (s *search) done() bool { return s.over }

// current is the rate being tried.
func (s *search) current() float64 { return s.rate(s.pos) }

// maxRate is the highest rate that held, 0 when none did.
func (s *search) maxRate() float64 {
	if !s.hasHeld {
		return 0
	}
	return s.rate(s.held)
}

// failRate is the lowest rate that failed above maxRate, 0 when none did.
func (s *search) failRate() float64 {
	if !s.hasFailed {
		return 0
	}
	return s.rate(s.failed)
}

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
		s.held, s.hasHeld = s.pos, true
	} else {
		s.failed, s.hasFailed = s.pos, true
	}
	switch {
	case held && !s.hasFailed: // still stepping up
		s.pos += s.fine
		s.over = s.current() > s.limit
	case !held && !s.hasHeld: // still stepping down
		s.pos -= s.fine
		s.over = s.exact(s.pos) < minRate
	default: // bisecting, until the bracket is one grid step (or rounds to none)
		s.pos = s.held + (s.failed-s.held)/2
		s.over = s.pos == s.held || s.current() <= s.maxRate() || s.current() >= s.failRate()
	}
}

// heldTry is the last counted held try at the highest rate that held:
// what the machine's CPUs did at the path's max rate; nil when no rate
// held.
func (s *search) heldTry() *SearchTry {
	top := s.maxRate()
	for i := len(s.tries) - 1; i >= 0; i-- {
		if t := &s.tries[i]; t.Used && t.Held && t.Rate == top && top > 0 {
			return t
		}
	}
	return nil
}

// interleave runs the searches in rounds until every one is over: in
// each round every search not over tries its current rate once, in the
// round's rotation. try measures path i at rate; its Slot is set to the round.
func interleave(ctx context.Context, searches []*search, try func(i int, rate float64) SearchTry) {
	for round := 0; ctx.Err() == nil; round++ {
		tried := false
		for _, i := range rotation(round, len(searches)) {
			s := searches[i]
			if s.done() || ctx.Err() != nil {
				continue
			}
			tried = true
			rate := s.current()
			t := try(i, rate)
			t.Rate, t.Slot = rate, round
			s.add(t)
		}
		if !tried {
			return
		}
	}
}
