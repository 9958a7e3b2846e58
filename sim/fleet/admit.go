package fleet

import (
	"time"

	"github.com/rolter/rolter/router/admission"
	"github.com/rolter/rolter/router/meshstate"
	"github.com/rolter/rolter/strategies"
)

// Admission in the simulator: with Config.Admission set, every replica
// holds a package admission Queue and decides with the Queue's own rules
// as a router's Gate does, in virtual time. An arrival passes at once
// when Queue.AdmitsNow says so under the replica's probe
// (per band, Σ Config.For(band).Headroom over the engines as the replica
// sees them: its own in-flight and queued prefill plus the other
// replicas' as gossiped); otherwise it queues by band, and a full band
// rejects it (the router's 429). Every admission.DefaultTick while some
// replica queues, each replica expires waiters past their TTL (the
// router's 503) and releases what Queue.Release allows. A request that
// passed, either way, waits as the router's does after its gate for the
// mesh's order of same-instant picks (send), then is picked by the
// strategy among the engines with room for the band it passed under
// (Config.Room), as the router's pick does. The admissions within a
// tick count as recent, as the Gate counts them. The other
// replicas' waiters per band come from their mesh publications (package
// meshstate, PoolWaiting), as rolter router's do; with Config.AloneQueues
// every replica releases as if it were alone.

// fate is how a request ended.
type fate uint8

const (
	served fate = iota
	rejected
	expired
)

// admitState is the run's admission bookkeeping.
type admitState struct {
	queues []*admission.Queue // by replica
	recent []int              // admissions this tick, by replica
	as     []admission.Band   // by request: the band it was admitted under
	let    []time.Duration    // by request: when admission let it through (its arrival when at once)
	bands  [admission.NumBands]struct{ Admitted, Overfull int }
	next   time.Duration // next tick
}

func (r *run) admissionOn() bool { return r.cfg.Admission != nil && !r.oracleOn }

func (r *run) initAdmission() {
	r.arrived = make([]time.Duration, len(r.flights))
	r.fates = make([]fate, len(r.flights))
	if !r.admissionOn() {
		return
	}
	a := &admitState{recent: make([]int, r.cfg.Routers), as: make([]admission.Band, len(r.flights)),
		let: make([]time.Duration, len(r.flights))}
	for range r.cfg.Routers {
		a.queues = append(a.queues, admission.NewQueue(*r.cfg.Admission))
	}
	r.adm = a
}

// engineView is engine e as replica k's admission sees it (as
// router/admission.go builds it): its own in-flight and queued prefill
// plus the other replicas' as gossiped.
func (r *run) engineView(k, e int, spread float64) admission.Engine {
	rep := r.routers[k]
	key := r.keyOf[e]
	return admission.Engine{Load: admission.Estimate(rep.stats[e].InFlight(), rep.state.PeerInflight(key), spread),
		QueuedPrefill: admission.Estimate(rep.stats[e].QueuedPrefill(), rep.state.PeerPrefill(key), spread)}
}

// peers is the other replicas' waiters by band as replica k's mesh state
// has them (none without the mesh), and the Spread factor they give.
func (r *run) peers(k int) (w [admission.NumBands]int, spread float64) {
	if !r.meshOn() {
		return w, 1
	}
	total := 0
	for b, n := range r.routers[k].state.PoolWaiting(r.keyOf) {
		w[b] = int(n)
		total += w[b]
	}
	live, _ := r.routers[k].state.Routers()
	return w, admission.Spread(r.adm.queues[k].Total(), total, live)
}

// probe is replica k's admission probe now.
func (r *run) probe(k int) admission.Probe {
	var p admission.Probe
	var spread float64
	p.Peers, spread = r.peers(k)
	cfg := r.cfg.Admission
	for e := range r.engines {
		en := r.engineView(k, e, spread)
		for b := range p.Headroom {
			p.Headroom[b] += cfg.For(admission.Band(b)).Headroom(en)
		}
	}
	return p
}

// roomy is the pick's eligibility for request i at replica k: the
// engines with room for the band it was admitted under (Config.Room); nil
// (every one) when admission is off or none has room.
func (r *run) roomy(i, k int) strategies.Eligible {
	if r.adm == nil {
		return nil
	}
	as := r.adm.as[i]
	rep := r.routers[k]
	rep.room = rep.room[:0]
	some := false
	_, spread := r.peers(k)
	for e := range r.engines {
		ok := r.cfg.Admission.Room(as, r.engineView(k, e, spread))
		rep.room = append(rep.room, ok)
		some = some || ok
	}
	if !some {
		return nil
	}
	return strategies.EligibleFunc(func(e int) bool { return rep.room[e] })
}

