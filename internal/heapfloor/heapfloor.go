// Package heapfloor owns the router's garbage-collector pacing: a floor
// under the heap growth that starts the next collection.
//
// Go starts a collection when the heap has grown by GOGC percent of the
// heap live after the last one, but never below a 4 MB heap. A router
// routing short requests holds about 1 MB live and allocates several KB
// per request, so at GOGC 100 it collects every few hundred requests,
// and the collector is a tenth or more of its instructions per request
// (BENCHMARKS.md §2, "Garbage collection"). Raising GOGC would collect
// less often but multiply the heap of a router holding many open
// streams, whose live heap is tens of MB.
// A floor does neither: after every collection, Keep sets the GC percent
// so the next collection starts once the heap has grown by at least the
// floor, and leaves the base percent alone once the live heap is big
// enough that the base percent already grows it by more. The heap of a
// busy router then costs at most the floor more than Go's pacing would
// give it, and the heap of a router with a big live set costs nothing
// more.
package heapfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// goMinimum is Go's minimum heap goal at GOGC 100; the runtime scales it
// by the GC percent (runtime/mgcpacer.go, heapMinimum).
const goMinimum = 4 << 20

// Percent is the GC percent that makes a heap of live bytes grow by
// floor bytes before the next collection, and never less than base (a
// percent of 0 or less is returned as it is: off stays off). The goal a
// percent p gives is the larger of live × (1 + p/100) and Go's minimum
// heap scaled by p/100, so the percent is the lower of the two that
// reach live + floor.
func Percent(live, floor uint64, base int) int {
	if base <= 0 || live == 0 {
		return base
	}
	target := float64(live + floor)
	p := math.Floor(min(float64(floor)*100/float64(live), target*100/goMinimum))
	if p <= float64(base) {
		return base
	}
	return int(p)
}

// moved reports whether a newly computed percent p replaces the percent
// cur in force. Moves under an eighth of cur do not reset the pacer; a
// return to base always does, or a percent a little above it would stay
// for good once the live heap outgrew the floor.
func moved(cur, p, base int) bool {
	return p != cur && (p == base || p > cur+cur/8 || p < cur-cur/8)
}

// keeper re-arms itself on every collection: its sentinel becomes
// unreachable, the cleanup runs after the collection and adjusts the
// percent for the live heap the collection measured.
type keeper struct {
	floor uint64
	base  int

	mu      sync.Mutex // orders collected and stop
	stopped bool
	current int // the percent set last
	sample  [1]metrics.Sample
}

// sentinel is a heap object each cycle's cleanup hangs on; 16 bytes, so
// the tiny allocator does not share its block with other objects that
// would keep it alive.
type sentinel [16]byte

// Base is the GC percent GOGC (or debug.SetGCPercent) set, 100 by
// default; -1 when collection is off.
func Base() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 || s[0].Value.Uint64() > math.MaxInt32 {
		return -1
	}
	return int(s[0].Value.Uint64())
}

// Keep starts keeping a floor of floor bytes under GC percent base (Base
// gives GOGC's). The first adjustment follows the next collection; with
// collection off (base <= 0) there is nothing to keep. stop ends it and
// restores base.
func Keep(floor uint64, base int) (stop func()) {
	if base <= 0 || floor == 0 {
		return func() {}
	}
	k := &keeper{floor: floor, base: base, current: base}
	k.sample[0].Name = "/gc/heap/live:bytes"
	k.arm()
	return func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		if !k.stopped {
			k.stopped = true
			debug.SetGCPercent(base)
		}
	}
}

func (k *keeper) arm() {
	runtime.AddCleanup(new(sentinel), (*keeper).collected, k)
}

// collected runs after a collection (in the runtime's cleanup
// goroutine, one at a time).
func (k *keeper) collected() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return
	}
	metrics.Read(k.sample[:])
	if k.sample[0].Value.Kind() == metrics.KindUint64 {
		p := Percent(k.sample[0].Value.Uint64(), k.floor, k.base)
		if moved(k.current, p, k.base) {
			k.current = p
			debug.SetGCPercent(p)
		}
	}
	k.arm()
}
