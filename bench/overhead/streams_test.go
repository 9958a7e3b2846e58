package overhead

import "testing"

// A run's memory figure comes from the samples after the first
// collection that began with every stream open: before it the heap had
// not been to its goal with them, and a run read that early reads low.
func TestSteadySamplesFollowACollectionWithEveryStreamOpen(t *testing.T) {
	rt := func(gc float64) *goRuntime { return &goRuntime{GCCycles: gc} }
	for _, c := range []struct {
		name      string
		samples   []memSample
		wantFirst int // index of the first steady sample; -1: none
	}{
		{"a collection during the ramp does not count", []memSample{
			{open: 500, rt: rt(3)}, {open: 1000, rt: rt(4)}, {open: 1000, rt: rt(4)}, {open: 1000, rt: rt(5)}, {open: 1000, rt: rt(5)},
		}, 3},
		{"a client between two streams still counts as open", []memSample{
			{open: 995, rt: rt(7)}, {open: 997, rt: rt(8)},
		}, 1},
		{"no collection with every stream open", []memSample{
			{open: 1000, rt: rt(4)}, {open: 1000, rt: rt(4)}, {open: 1000, rt: rt(4)},
		}, -1},
		{"a failed scrape is passed over", []memSample{
			{open: 1000, rt: rt(4)}, {open: 1000}, {open: 1000, rt: rt(5)},
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
