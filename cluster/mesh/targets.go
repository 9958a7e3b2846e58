package mesh

import (
	"math"
	"time"

	"github.com/rolter/rolter/strategies"
)

// Targets is the view restricted to one route's targets, in the route's
// order: it is what the route's strategies read. Build it once per route
// per config snapshot with View.Targets; every method is lock-free and
// allocation-free.
type Targets struct {
	engines []*engine
}

var (
	_ strategies.Residency        = (*Targets)(nil)
	_ strategies.CacheSignal      = (*Targets)(nil)
	_ strategies.AdapterResidency = (*Targets)(nil)
	_ strategies.ResidencyBatch   = (*Targets)(nil)
)

// Targets returns the view of the engines at urls (route target base URLs,
// normalised with NormalizeURL). Entries for engines no sidecar announced
// yet are created and fill in when one does.
func (v *View) Targets(urls []string) *Targets {
	t := &Targets{engines: make([]*engine, len(urls))}
	for i, u := range urls {
		t.engines[i] = v.engineFor(NormalizeURL(u), true)
	}
	return t
}

func (t *Targets) at(i int) *engine {
	if i < 0 || i >= len(t.engines) {
		return nil
	}
	return t.engines[i]
}

// State returns target i's residency state.
func (t *Targets) State(i int) ResidencyState {
	e := t.at(i)
	if e == nil {
		return StateUnknown
	}
	return ResidencyState(e.state.Load())
}

// ResidentPrefix implements strategies.Residency: the number of leading
// keys resident on target i; ok only when the view of i is EXACT.
func (t *Targets) ResidentPrefix(i int, keys []uint64) (int, bool) {
	e := t.at(i)
	if e == nil || ResidencyState(e.state.Load()) != StateExact {
		return 0, false
	}
	set := e.set.Load()
	if set == nil {
		return 0, false
	}
	tab := set.tab.Load()
	for n, k := range keys {
		if !tab.has(k) {
			return n, true
		}
	}
	return len(keys), true
}

// ResidentPrefixes implements strategies.ResidencyBatch: out[i] is
// ResidentPrefix(i, keys), or -1 when target i is not EXACT.
func (t *Targets) ResidentPrefixes(keys []uint64, out []int) {
	for i := range out {
		n, ok := t.ResidentPrefix(i, keys)
		if !ok {
			n = -1
		}
		out[i] = n
	}
}

// Age returns how long ago target i's sidecar was last heard from; ok is
// false when it never was. It reads the clock: not for the hot path.
func (t *Targets) Age(i int, now time.Time) (time.Duration, bool) {
	e := t.at(i)
	if e == nil {
		return 0, false
	}
	last := e.lastMsg.Load()
	if last == 0 {
		return 0, false
	}
	return max(now.Sub(time.Unix(0, last)), 0), true
}

// Blocks returns how many block keys the view holds for target i and its
// state. For diagnostics and benchmarks, not the hot path.
func (t *Targets) Blocks(i int) (int, ResidencyState) {
	e := t.at(i)
	if e == nil {
		return 0, StateUnknown
	}
	set := e.set.Load()
	if set == nil {
		return 0, ResidencyState(e.state.Load())
	}
	return set.Len(), ResidencyState(e.state.Load())
}

// EachBlock calls f for every block key the view holds for target i. For
// diagnostics and benchmarks; it may run concurrently with updates and then
// sees some mix of before and after.
func (t *Targets) EachBlock(i int, f func(uint64)) {
	if e := t.at(i); e != nil {
		if set := e.set.Load(); set != nil {
			set.Each(f)
		}
	}
}

// Occupancy implements strategies.CacheSignal from the LMCache signal.
func (t *Targets) Occupancy(i int) (float64, bool, bool) {
	e := t.at(i)
	if e == nil || !e.fresh.Load() || !e.lmKnown.Load() {
		return 0, false, false
	}
	return math.Float64frombits(e.lmOcc.Load()), e.lmAvail.Load(), true
}

// AdapterResident implements strategies.AdapterResidency.
func (t *Targets) AdapterResident(i int, adapter string) (bool, bool) {
	e := t.at(i)
	if e == nil || !e.fresh.Load() {
		return false, false
	}
	a := e.adapters.Load()
	if a == nil {
		return false, false
	}
	for _, name := range a.names {
		if name == adapter {
			return true, true
		}
	}
	return false, true
}