// arrive is request i reaching replica k now.
func (r *run) arrive(i, k int) {
	r.arrived[i] = r.now
	if !r.admissionOn() {
		r.send(i, k)
		return
	}
	q := r.adm.queues[k]
	p := &r.w.reqs[i]
	pr := r.probe(k)
	if q.AdmitsNow(p.Band, pr, r.adm.recent[k]) {
		r.adm.recent[k]++
		r.adm.as[i], r.adm.let[i] = p.Band, r.now
		r.send(i, k)
		return
	}
	if err := q.PushAmong(&admission.Waiter{Band: p.Band, Cost: len(p.Tokens), Value: i}, epoch.Add(r.now), pr); err != nil {
		r.fates[i] = rejected
		r.flights[i] = flight{router: k, at: r.now, first: -1, done: true}
		return
	}
	r.changed(k, r.now) // the waiters go out with the loads, as the router's gate observer signals
}

// send routes request i from replica k once admission let it through
// (at once, or released from the queue; every request when admission is
// off), as the router does: a request that passes its gate goes through
// the mesh's hold (PickHold.Wait) before its first pick, whichever way it
// passed. The pick happens now, or when meshstate lets the held request
// go (releaseHeld).
func (r *run) send(i, k int) {
	if !r.hold(i, k) {
		r.route(i, k)
	}
}

// admitted counts request i, just routed by its replica, when admission
// let it through: overfull when the engine it went to was saturated for
// its band by the counts of every replica together (the truth no single
// replica sees), before it.
func (r *run) admitted(i int) {
	if r.adm == nil {
		return
	}
	f := &r.flights[i]
	b := &r.adm.bands[r.w.reqs[i].Band]
	b.Admitted++
	var truth admission.Engine
	for _, rep := range r.routers {
		truth.Load += rep.stats[f.engine].InFlight()
		truth.QueuedPrefill += rep.stats[f.engine].QueuedPrefill()
	}
	truth.Load--
	truth.QueuedPrefill -= min(truth.QueuedPrefill, uint64(f.estUncached))
	if !r.cfg.Admission.Room(r.adm.as[i], truth) {
		b.Overfull++
	}
}

// queued reports whether any replica has waiters.
func (r *run) queued() bool {
	if r.adm == nil {
		return false
	}
	for _, q := range r.adm.queues {
		if q.Total() > 0 {
			return true
		}
	}
	return false
}

// tick is one admission tick at r.now: expire, then release.
func (r *run) tick() {
	a := r.adm
	now := epoch.Add(r.now)
	// Each waiter that leaves a queue changes the waiters replica k
	// publishes (r.changed), as the router's gate observer signals.
	for k, q := range a.queues {
		q.Expire(now, func(w *admission.Waiter) {
			i := w.Value.(int)
			r.fates[i] = expired
			r.flights[i] = flight{router: k, at: r.now, first: -1, done: true}
			r.changed(k, r.now)
		})
	}
	for k, q := range a.queues {
		a.recent[k] = 0
		if q.Total() == 0 {
			continue
		}
		a.recent[k] = q.Release(now, r.probe(k), 0, func(w *admission.Waiter, as admission.Band) {
			i := w.Value.(int)
			r.adm.as[i], r.adm.let[i] = as, r.now
			r.changed(k, r.now)
			r.send(i, k)
		})
	}
}

// admitUntil runs the admission ticks up to t. A tick with nothing queued
// anywhere only ends the replicas' window of recent admissions: the
// Gate counts as recent what it admitted within the last tick, whether
// or not anything waits, so admissions at once long ago do not count
// against the headroom of a later arrival.
func (r *run) admitUntil(t time.Duration) {
	if r.adm == nil {
		return
	}
	for ; r.adm.next <= t; r.adm.next += admission.DefaultTick {
		if r.queued() {
			r.stepTo(r.adm.next)
			r.tick()
		} else {
			clear(r.adm.recent)
		}
	}
}

// finishQueues keeps ticking after the last arrival until every queue
// has emptied (released or expired); what the last ticks released may
// still be held (simulate picks those next).
func (r *run) finishQueues() {
	for ; r.queued(); r.adm.next += admission.DefaultTick {
		r.stepTo(r.adm.next)
		r.tick()
	}
}

// stepTo brings the fleet to t: the mesh's events due by then (changes
// published, held picks released, heartbeats), and the engines.
func (r *run) stepTo(t time.Duration) {
	if r.meshOn() {
		for {
			next, ok := r.nextEvent(t)
			if !ok {
				break
			}
			if next >= r.nextPub {
				r.nextPub = next + meshstate.Heartbeat/5
			}
			r.advance(next)
			r.publish(next)
			r.releaseHeld()
		}
	}
	r.advance(t)
}
