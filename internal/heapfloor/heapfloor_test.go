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
			got := Percent(c.live, c.floor, c.base)
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
