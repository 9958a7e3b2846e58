package strategies

import (
	"fmt"
	"math"
	"testing"
)

func TestConsistentHashKey(t *testing.T) {
	lb := mustBuild(t, "consistent_hash", Spec{Targets: targets(8)})
	a := &RouteContext{SessionKey: "user-42", PromptDigest: 1, Prompt: "x"}
	b := &RouteContext{SessionKey: "user-42", PromptDigest: 2, Prompt: "y"}
	if pickOK(t, lb, a, nil, nil) != pickOK(t, lb, b, nil, nil) {
		t.Error("same session key mapped to different targets")
	}
	c := &RouteContext{PromptDigest: 99, Prompt: "x"}
	d := &RouteContext{PromptDigest: 99, Prompt: "completely different"}
	if pickOK(t, lb, c, nil, nil) != pickOK(t, lb, d, nil, nil) {
		t.Error("same digest without session mapped to different targets")
	}
	if KeyHash(&RouteContext{Prompt: "abc"}) != Hash64("abc") {
		t.Error("raw prompt is not the last fallback key")
	}
	// The hash is a wire constant: FNV-1a 64 of "" is the offset basis.
	if got, want := Hash64(""), Mix64(14695981039346656037); got != want {
		t.Errorf("Hash64(\"\") = %#x, want %#x", got, want)
	}
}

func TestConsistentHashIneligibleMovesToNextPoint(t *testing.T) {
	lb := mustBuild(t, "consistent_hash", Spec{Targets: targets(5)})
	for k := range 2000 {
		ctx := &RouteContext{SessionKey: fmt.Sprint("s", k)}
		home := pickOK(t, lb, ctx, nil, nil)
		others := EligibleFunc(func(i int) bool { return i != home })
		alt := pickOK(t, lb, ctx, nil, others)
		if alt == home {
			t.Fatal("returned an ineligible target")
		}
		// Keys of other targets never move when home is excluded.
		other := &RouteContext{SessionKey: fmt.Sprint("o", k)}
		if h := pickOK(t, lb, other, nil, nil); h != home && pickOK(t, lb, other, nil, others) != h {
			t.Fatal("a key not on the excluded target moved")
		}
	}
}

func TestConsistentHashRemovalAndSpread(t *testing.T) {
	const keys = 100_000
	for _, n := range []int{4, 8, 16} {
		t.Run(fmt.Sprint(n, " targets"), func(t *testing.T) {
			full := mustBuild(t, "consistent_hash", Spec{Targets: targets(n)})
			removed := n / 2
			rest := append(append([]Target{}, targets(n)[:removed]...), targets(n)[removed+1:]...)
			less := mustBuild(t, "consistent_hash", Spec{Targets: rest})
			counts := make([]int, n)
			moved := 0
			for k := range keys {
				ctx := &RouteContext{SessionKey: fmt.Sprintf("session-%d", k)}
				a := pickOK(t, full, ctx, nil, nil)
				counts[a]++
				b := pickOK(t, less, ctx, nil, nil)
				if rest[b].ID != targets(n)[a].ID {
					moved++
					if a != removed {
						t.Fatalf("key %d moved from %s to %s though %s was not removed", k, targets(n)[a].ID, rest[b].ID, targets(n)[a].ID)
					}
				}
			}
			if limit := keys/n + keys*2/100; moved > limit {
				t.Errorf("%d keys moved, want ≤ %d", moved, limit)
			}
			fair := float64(keys) / float64(n)
			for i, c := range counts {
				if math.Abs(float64(c)-fair) > 0.10*fair {
					t.Errorf("target %d holds %d keys, fair share %.0f (±10%%)", i, c, fair)
				}
			}
		})
	}
}
