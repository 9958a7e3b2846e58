package fleet

import (
	"slices"
	"time"

	"github.com/rolter/rolter/kvblock"
	"github.com/rolter/rolter/sim/kvevents"
)

// stepEvents are one engine step's KV events, visible from the step's end.
type stepEvents struct {
	at     time.Duration
	events []kvevents.Event
}

// residency is one engine's KV residency as a router's view knows it:
// rebuilt from the engine's KV events exactly as a sidecar does (block keys
// derived from token ids, removals mapped back through the engine hashes),
// with the events applied only once they are old enough.
type residency struct {
	log    []stepEvents
	next   int // first log entry not applied
	keys   map[uint64]int
	digest map[kvevents.Digest]uint64
}

func newResidency() *residency {
	return &residency{keys: make(map[uint64]int), digest: make(map[kvevents.Digest]uint64)}
}

// record appends a step's events (steps arrive in time order).
func (r *residency) record(at time.Duration, evs []kvevents.Event) {
	if len(evs) > 0 {
		r.log = append(r.log, stepEvents{at: at, events: evs})
	}
}

// syncTo applies every logged step that ended at or before t.
func (r *residency) syncTo(t time.Duration) {
	for r.next < len(r.log) && r.log[r.next].at <= t {
		for _, ev := range r.log[r.next].events {
			r.apply(ev)
		}
		r.log[r.next] = stepEvents{}
		r.next++
	}
	if r.next > 1024 && r.next*2 > len(r.log) {
		r.log = slices.Delete(r.log, 0, r.next)
		r.next = 0
	}
}

func (r *residency) apply(ev kvevents.Event) {
	switch ev.Kind {
	case kvblock.BlockStored:
		parent := kvblock.Root
		if ev.HasParent {
			parent = r.digest[ev.Parent]
		}
		extra := kvblock.Extra(ev.LoraName, "")
		bs := ev.BlockSize
		for i, d := range ev.Hashes {
			if (i+1)*bs > len(ev.TokenIDs) {
				break
			}
			key := kvblock.Next(parent, extra, ev.TokenIDs[i*bs:(i+1)*bs])
			r.digest[d] = key
			r.keys[key]++
			parent = key
		}
	case kvblock.BlockRemoved:
		for _, d := range ev.Hashes {
			key, ok := r.digest[d]
			if !ok {
				continue
			}
			if r.keys[key]--; r.keys[key] <= 0 {
				delete(r.keys, key)
				delete(r.digest, d)
			}
		}
	case kvblock.AllBlocksCleared:
		clear(r.keys)
		clear(r.digest)
	}
}

// prefix is how many of keys, from the first, are resident.
func (r *residency) prefix(keys []uint64) int {
	n := 0
	for n < len(keys) && r.keys[keys[n]] > 0 {
		n++
	}
	return n
}

// sample is an engine's gossiped gauges at one time.
type sample struct {
	at        time.Duration
	loras     []string
	occupancy float64
}

// lagged is what the routers know of one engine: the engine state as it
// was `delay` ago.
type lagged struct {
	res      *residency
	submits  []time.Duration // arrival times, ascending
	finishes []time.Duration // completion times, ascending
	samples  []sample
}

// queueAt is the engine's running + waiting count at t.
func (l *lagged) queueAt(t time.Duration) uint64 {
	in := countLE(l.submits, t)
	out := countLE(l.finishes, t)
	if in <= out {
		return 0
	}
	return uint64(in - out)
}

func countLE(ts []time.Duration, t time.Duration) int {
	i, _ := slices.BinarySearchFunc(ts, t, func(a, b time.Duration) int {
		if a <= b {
			return -1
		}
		return 1
	})
	return i
}

// sampleAt returns the latest sample taken at or before t.
func (l *lagged) sampleAt(t time.Duration) (sample, bool) {
	i := len(l.samples)
	for i > 0 && l.samples[i-1].at > t {
		i--
	}
	if i == 0 {
		return sample{}, false
	}
	return l.samples[i-1], true
}

// view implements the strategies' external-state interfaces over the
// lagged engine state at the run's current view time.
type view struct {
	r *run
}

func (v view) ResidentPrefix(t int, keys []uint64) (int, bool) {
	if t < 0 || t >= len(v.r.engines) {
		return 0, false
	}
	return v.r.engines[t].lag.res.prefix(keys), true
}

func (v view) Occupancy(t int) (float64, bool, bool) {
	if v.r.cfg.Engine.CPUTierBlocks <= 0 || t < 0 || t >= len(v.r.engines) {
		return 0, false, false
	}
	s, ok := v.r.engines[t].lag.sampleAt(v.r.viewTime())
	return s.occupancy, ok, ok
}

func (v view) AdapterResident(t int, adapter string) (bool, bool) {
	if t < 0 || t >= len(v.r.engines) {
		return false, false
	}
	s, ok := v.r.engines[t].lag.sampleAt(v.r.viewTime())
	if !ok {
		return false, false
	}
	return slices.Contains(s.loras, adapter), true
}
