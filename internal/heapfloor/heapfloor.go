// Package heapfloor owns the router's garbage-collector pacing: a floor
// under the heap growth that starts the next collection, and a cap on it
// for a big live heap that allocates slowly.
//
// Go starts a collection when the heap has grown by GOGC percent of the
// heap live after the last one (plus GOGC percent of the goroutine stacks
// and globals it scanned), but never below a 4 MB heap. A router
// routing short requests holds about 1 MB live and allocates several KB
// per request, so at GOGC 100 it collects every few hundred requests,
// and the collector is a tenth or more of its instructions per request
// (BENCHMARKS.md §2, "Garbage collection"). Raising GOGC would collect
// less often but multiply the heap of a router holding many open
// streams, whose live heap is tens of MB.
// A floor does neither: after every collection, Keep sets the GC percent
// so the next collection starts once the heap has grown by at least the
// floor.
//
// Past the floor (a live heap of more than floor ÷ GOGC percent: many
// open streams) GOGC's growth would let the heap double, and the process
// keeps that peak resident. Open streams allocate little (about 1.3 MB/s
// at 1000 of them), so the router would collect every ten seconds or
// more. There the growth is cut to what the router allocates in spacing
// (4 s), never below Go's 4 MB minimum heap, and stacks and globals add
// nothing to it: at most one collection per spacing, for a heap that
// peaks at the live heap plus 4 s of allocation instead of twice the
// live heap plus the stacks. A router that allocates fast (short
// requests beside the streams) keeps GOGC's growth.
package heapfloor

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// goMinimum is Go's minimum heap goal at GOGC 100; the runtime scales it
// by the GC percent (runtime/mgcpacer.go, heapMinimum).
const goMinimum = 4 << 20

// spacing is the time whose allocation bounds the growth of a live heap
// past the floor: where GOGC's percent would wait longer than this
// between collections, the heap grows by what spacing allocates (but at
// least Go's minimum heap).
const spacing = 4 * time.Second

// Heap is what a collection measured: the live heap, the stack and global
// bytes the runtime adds to it when it sets the next goal, and the bytes
// allocated per second since the collection before.
type Heap struct {
	Live, Stacks, Globals uint64
	AllocRate             float64 // bytes per second
}

// Percent is the GC percent for the heap h after a collection, under a
// floor of floor bytes and GOGC's percent base (a percent of 0 or less is
// returned as it is: off stays off).
//
// While the base's growth of the live heap is at most the floor, the
// percent makes the heap grow by the floor: the goal a percent p gives is
// the larger of live × (1 + p/100) and Go's minimum heap scaled by p/100,
// so the percent is the lower of the two that reach live + floor (this
// part leaves the stacks out: they are small while the live heap is).
//
// Past it, when spacing's allocation is less than the base's growth, the
// heap grows by that allocation, but at least by Go's minimum heap (so it
// collects at most once per spacing), and the percent counts it against
// the live heap, the stacks and the globals together, as the runtime
// does (goal = live + (live + stacks + globals) × p/100); a heap that
// allocates faster gets the base (Go's pacing). The floor has no part
// there: it saves the collector's work under fast allocation, and a heap
// past it that allocates fast has the base's growth, more than the floor.
func Percent(h Heap, floor uint64, base int) int {
	if base <= 0 || h.Live == 0 {
		return base
	}
	live := float64(h.Live)
	if grow := live * float64(base) / 100; grow > float64(floor) {
		spaced := h.AllocRate * spacing.Seconds()
		if spaced >= grow {
			return base // it allocates fast: Go's pacing
		}
		p := math.Floor(max(goMinimum, spaced) * 100 / (live + float64(h.Stacks) + float64(h.Globals)))
		return int(max(1, min(p, float64(base))))
	}
	target := live + float64(floor)
	p := math.Floor(min(float64(floor)*100/live, target*100/goMinimum))
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
	sample  [len(sampled)]metrics.Sample
	// allocs and at are the heap's allocations so far and the time, at
	// the collection before; rate is the smoothed allocation rate (bytes
	// per second), rated once there is one.
	allocs uint64
	at     time.Time
	rate   float64
	rated  bool
}

// sampled are the runtime's figures a collection is paced by, in the
// order collected reads them.
var sampled = [...]string{"/gc/heap/live:bytes", "/gc/scan/stack:bytes", "/gc/scan/globals:bytes", "/gc/heap/allocs:bytes"}

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
	k := &keeper{floor: floor, base: base, current: base, at: time.Now()}
	for i, name := range sampled {
		k.sample[i].Name = name
	}
	metrics.Read(k.sample[:])
	k.allocs = uint64Of(k.sample[3])
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
	h := Heap{Live: uint64Of(k.sample[0]), Stacks: uint64Of(k.sample[1]), Globals: uint64Of(k.sample[2])}
	if p, set := k.next(h, uint64Of(k.sample[3]), time.Now()); set {
		debug.SetGCPercent(p)
	}
	k.arm()
}

// next is the percent for the heap h a collection measured at now, after
// allocs bytes allocated since the start, and whether it replaces the one
// in force. h's AllocRate is the allocation rate smoothed over about
// spacing: a cycle shorter than that moves it only part of the way, so a
// burst of allocation (a thousand streams opening at once) does not give
// a slow heap Go's pacing, and the long cycle that would follow it.
func (k *keeper) next(h Heap, allocs uint64, now time.Time) (int, bool) {
	if d := now.Sub(k.at).Seconds(); d > 0 && allocs >= k.allocs {
		r := float64(allocs-k.allocs) / d
		if k.rated {
			r = k.rate + (r-k.rate)*(1-math.Exp(-d/spacing.Seconds()))
		}
		k.rate, k.rated = r, true
	}
	k.allocs, k.at = allocs, now
	h.AllocRate = k.rate
	if h.Live == 0 {
		return k.current, false
	}
	p := Percent(h, k.floor, k.base)
	if !moved(k.current, p, k.base) {
		return k.current, false
	}
	k.current = p
	return p, true
}

// uint64Of is a sample's value, 0 when the runtime does not have it.
func uint64Of(s metrics.Sample) uint64 {
	if s.Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s.Value.Uint64()
}
