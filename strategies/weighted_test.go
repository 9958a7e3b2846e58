package strategies

import (
	"fmt"
	"math"
	"testing"
)

func weightedTargets(ws ...int) []Target {
	ts := targets(len(ws))
	for i, w := range ws {
		ts[i].Weight = w
	}
	return ts
}

func TestWeightedSequence(t *testing.T) {
	tests := []struct {
		weights []int
		want    string
	}{
		{[]int{3, 1}, "0 0 1 0 0 0 1 0"},
		{[]int{5, 1, 1}, "0 0 1 0 2 0 0 0 0 1 0 2 0 0"},
		{[]int{1, 1, 1}, "0 1 2 0 1 2"},
		{[]int{0, 2}, "1 0 1 1 0 1"}, // weight 0 counts as 1
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.weights), func(t *testing.T) {
			lb := mustBuild(t, "weighted", Spec{Targets: weightedTargets(tc.weights...)})
			got := ""
			for k := 0; k < len(tc.want); k += 2 {
				if k > 0 {
					got += " "
				}
				got += fmt.Sprint(pickOK(t, lb, nil, nil, nil))
			}
			if got != tc.want {
				t.Errorf("sequence = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestWeightedExactSharesAndInterleaving(t *testing.T) {
	for _, ws := range [][]int{{3, 1}, {5, 3, 2}, {1, 7, 1, 4}, {100, 1}} {
		t.Run(fmt.Sprint(ws), func(t *testing.T) {
			lb := mustBuild(t, "weighted", Spec{Targets: weightedTargets(ws...)})
			total := 0
			for _, w := range ws {
				total += w
			}
			const periods = 50
			counts := make([]int, len(ws))
			run, maxRun := 0, 0
			prev := -1
			for k := 0; k < periods*total; k++ {
				i := pickOK(t, lb, nil, nil, nil)
				counts[i]++
				if i == prev {
					run++
				} else {
					run = 1
				}
				prev = i
				if i == 0 {
					maxRun = max(maxRun, run)
				}
				// Smoothness: after any prefix, every target's count is
				// within one of its exact share.
				for j, w := range ws {
					exact := float64(w) * float64(k+1) / float64(total)
					if math.Abs(float64(counts[j])-exact) >= 1+1e-9 {
						t.Fatalf("after %d picks target %d has %d, exact share %.2f", k+1, j, counts[j], exact)
					}
				}
			}
			for j, w := range ws {
				if counts[j] != periods*w {
					t.Errorf("target %d: %d picks, want exactly %d", j, counts[j], periods*w)
				}
			}
			// The heaviest target never runs longer than its weight ratio
			// implies (3:1 runs at most 3, never a batch of all of them in
			// a row followed by the other).
			if ws[0] == 3 && ws[1] == 1 && maxRun > 3 {
				t.Errorf("3:1 produced a run of %d", maxRun)
			}
		})
	}
}

func TestWeightedIneligibleShareIsProportional(t *testing.T) {
	// Weights 3:1:1; target 2 parked. The survivors split 3:1.
	lb := mustBuild(t, "weighted", Spec{Targets: weightedTargets(3, 1, 1)})
	counts := make([]int, 3)
	for range 5000 {
		counts[pickOK(t, lb, nil, nil, only(0, 1))]++
	}
	if counts[2] != 0 {
		t.Fatalf("ineligible target picked %d times", counts[2])
	}
	if got := float64(counts[0]) / 5000; math.Abs(got-0.75) > 0.01 {
		t.Errorf("target 0 share = %.3f, want 0.75", got)
	}
}
