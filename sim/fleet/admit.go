package fleet

import (
	"slices"
	"time"

	"github.com/rolter/rolter/router/admission"
	"github.com/rolter/rolter/router/meshstate"
)

// Admission in the simulator: with Config.Admission set, every replica
// holds a package admission Queue and decides as a router's Gate does, in
// virtual time. An arrival goes to the strategy at once while the
// replica's queue is empty and the pool has headroom (Σ
// Thresholds.Headroom over the engines as the replica sees them: its own
// in-flight plus the other replicas' as gossiped); otherwise it queues by
// band, and a full band rejects it (the router's 429). Every
// admission.DefaultTick while some replica queues, each replica expires
// waiters past their TTL (the router's 503) and releases
// Share(headroom − its releases this tick, its queue, peers) waiters in
// Queue.Next order, each picked by the strategy at that moment. peers is
// 0, as in rolter router, which does not gossip queue lengths; with
// Config.ShareQueues it is the other replicas' queues as last gossiped.

// fate is how a request ended.
type fate uint8

const (
	served fate = iota
	rejected
	expired
)

// queueSample is every replica's queue length at one tick, read by the
// others PeerDelay later.
type queueSample struct {
	at   time.Duration
	lens []int
}

// admitState is the run's admission bookkeeping.
type admitState struct {
	queues  []*admission.Queue // by replica
	pending []int              // releases this tick, by replica
	history []queueSample
	next    time.Duration // next tick
}

func (r *run) admissionOn() bool { return r.cfg.Admission != nil && !r.oracleOn }

func (r *run) initAdmission() {
	r.arrived = make([]time.Duration, len(r.flights))
	r.fates = make([]fate, len(r.flights))
	if !r.admissionOn() {
		return
	}
	a := &admitState{pending: make([]int, r.cfg.Routers)}
	for range r.cfg.Routers {
		a.queues = append(a.queues, admission.NewQueue(*r.cfg.Admission))
	}
	r.adm = a
}

// headroom is replica k's Σ Thresholds.Headroom over the engines now.
func (r *run) headroom(k int) int {
	rep := r.routers[k]
	room := 0
	for e := range r.engines {
		key := r.keyOf[e]
		// As the router counts it (router/admission.go): its own
		// in-flight plus the other routers' as gossiped.
		en := admission.Engine{Load: rep.stats[e].InFlight() + rep.state.PeerInflight(key),
			QueuedPrefill: rep.stats[e].QueuedPrefill() + rep.state.PeerPrefill(key)}
		room += r.cfg.Admission.Headroom(en)
	}
	return room
}

// arrive is request i reaching replica k now.
func (r *run) arrive(i, k int) {
	r.arrived[i] = r.now
	if !r.admissionOn() {
		if !r.hold(i, k) {
			r.route(i, k)
		}
		return
	}
	q := r.adm.queues[k]
	if q.Total() == 0 && r.headroom(k) > 0 {
		r.route(i, k)
		return
	}
	p := &r.w.reqs[i]
	if err := q.Push(&admission.Waiter{Band: p.Band, Cost: len(p.Tokens), Value: i}, epoch.Add(r.now)); err != nil {
		r.fates[i] = rejected
		r.flights[i] = flight{router: k, at: r.now, first: -1, done: true}
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
	lens := make([]int, len(a.queues))
	for k, q := range a.queues {
		q.Expire(now, func(w *admission.Waiter) {
			i := w.Value.(int)
			r.fates[i] = expired
			r.flights[i] = flight{router: k, at: r.now, first: -1, done: true}
		})
		lens[k] = q.Total()
	}
	a.history = append(a.history, queueSample{at: r.now, lens: lens})
	var seen []int
	if r.cfg.ShareQueues {
		seen = r.peerQueues()
	}
	for k, q := range a.queues {
		a.pending[k] = 0
		if q.Total() == 0 {
			continue
		}
		peers := 0
		for j, n := range seen {
			if j != k {
				peers += n
			}
		}
		for range admission.Share(r.headroom(k)-a.pending[k], q.Total(), peers) {
			w := q.Next(now)
			r.route(w.Value.(int), k)
			a.pending[k]++
		}
	}
}

// peerQueues is every replica's queue length as the others know it now
// (PeerDelay old; nil before any sample is that old).
func (r *run) peerQueues() []int {
	h := r.adm.history
	seen := r.now - r.cfg.PeerDelay
	i, _ := slices.BinarySearchFunc(h, seen, func(s queueSample, t time.Duration) int {
		if s.at <= t {
			return -1
		}
		return 1
	})
	if i == 0 {
		return nil
	}
	return h[i-1].lens
}

// admitUntil runs the admission ticks up to t; a tick with nothing queued
// anywhere does nothing.
func (r *run) admitUntil(t time.Duration) {
	if r.adm == nil {
		return
	}
	for ; r.adm.next <= t; r.adm.next += admission.DefaultTick {
		if r.queued() {
			r.stepTo(r.adm.next)
			r.tick()
		}
	}
}

// finishQueues keeps ticking after the last arrival until every queue
// has emptied (released or expired).
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
