package heapfloor

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
)

func TestPercentKeepsTheFloorAndNeverGoesBelowTheBase(t *testing.T) {
	const mb = 1 << 20
	for _, c := range []struct {
		name              string
		live, floor       uint64
		base, wantPercent int
	}{
		// Goal at 425 %: max(1 MiB × 5.25, 4 MiB × 4.25) = 17 MiB.
		{"small live heap: Go's scaled minimum heap decides", 1 * mb, 16 * mb, 100, 425},
		// Goal at 200 %: max(8 MiB × 3, 4 MiB × 2) = 24 MiB.
		{"larger live heap: its growth decides", 8 * mb, 16 * mb, 100, 200},
		{"live heap past floor/base: the base decides", 50 * mb, 16 * mb, 100, 100},
		{"a higher base is kept", 1 * mb, 2 * mb, 400, 400},
		{"GOGC=off stays off", 1 * mb, 16 * mb, -1, -1},
		{"no measurement yet", 0, 16 * mb, 100, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Percent(Heap{Live: c.live, AllocRate: 1 << 30}, c.floor, c.base)
			if got != c.wantPercent {
				t.Fatalf("Percent(%d, %d, %d) = %d, want %d", c.live, c.floor, c.base, got, c.wantPercent)
			}
			// The goal the runtime derives from it never passes live + floor.
			p := uint64(got)
			if goal := max(c.live*(100+p)/100, goMinimum*p/100); got > c.base && goal > c.live+c.floor {
				t.Fatalf("percent %d gives a goal of %d bytes, past live + floor %d", got, goal, c.live+c.floor)
			}
		})
	}
}

// Many open streams: a live heap past the floor that allocates slowly.
// Go's pacing would let it grow to twice the live heap plus the stacks,
// and the router keeps that peak resident; it grows by spacing's
// allocation instead, or Go's minimum heap when that is more. A heap that
// allocates fast keeps Go's pacing.
func TestABigSlowHeapGrowsByTheFloorOrItsAllocationNotByGOGC(t *testing.T) {
	const mb = 1 << 20
	for _, c := range []struct {
		name     string
		h        Heap
		wantGrow uint64 // the goal's growth over the live heap; 0: Go's pacing
	}{
		{"1000 open streams allocating 1.3 MB/s: four seconds of it",
			Heap{Live: 13 * mb, Stacks: 2500 << 10, Globals: 500 << 10, AllocRate: 1.3 * mb}, 52 * mb / 10},
		{"1000 open streams allocating 0.5 MB/s: Go's minimum heap",
			Heap{Live: 13 * mb, Stacks: 2500 << 10, Globals: 500 << 10, AllocRate: 0.5 * mb}, goMinimum},
		{"3000 open streams allocating 4 MB/s: four seconds of it",
			Heap{Live: 40 * mb, Stacks: 7500 << 10, Globals: 500 << 10, AllocRate: 4 * mb}, 16 * mb},
		{"a big heap allocating fast: Go's pacing",
			Heap{Live: 13 * mb, Stacks: 2500 << 10, Globals: 500 << 10, AllocRate: 100 * mb}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			const floor, base = 8 * mb, 100
			got := Percent(c.h, floor, base)
			if c.wantGrow == 0 {
				if got != base {
					t.Fatalf("percent %d, want the base %d", got, base)
				}
				return
			}
			scanned := c.h.Live + c.h.Stacks + c.h.Globals
			grow := scanned * uint64(got) / 100 // the runtime's goal less the live heap
			if grow > c.wantGrow || grow < c.wantGrow-scanned/100 {
				t.Fatalf("percent %d grows the heap by %.2f MiB, want %.2f MiB (Go's pacing: %.2f MiB)",
					got, float64(grow)/mb, float64(c.wantGrow)/mb, float64(scanned)/mb)
			}
		})
	}
}

// The allocation rate that decides between the floor and Go's pacing is
// smoothed over about spacing: one short cycle of fast allocation (a
// thousand streams opening together) leaves a slow big heap on the
// floor; allocation that stays fast gets Go's pacing within a few cycles.
func TestABurstOfAllocationDoesNotGiveASlowHeapGosPacing(t *testing.T) {
	const mb = 1 << 20
	start := time.Unix(1000, 0)
	k := &keeper{floor: 8 * mb, base: 100, current: 100, at: start}
	h := Heap{Live: 13 * mb, Stacks: 2500 << 10, Globals: 500 << 10}
	var allocs uint64
	at := start
	cycle := func(d time.Duration, rate uint64) int {
		at = at.Add(d)
		allocs += rate * uint64(d/time.Millisecond) / 1000
		p, _ := k.next(h, allocs, at)
		return p
	}
	// Ten seconds at 1 MB/s: four seconds of it, a percent under 100.
	if p := cycle(10*time.Second, mb); p >= 100 {
		t.Fatalf("a slow big heap got percent %d, want one under 100", p)
	}
	// One 1.5 s cycle at 5 MB/s: four seconds of it (20 MB) is past GOGC's
	// 13 MB, but the smoothed rate is not.
	if p := cycle(1500*time.Millisecond, 5*mb); p == 100 {
		t.Fatalf("one short burst gave the heap Go's pacing (percent %d)", p)
	}
	// The same rate for a few more cycles is fast allocation.
	var p int
	for range 4 {
		p = cycle(1500*time.Millisecond, 5*mb)
	}
	if p != 100 {
		t.Fatalf("sustained fast allocation kept percent %d, want Go's 100", p)
	}
}

func TestAPercentMovesOnBigChangesAndAlwaysBackToTheBase(t *testing.T) {
	for _, c := range []struct {
		name         string
		cur, p, base int
		want         bool
	}{
		{"a small move is ignored", 400, 420, 100, false},
		{"a big move is taken", 400, 300, 100, true},
		{"back to the base from just above it", 110, 100, 100, true},
		{"no move", 100, 100, 100, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := moved(c.cur, c.p, c.base); got != c.want {
				t.Fatalf("moved(%d, %d, %d) = %v, want %v", c.cur, c.p, c.base, got, c.want)
			}
		})
	}
}

func TestKeepRaisesThePercentAfterACollectionAndStopRestoresIt(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)
	// A floor far above this test's live heap: the percent must rise.
	stop := Keep(1<<30, 100)
	testwait.For(t, 10*time.Second, "a percent above the base after collections", func() bool {
		runtime.GC()
		return Base() > 100
	})
	stop()
	if got := Base(); got != 100 {
		t.Fatalf("after stop the GC percent is %d, want the base 100", got)
	}
}

func TestBaseReportsOffAndKeepLeavesItOff(t *testing.T) {
	base := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(base)
	if got := Base(); got != -1 {
		t.Fatalf("Base with collection off = %d, want -1", got)
	}
	stop := Keep(1<<30, Base())
	runtime.GC()
	stop()
	if got := Base(); got != -1 {
		t.Fatalf("Keep turned collection back on: percent %d", got)
	}
}
