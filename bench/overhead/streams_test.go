package overhead

import "testing"

// A run's memory figure comes from the samples after the first
// collection whose cycle began with every stream open: before it the heap
// had not been to the goal set with all of them, and a run read that
// early reads low.
func TestSteadySamplesFollowACollectionCycleWithEveryStreamOpen(t *testing.T) {
	rt := func(gc float64) *goRuntime { return &goRuntime{GCCycles: gc} }
	for _, c := range []struct {
		name      string
		samples   []memSample
		wantFirst int // index of the first steady sample; -1: none
	}{
		{"collections during the ramp and right after it do not count", []memSample{
			{open: 500, rt: rt(3)}, {open: 1000, rt: rt(4)}, {open: 1000, rt: rt(5)}, {open: 1000, rt: rt(5)},
			{open: 1000, rt: rt(6)}, {open: 1000, rt: rt(6)},
		}, 4},
		{"a client between two streams still counts as open", []memSample{
			{open: 995, rt: rt(7)}, {open: 997, rt: rt(9)},
		}, 1},
		{"one collection with every stream open is not enough", []memSample{
			{open: 1000, rt: rt(4)}, {open: 1000, rt: rt(5)}, {open: 1000, rt: rt(5)},
		}, -1},
		{"a failed scrape is passed over", []memSample{
			{open: 1000, rt: rt(4)}, {open: 1000}, {open: 1000, rt: rt(6)},
		}, 2},
		{"a proxy without runtime figures: every sample", []memSample{
			{open: 1000}, {open: 1000},
		}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := steadySamples(c.samples, 1000)
			if c.wantFirst < 0 {
				if ok || len(got) != 0 {
					t.Fatalf("steady %v (%d samples), want none", ok, len(got))
				}
				return
			}
			if !ok || len(got) != len(c.samples)-c.wantFirst || &got[0] != &c.samples[c.wantFirst] {
				t.Fatalf("steady %v with %d samples, want the %d from sample %d", ok, len(got), len(c.samples)-c.wantFirst, c.wantFirst)
			}
		})
	}
}
