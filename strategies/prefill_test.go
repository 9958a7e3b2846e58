package strategies

import "testing"

// TestPreciseCacheAwareQueuedPrefill checks that precise_cache_aware
// picks the least prefill wait when the router supplies queued prefill
// tokens: two requests queued are not equal to two requests queued when
// one set is 30 k-token prompts, and a resident prefix is worth exactly
// the prefill it saves.
func TestPreciseCacheAwareQueuedPrefill(t *testing.T) {
	keys := keysN(10, 7)
	idx := newResidencyIndex(3)
	idx.add(2, keys...) // target 2 holds the whole prompt
	tests := []struct {
		name   string
		keys   []uint64
		loads  []uint64
		queued []uint64
		el     Eligible
		want   int
	}{
		{"cold prompt: fewer queued tokens beats fewer queued requests", nil,
			[]uint64{1, 4, 0}, []uint64{30000, 4000, 0}, only(0, 1), 1},
		{"no signal: request counts decide as before", nil,
			[]uint64{1, 4, 0}, nil, only(0, 1), 0},
		{"short signal is ignored", nil,
			[]uint64{1, 4, 0}, []uint64{30000, 4000}, only(0, 1), 0},
		{"a resident prompt wins over a cold target with a short queue", keys,
			[]uint64{0, 0, 9}, []uint64{6000, 6000, 1000}, nil, 2},
		{"a long queue outweighs the prefix it holds", keys,
			[]uint64{0, 0, 9}, []uint64{0, 0, 90000}, only(0, 2), 0},
		{"among cold targets the emptier prefill queue wins", keys,
			[]uint64{0, 3, 9}, []uint64{8000, 200, 90000}, only(0, 1), 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lb := mustBuild(t, "precise_cache_aware", Spec{Targets: targets(3), Residency: idx, Rand: script()})
			rc := &RouteContext{BlockKeys: tc.keys, PromptTokens: 3000, QueuedPrefill: tc.queued}
			if got := pickOK(t, lb, rc, tc.loads, tc.el); got != tc.want {
				t.Errorf("pick = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestPrefillWaitSlack checks that targets within the tie margin of the
// least wait tie (so routers spread rather than herd) and that a target
// past it loses.
func TestPrefillWaitSlack(t *testing.T) {
	c := newCycle(3)
	c.Ctx = &RouteContext{PromptTokens: 1000, QueuedPrefill: []uint64{0, 1500, 5000}}
	out := make([]float64, 3)
	PrefillWait{Slack: 2048}.Score(c, []int{0, 1, 2}, out)
	if out[0] != 1 || out[1] != 1 {
		t.Errorf("targets within the slack score %v, want both 1", out[:2])
	}
	if out[2] >= 1 || out[2] <= 0 {
		t.Errorf("target past the slack scores %v, want in (0, 1)", out[2])
	}
	c.Ctx.QueuedPrefill = nil
	clear(out)
	PrefillWait{Slack: 2048}.Score(c, []int{0, 1, 2}, out)
	if out[0] != 0 || out[1] != 0 || out[2] != 0 {
		t.Errorf("without the signal the scorer scores %v, want neutral", out)
	}
}

// An adapter request keeps the residency-first stack even with the
// signal: its wait is for a batch slot, and its prefix (keyed with the
// adapter) marks where the adapter is loaded.
func TestPreciseCacheAwareAdapterKeepsResidency(t *testing.T) {
	keys := keysN(10, 9)
	idx := newResidencyIndex(2)
	idx.add(1, keys...)
	lb := mustBuild(t, "precise_cache_aware", Spec{Targets: targets(2), Residency: idx, Rand: script()})
	rc := &RouteContext{BlockKeys: keys, PromptTokens: 3000, QueuedPrefill: []uint64{0, 20000}, Adapter: "a1"}
	if got := pickOK(t, lb, rc, []uint64{0, 1}, nil); got != 1 {
		t.Errorf("adapter request picked %d, want 1 (holds its prefix, so its adapter)", got)
	}
	rc.Adapter = ""
	if got := pickOK(t, lb, rc, []uint64{0, 1}, nil); got != 0 {
		t.Errorf("base-model request picked %d, want 0 (20k queued outweighs 160 resident tokens)", got)
	}
}
