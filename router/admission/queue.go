package admission

import (
	"container/list"
	"errors"
	"time"
)

// ErrFull is Push's answer when the waiter's band holds MaxQueue waiters
// (with the other routers' waiters of the band, when given).
var ErrFull = errors.New("admission queue full")

// Waiter is one queued request.
type Waiter struct {
	Band Band
	// Flow is the fairness id within the band: the API key's name, or the
	// fairness header when the key allows it. "" is a flow like any other.
	Flow string
	// Cost is the request's weight in deficit round-robin (its estimated
	// prompt tokens); below 1 counts as 1.
	Cost int
	// Arrived is when the waiter was pushed.
	Arrived time.Time
	// Value is the caller's own handle for the request.
	Value any

	fl     *flow
	inFlow *list.Element
	inBand *list.Element
}

// Queued reports whether w is still in a queue.
func (w *Waiter) Queued() bool { return w.inBand != nil }

type flow struct {
	name    string
	waiters list.List // *Waiter, FIFO
	deficit int
	active  *list.Element // in band.active while it has waiters
}

type band struct {
	all    list.List // *Waiter in arrival order (TTL, promotion)
	flows  map[string]*flow
	active list.List // *flow with waiters, in round-robin order
}

// Queue is one pool's waiting requests on one router. It never reads a
// clock: every call that depends on time is given now. It is not safe for
// concurrent use (Gate locks around it).
type Queue struct {
	cfg   Config
	bands [NumBands]band
	// unpromoted counts releases since the last promoted one.
	unpromoted int
}

// NewQueue returns an empty queue under cfg.
func NewQueue(cfg Config) *Queue {
	q := &Queue{cfg: cfg}
	for i := range q.bands {
		q.bands[i].flows = map[string]*flow{}
	}
	return q
}

// Config returns the queue's configuration.
func (q *Queue) Config() Config { return q.cfg }

// SetConfig changes the configuration. Waiters already queued stay, even
// above a lowered MaxQueue; a lowered TTL applies at the next Expire.
func (q *Queue) SetConfig(cfg Config) { q.cfg = cfg }

// Len returns the number of waiters in band b.
func (q *Queue) Len(b Band) int { return q.bands[b].all.Len() }

// Total returns the number of waiters in every band.
func (q *Queue) Total() int {
	n := 0
	for i := range q.bands {
		n += q.bands[i].all.Len()
	}
	return n
}

// Push queues w at now. It returns ErrFull when w's band is full.
func (q *Queue) Push(w *Waiter, now time.Time) error { return q.PushAmong(w, now, Probe{}) }

// PushAmong queues w at now, counting the other routers' waiters of w's
// band (p.Peers) against the band's MaxQueue: the bound holds for the
// pool across the routers, so more routers do not make a longer wait. It
// returns ErrFull when the band is full.
func (q *Queue) PushAmong(w *Waiter, now time.Time, p Probe) error {
	if w.Band >= NumBands {
		w.Band = Standard
	}
	bd := &q.bands[w.Band]
	if bd.all.Len()+max(p.Peers[w.Band], 0) >= q.cfg.Bands[w.Band].MaxQueue {
		return ErrFull
	}
	w.Arrived = now
	fl := bd.flows[w.Flow]
	if fl == nil {
		fl = &flow{name: w.Flow}
		bd.flows[w.Flow] = fl
	}
	if fl.active == nil {
		fl.active = bd.active.PushBack(fl)
	}
	w.fl = fl
	w.inFlow = fl.waiters.PushBack(w)
	w.inBand = bd.all.PushBack(w)
	return nil
}

// Remove takes w out of the queue (its client left). It reports whether w
// was queued.
func (q *Queue) Remove(w *Waiter) bool {
	if w.inBand == nil {
		return false
	}
	bd := &q.bands[w.Band]
	bd.all.Remove(w.inBand)
	w.inBand = nil
	fl := w.fl
	fl.waiters.Remove(w.inFlow)
	w.inFlow, w.fl = nil, nil
	if fl.waiters.Len() == 0 {
		q.retire(bd, fl)
	}
	return true
}

// retire drops an empty flow: it leaves the rotation with no deficit
// kept (DRR: an idle flow does not bank credit).
func (q *Queue) retire(bd *band, fl *flow) {
	if fl.active != nil {
		bd.active.Remove(fl.active)
		fl.active = nil
	}
	fl.deficit = 0
	delete(bd.flows, fl.name)
}

// Next removes and returns the waiter to release now, nil when the queue
// is empty: NextWithin with every band allowed.
func (q *Queue) Next(now time.Time) *Waiter {
	w, _ := q.NextWithin(now, nil)
	return w
}

