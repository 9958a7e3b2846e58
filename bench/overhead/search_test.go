package overhead

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
)

// searchWith runs one path's search with sustained as every try's
// verdict, undisturbed, and returns the highest rate that held, the
// lowest that failed above it, and how many tries it took.
func searchWith(start, factor, limit float64, bisect int, sustained func(rate float64) bool) (held, failed float64, tries int) {
	s := newSearch(start, factor, limit, bisect)
	interleave(context.Background(), []*search{s}, func(_ int, rate float64) SearchTry {
		return SearchTry{Held: sustained(rate)}
	})
	return s.maxRate(), s.failRate(), len(s.tries)
}

// The search steps ×factor until a rate fails, then bisects: for any
// rate where the path stops holding, the answer is below it and the
// failed rate above it, within one step of the grid, 1.5^(1/4) after two
// bisections and 1.5^(1/16) after four. A rate that fails is tried twice
// (it fails at its second counted failure).
func TestSearchBisectsToItsBound(t *testing.T) {
	for _, bisect := range []int{2, 4} {
		// The bound allows for the rounding to whole rates; 14416 is the
		// last ×1.5 step under the 20000 limit.
		for limit := 260.0; limit < 14000; limit *= 1.037 {
			held, failed, tries := searchWith(250, 1.5, 20000, bisect, func(rate float64) bool { return rate < limit })
			if bound := resolution(1.5, bisect) * (1 + 1/held); held >= limit || failed < limit || failed/held > bound {
				t.Fatalf("bisect %d, limit %.0f: held %.0f, failed %.0f (ratio %.3f > %.3f)", bisect, limit, held, failed, failed/held, bound)
			}
			// the steps that held, the first that failed (twice), the
			// bisections (twice when they fail)
			if want := int(math.Floor(math.Log(limit/250)/math.Log(1.5))) + 1 + 2 + 2*bisect; tries > want {
				t.Errorf("bisect %d, limit %.0f: %d tries, want at most %d", bisect, limit, tries, want)
			}
		}
	}
	if held, failed, _ := searchWith(250, 1.5, 1000, 2, func(float64) bool { return true }); held != 844 || failed != 0 {
		t.Errorf("every step holding: held %v, failed %v; want 844 and none failed", held, failed)
	}
	if held, failed, _ := searchWith(250, 1.5, 20000, 0, func(r float64) bool { return r < 1000 }); held != 844 || failed != 1266 {
		t.Errorf("no bisection: held %v, failed %v; want the ×1.5 steps around 1000", held, failed)
	}
	if held, failed, tries := searchWith(2, 2, 1, 2, func(float64) bool { return true }); held != 0 || failed != 0 || tries != 0 {
		t.Errorf("start above the limit: held %v, failed %v, %d tries; want nothing tried", held, failed, tries)
	}
}

// A start above where the path stops holding steps down ×1/factor until
// a rate holds, then bisects as from below: the default start (2848)
// finds a 700/s path as the old start (250) did, and a path that holds
// nothing ends with no rate rather than trying forever.
func TestSearchStepsDownFromAStartThatFails(t *testing.T) {
	up, upFailed, _ := searchWith(250, 1.5, 20000, 4, func(r float64) bool { return r < 700 })
	down, downFailed, tries := searchWith(2848, 1.5, 20000, 4, func(r float64) bool { return r < 700 })
	if down >= 700 || downFailed < 700 || downFailed/down > resolution(1.5, 4)+0.002 {
		t.Fatalf("from 2848: held %v, failed %v", down, downFailed)
	}
	// 2848/1.5^6 is 250: the same grid whichever end the search came from
	if math.Abs(down-up) > 1 || math.Abs(downFailed-upFailed) > 1 {
		t.Errorf("from 2848: %v-%v; from 250: %v-%v", down, downFailed, up, upFailed)
	}
	// 2848, 1899, 1266, 844 fail (twice each), 563 holds, four bisections
	if want := 4*2 + 1 + 4*2; tries > want {
		t.Errorf("%d tries from 2848, want at most %d", tries, want)
	}
	if held, failed, tries := searchWith(2848, 1.5, 20000, 4, func(float64) bool { return false }); held != 0 || failed != 1 || tries != 2*20 {
		t.Errorf("nothing holding: held %v, failed %v in %d tries; want 0, the lowest step (1/s), in %d", held, failed, tries, 2*20)
	}
}

// Every path's rates are on one grid, so two paths with the same
// capacity report the same max rate whatever they met on the way, and
// of two paths whose capacities differ by more than one step of it the
// stronger reports the higher rate: with verdicts that repeat, the
// comparison of two paths repeats too. With two bisections instead of
// four, capacities 6 % apart tie.
func TestSearchGridComparesPaths(t *testing.T) {
	for _, cap1 := range []float64{3000, 5200, 7800, 9100, 12000} {
		same1, _, _ := searchWith(2848, 1.5, 20000, 4, func(r float64) bool { return r < cap1 })
		// the other path fails one step early on the way (a stall) and is
		// otherwise the same: it lands on the same grid point
		stalled := false
		same2, _, _ := searchWith(2848, 1.5, 20000, 4, func(r float64) bool {
			if r > 4000 && !stalled {
				stalled = true
				return false
			}
			return r < cap1
		})
		if same1 != same2 {
			t.Errorf("capacity %v: %v and %v for the same capacity", cap1, same1, same2)
		}
		for _, apart := range []float64{1.03, 1.06, 1.12} {
			lower, _, _ := searchWith(2848, 1.5, 20000, 4, func(r float64) bool { return r < cap1/apart })
			if lower >= same1 {
				t.Errorf("capacity %v against %v: max rates %v and %v, the weaker not below", cap1/apart, cap1, lower, same1)
			}
		}
	}
	coarse1, _, _ := searchWith(2848, 1.5, 20000, 2, func(r float64) bool { return r < 8600 })
	coarse2, _, _ := searchWith(2848, 1.5, 20000, 2, func(r float64) bool { return r < 8600/1.06 })
	if coarse1 != coarse2 {
		t.Errorf("two bisections: 8600 and 8113 read %v and %v, want the same grid point", coarse1, coarse2)
	}
}