// MaxLoras returns target i's adapter slots, when known.
func (t *Targets) MaxLoras(i int) (int, bool) {
	e := t.at(i)
	if e == nil || !e.fresh.Load() {
		return 0, false
	}
	if a := e.adapters.Load(); a != nil && a.maxLoras > 0 {
		return a.maxLoras, true
	}
	return 0, false
}

// KVUsage returns target i's KV-cache usage in [0,1], when known.
func (t *Targets) KVUsage(i int) (float64, bool) {
	e := t.at(i)
	if e == nil || !e.fresh.Load() {
		return 0, false
	}
	return math.Float64frombits(e.kvUsage.Load()), true
}

// Load is View.Load for target i.
func (t *Targets) Load(i int) (uint64, bool) { return t.at(i).load() }

// Load returns the load a load-aware strategy should see for the engine at
// url (normalised) beyond this router's own in-flight, which the caller
// adds. Two estimates of what is outstanding on the engine exist: its
// running + waiting as its sidecar last reported (authoritative but up to
// a status interval old, and it already includes every router's admitted
// requests) and Σ in-flight of every router (ours fresh, the others' as
// gossiped). Summing them would count the other routers' requests twice,
// so the engine's total is taken as the larger of the two, and Load
// returns that total less our own last published in-flight:
// max(queue − own, Σ others). ok is false when neither is known.
func (v *View) Load(url string) (uint64, bool) { return v.lookup(url).load() }

// Reported reports whether a live sidecar's status for the engine at url
// is fresh: Load's answer then comes from the engine's own queue, not only
// from other routers' in-flight counts.
func (v *View) Reported(url string) bool {
	e := v.lookup(url)
	return e != nil && e.fresh.Load()
}

func (e *engine) load() (uint64, bool) {
	if e == nil {
		return 0, false
	}
	var queue, others int64
	ok := false
	if e.fresh.Load() {
		queue = int64(e.running.Load()+e.waiting.Load()) - e.own.Load()
		ok = true
	}
	if e.remoteAny.Load() {
		others = max(e.remote.Load(), 0)
		ok = true
	}
	return uint64(max(queue, others, 0)), ok
}

// Status returns the engine at url's waiting queue and KV-cache usage from
// its sidecar's last status; ok is false without a fresh one. Lock-free
// and allocation-free (admission reads it per pick).
func (v *View) Status(url string) (waiting uint64, kvUsage float64, ok bool) {
	e := v.lookup(url)
	if e == nil || !e.fresh.Load() {
		return 0, 0, false
	}
	return e.waiting.Load(), math.Float64frombits(e.kvUsage.Load()), true
}

// Remote is what a router's view holds of one engine beyond the router's
// own requests (the raw inputs of router/meshstate's load fold).
type Remote struct {
	// Queue is the engine's running + waiting from its sidecar's last
	// status; QueueOK is false without a fresh one.
	Queue   uint64
	QueueOK bool
	// Inflight and Prefill are Σ over the other routers of their latest
	// unexpired loads on the engine; PeersOK is false when none has one.
	Inflight, Prefill uint64
	// Waiting is Σ over the other routers of their admission waiters by
	// band (sheddable, standard, critical) for the pools the engine serves.
	Waiting [3]uint64
	PeersOK bool
	// Updated is when a router last sent a load for the engine.
	Updated time.Time
}

// Remote returns the engine at url (normalised) as this router's view
// holds it; ok is false when the view has no such engine. Lock-free and
// allocation-free: it may run on the request hot path.
func (v *View) Remote(url string) (Remote, bool) {
	e := v.lookup(url)
	if e == nil {
		return Remote{}, false
	}
	r := Remote{}
	if e.fresh.Load() {
		r.Queue, r.QueueOK = e.running.Load()+e.waiting.Load(), true
	}
	if e.remoteAny.Load() {
		r.Inflight, r.Prefill, r.PeersOK = uint64(max(e.remote.Load(), 0)), e.remotePrefill.Load(), true
		for b := range r.Waiting {
			r.Waiting[b] = e.remoteWaiting[b].Load()
		}
	}
	if at := e.remoteAt.Load(); at > 0 {
		r.Updated = time.Unix(0, at)
	}
	return r, true
}
