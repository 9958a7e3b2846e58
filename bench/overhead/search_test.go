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
	return s.held, s.failed, len(s.tries)
}

// The search steps ×factor until a rate fails, then bisects: for any
// rate where the path stops holding, the answer is below it and the
// failed rate above it, within 1.5^(1/4) after two bisections. A rate
// that fails is tried twice (it fails at its second counted failure).
func TestSearchBisectsToItsBound(t *testing.T) {
	// The bound allows for the rounding to whole rates; 14416 is the last
	// ×1.5 step under the 20000 limit.
	bound := math.Pow(1.5, 0.25) + 0.002
	for limit := 260.0; limit < 14000; limit *= 1.037 {
		held, failed, tries := searchWith(250, 1.5, 20000, 2, func(rate float64) bool { return rate < limit })
		if held >= limit || failed < limit || failed/held > bound {
			t.Fatalf("limit %.0f: held %.0f, failed %.0f (ratio %.3f > %.3f)", limit, held, failed, failed/held, bound)
		}
		// the steps that held, the first that failed (twice), two
		// bisections (twice when they fail)
		if want := int(math.Floor(math.Log(limit/250)/math.Log(1.5))) + 1 + 2 + 2*2; tries > want {
			t.Errorf("limit %.0f: %d tries, want at most %d", limit, tries, want)
		}
	}
	if held, failed, tries := searchWith(250, 1.5, 20000, 2, func(float64) bool { return false }); held != 0 || failed != 250 || tries != 2 {
		t.Errorf("first step failing: held %v, failed %v in %d tries; want 0, 250 in 2 and no bisection below the start", held, failed, tries)
	}
	if held, failed, _ := searchWith(250, 1.5, 1000, 2, func(float64) bool { return true }); held != 843.75 || failed != 0 {
		t.Errorf("every step holding: held %v, failed %v; want 843.75 and none failed", held, failed)
	}
	if held, failed, _ := searchWith(250, 1.5, 20000, 0, func(r float64) bool { return r < 1000 }); held != 843.75 || failed != 1265.625 {
		t.Errorf("no bisection: held %v, failed %v; want the ×1.5 steps around 1000", held, failed)
	}
	if held, failed, tries := searchWith(2, 2, 1, 2, func(float64) bool { return true }); held != 0 || failed != 0 || tries != 0 {
		t.Errorf("start above the limit: held %v, failed %v, %d tries; want nothing tried", held, failed, tries)
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
		// the search is over when its verdict is in
		s := newSearch(100, 2, 100, 0)
		for i, tr := range tc.tries {
			if s.done() {
				t.Fatalf("%s: over after %d tries", name, i)
			}
			s.add(SearchTry{Rate: 100, Held: tr.held, WindowRun: WindowRun{Disturbed: tr.disturbed}})
		}
		if !s.done() {
			t.Fatalf("%s: no verdict after every try", name)
		}
		if got := s.held == 100; got != tc.holds {
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
// search is not over once, in column order, so while they step up
// together every path is tried at the same rate in the same round; a
// path whose search is over drops out and the others go on.
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
		{0, 200}, {1, 200}, {2, 200},
		{0, 400}, {1, 400}, {2, 400}, // path 1 fails 400 once
		{0, 800}, {1, 400}, {2, 800}, // and again: it bisects to 283
		{0, 1600}, {1, 283}, {2, 1600}, // 283 holds: path 1 is over
		{0, 1600}, {2, 1600}, // 1600 fails twice on 0 and 2
		{0, 1131}, {2, 1131}, // their bisection fails twice
		{0, 1131}, {2, 1131},
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
	if searches[0].held != 800 || searches[1].held != 283 || searches[2].failed != 1131 {
		t.Errorf("held %v, %v; path 2 failed at %v", searches[0].held, searches[1].held, searches[2].failed)
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