// A rate holds when more of its counted tries held than failed, and
// fails at its second counted failure: one stall is outvoted, two in
// three are not. A failed try in a disturbed window is not counted, up
// to maxExcused per rate; a disturbed try that held counts.
func TestRateVerdictFromItsTries(t *testing.T) {
	type try struct{ held, disturbed bool }
	h, f, fd, hd := try{true, false}, try{false, false}, try{false, true}, try{true, true}
	for _, tc := range []struct {
		tries []try
		holds bool
		used  []bool
	}{
		{[]try{h}, true, []bool{true}},
		{[]try{f, h, h}, true, []bool{true, true, true}},
		{[]try{f, h, f}, false, []bool{true, true, true}},
		{[]try{f, f}, false, []bool{true, true}},
		{[]try{hd}, true, []bool{true}},
		// a disturbed failure is set aside: two of them, then a hold
		{[]try{fd, fd, h}, true, []bool{false, false, true}},
		// past maxExcused a disturbed failure counts
		{[]try{fd, fd, fd, fd}, false, []bool{false, false, true, true}},
		{[]try{f, fd, h, h}, true, []bool{true, false, true, true}},
	} {
		name := fmt.Sprint(tc.tries)
		// one rate, 100, with no step above it (limit) and no bisection:
		// its verdict is in when the search holds it or has failed it (and
		// steps down)
		s := newSearch(100, 2, 100, 0)
		verdict := func() bool { return s.maxRate() == 100 || s.failRate() == 100 }
		for i, tr := range tc.tries {
			if verdict() {
				t.Fatalf("%s: a verdict after %d tries", name, i)
			}
			s.add(SearchTry{Rate: 100, Held: tr.held, WindowRun: WindowRun{Disturbed: tr.disturbed}})
		}
		if !verdict() {
			t.Fatalf("%s: no verdict after every try", name)
		}
		if got := s.maxRate() == 100; got != tc.holds {
			t.Errorf("%s: holds %v, want %v", name, got, tc.holds)
		}
		var used []bool
		for _, tr := range s.tries {
			used = append(used, tr.Used)
		}
		if !slices.Equal(used, tc.used) {
			t.Errorf("%s: counted %v, want %v", name, used, tc.used)
		}
	}
}

// The paths' searches go in rounds: each round tries every path whose
// search is not over once, the order rotating (round r starts with path
// r mod 3), so while they step up together every path is tried at the
// same rate in the same round and none is always first; a path whose
// search is over drops out and the others go on.
func TestSearchesInterleaveAcrossPaths(t *testing.T) {
	limits := []float64{1000, 400, 1000} // where each path stops holding
	searches := []*search{newSearch(100, 2, 20000, 1), newSearch(100, 2, 20000, 1), newSearch(100, 2, 20000, 1)}
	type call struct {
		path int
		rate float64
	}
	var calls []call
	interleave(context.Background(), searches, func(i int, rate float64) SearchTry {
		calls = append(calls, call{i, rate})
		return SearchTry{Held: rate < limits[i]}
	})
	want := []call{
		{0, 100}, {1, 100}, {2, 100},
		{1, 200}, {2, 200}, {0, 200},
		{2, 400}, {0, 400}, {1, 400}, // path 1 fails 400 once
		{0, 800}, {1, 400}, {2, 800}, // and again: it bisects to 283
		{1, 283}, {2, 1600}, {0, 1600}, // 283 holds: path 1 is over
		{2, 1600}, {0, 1600}, // 1600 fails twice on 0 and 2
		{0, 1131}, {2, 1131}, // their bisection fails twice
		{2, 1131}, {0, 1131},
	}
	if !slices.Equal(calls, want) {
		t.Errorf("tries %v\nwant     %v", calls, want)
	}
	for i, s := range searches {
		if !s.done() {
			t.Errorf("path %d not over", i)
		}
		for _, tr := range s.tries {
			if tr.Slot > len(want)/len(searches)+1 {
				t.Errorf("path %d: a try in round %d", i, tr.Slot)
			}
		}
	}
	if searches[0].maxRate() != 800 || searches[1].maxRate() != 283 || searches[2].failRate() != 1131 {
		t.Errorf("held %v, %v; path 2 failed at %v", searches[0].maxRate(), searches[1].maxRate(), searches[2].failRate())
	}
	// The rounds are numbered: path 1's 283 was its fifth try, in round 4.
	if tr := searches[1].tries[4]; tr.Rate != 283 || tr.Slot != 4 {
		t.Errorf("path 1's fifth try: rate %v round %d", tr.Rate, tr.Slot)
	}
	// What the CPUs did at the max rate is the held try's.
	if ht := searches[1].heldTry(); ht == nil || ht.Rate != 283 {
		t.Errorf("path 1's held try at its max rate: %+v", ht)
	}
}