// NextWithin removes and returns the waiter to release now among the
// bands allowed admits (nil: all), and the band it leaves under; nil when
// no allowed band has waiters. The order:
//
//  1. Promotion (starvation guard): with top the highest non-empty band,
//     the oldest waiter of a lower band b leaves first, under band top,
//     once it has waited PromoteAfter × (top − b) (the band nearest top is
//     checked first), provided top is allowed and PromoteEvery − 1
//     releases went by since the last promoted one: promotion takes at
//     most 1 / PromoteEvery of the releases.
//  2. Otherwise the highest allowed band with waiters, by deficit
//     round-robin over its flows: a flow's turn adds Quantum to its
//     deficit; it releases its oldest waiters while the deficit covers
//     their cost (each pays it), then goes to the back of the rotation
//     keeping the remainder. An emptied flow leaves the rotation and its
//     deficit is dropped.
func (q *Queue) NextWithin(now time.Time, allowed func(Band) bool) (*Waiter, Band) {
	ok := func(b int) bool { return allowed == nil || allowed(Band(b)) }
	top := -1
	for b := NumBands - 1; b >= 0; b-- {
		if q.bands[b].all.Len() > 0 {
			top = b
			break
		}
	}
	if top < 0 {
		return nil, 0
	}
	if p := q.cfg.PromoteAfter; p > 0 && ok(top) && q.unpromoted+1 >= q.cfg.PromoteEvery {
		for b := top - 1; b >= 0; b-- {
			e := q.bands[b].all.Front()
			if e == nil {
				continue
			}
			w := e.Value.(*Waiter)
			if now.Sub(w.Arrived) >= p*time.Duration(top-b) {
				q.Remove(w)
				q.unpromoted = 0
				return w, Band(top)
			}
		}
	}
	from := -1
	for b := top; b >= 0; b-- {
		if q.bands[b].all.Len() > 0 && ok(b) {
			from = b
			break
		}
	}
	if from < 0 {
		return nil, 0
	}
	q.unpromoted++
	bd := &q.bands[from]
	quantum := max(q.cfg.Quantum, 1)
	for {
		fe := bd.active.Front()
		fl := fe.Value.(*flow)
		w := fl.waiters.Front().Value.(*Waiter)
		cost := max(w.Cost, 1)
		if fl.deficit >= cost {
			fl.deficit -= cost
			q.Remove(w)
			// The flow's turn ends when its deficit does not cover its
			// next waiter; it keeps the remainder for its next turn.
			if fl.active != nil && fl.deficit < max(fl.waiters.Front().Value.(*Waiter).Cost, 1) {
				bd.active.MoveToBack(fl.active)
			}
			return w, Band(from)
		}
		fl.deficit += quantum
		if fl.deficit < cost {
			bd.active.MoveToBack(fe)
		}
	}
}

// AdmitsNow reports whether a request of band b arriving now passes at
// once, without queueing: no waiter of band b or above is queued, and the
// pool has room for band b beyond the recent admissions (p.Headroom[b] −
// recent > 0). A critical request so passes lower bands' waiters while
// the engines keep the room their fills leave it.
func (q *Queue) AdmitsNow(b Band, p Probe, recent int) bool {
	if b >= NumBands {
		b = Standard
	}
	for a := b; a < NumBands; a++ {
		if q.bands[a].all.Len() > 0 {
			return false
		}
	}
	return p.Headroom[b]-recent > 0
}

// Release hands out the waiters this router may send now, under p and
// the recent admissions (those within the last tick, not yet in the
// counts p was read from). Band b's quota is Share(p.Headroom[b] −
// recent, this router's waiters of band b and above, the other routers'
// waiters of band b and above): a router releases its share of the room,
// and a lower band yields to higher-band waiters on any router. Waiters
// leave in NextWithin order while the number released by this call is
// below the quota of the band they leave under; f gets each with that
// band. It returns how many left.
func (q *Queue) Release(now time.Time, p Probe, recent int, f func(w *Waiter, as Band)) int {
	var quota [NumBands]int
	own, peers := 0, 0
	for b := NumBands - 1; b >= 0; b-- {
		own += q.bands[b].all.Len()
		peers += p.Peers[b]
		quota[b] = Share(p.Headroom[b]-recent, own, peers)
	}
	n := 0
	for {
		w, as := q.NextWithin(now, func(b Band) bool { return n < quota[b] })
		if w == nil {
			return n
		}
		n++
		f(w, as)
	}
}

// Expire removes every waiter that has waited its band's TTL at now and
// hands each to f.
func (q *Queue) Expire(now time.Time, f func(*Waiter)) {
	for b := range q.bands {
		ttl := q.cfg.Bands[b].TTL
		if ttl <= 0 {
			continue
		}
		for e := q.bands[b].all.Front(); e != nil; e = q.bands[b].all.Front() {
			w := e.Value.(*Waiter)
			if now.Sub(w.Arrived) < ttl {
				break
			}
			q.Remove(w)
			f(w)
		}
	}
}

// NextExpiry returns when the next waiter's TTL passes; ok is false when
// no waiter has a TTL.
func (q *Queue) NextExpiry() (at time.Time, ok bool) {
	for b := range q.bands {
		ttl := q.cfg.Bands[b].TTL
		e := q.bands[b].all.Front()
		if ttl <= 0 || e == nil {
			continue
		}
		t := e.Value.(*Waiter).Arrived.Add(ttl)
		if !ok || t.Before(at) {
			at, ok = t, true
		}
	}
	return at, ok
}
