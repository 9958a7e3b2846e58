package strategies

import "testing"

// TestPreciseCacheAwareQueuedPrefill checks that precise_cache_aware
// measures load as queued prefill tokens when the router supplies them:
// two requests queued are not equal to two requests queued when one set is
// 30 k-token prompts, yet residency stays primary.
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
		{"residency stays primary over a long prefill queue", keys,
			[]uint64{0, 0, 9}, []uint64{0, 0, 90000}, nil, 2},
		{"among cold targets the emptier prefill queue wins", keys,
			[]uint64{0, 3, 9}, []uint64{8000, 200, 90000}, only(0, 1), 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lb := mustBuild(t, "precise_cache_aware", Spec{Targets: targets(3), Residency: idx, Rand: script()})
			rc := &RouteContext{BlockKeys: tc.keys, PromptTokens: 160, QueuedPrefill: tc.queued}
			if got := pickOK(t, lb, rc, tc.loads, tc.el); got != tc.want {
				t.Errorf("pick = %d, want %d", got, tc.want)
			}
		})
	}
}
