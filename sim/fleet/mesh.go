package fleet

import (
	"slices"
	"strconv"
	"time"

	"github.com/rolter/rolter/router/admission"
	"github.com/rolter/rolter/router/meshstate"
	"github.com/rolter/rolter/strategies"
)

// The replicas' mesh is package meshstate, the code `rolter router` runs:
// each replica holds a meshstate.State over a virtual-time transport
// (gossip below). What a replica shares or publishes reaches the others
// PeerDelay later; the state's own rules decide what is shared, filed,
// imported, folded and when counts are published.

// meshPool is the route key both ends of the mesh hash with.
const meshPool = "fleet"

// engineKey is engine e's key on the mesh (and its target ID).
func engineKey(e int) string { return "engine-" + strconv.Itoa(e) }

// sharedRec is one learned record on the virtual wire.
type sharedRec struct {
	at   time.Duration // when it was shared
	from int           // sharing replica
	rec  meshstate.Record
}

// publication is one replica's published per-engine counts.
type publication struct {
	at                time.Duration
	inflight, prefill []uint64    // by engine
	waiting           [][3]uint64 // by engine: admission waiters by band
}

// intentMsg is one replica's intent message on the virtual wire
// (meshstate.Intents.Intend): last is the latest intent it announced (-1:
// none yet), carried says the message still carries it.
type intentMsg struct {
	at      time.Duration
	last    time.Duration
	carried bool
}

// heldPick is request i at replica k, waiting for its pick as meshstate's
// Arrive placed it.
type heldPick struct {
	i, k int
	p    meshstate.Pick
}

// gossip is replica k's meshstate.Transport.
type gossip struct {
	r *run
	k int
}

var (
	_ meshstate.Transport = gossip{}
	_ meshstate.Intents   = gossip{}
	_ meshstate.PeerDelay = gossip{}
)

// Share implements meshstate.Transport: the record goes on the wire log.
func (g gossip) Share(rec meshstate.Record) {
	g.r.learned = append(g.r.learned, sharedRec{at: g.r.now, from: g.k, rec: rec})
}

// Publish implements meshstate.Transport: the publication goes on the
// replica's log, read by the others once it is PeerDelay old.
func (g gossip) Publish(loads []meshstate.EngineLoad, _ time.Time) {
	n := len(g.r.engines)
	p := publication{at: g.r.now, inflight: make([]uint64, n), prefill: make([]uint64, n), waiting: make([][3]uint64, n)}
	for _, l := range loads {
		if e, ok := g.r.keys[l.Engine]; ok {
			p.inflight[e], p.prefill[e], p.waiting[e] = l.Inflight, l.Prefill, l.Waiting
		}
	}
	rep := g.r.routers[g.k]
	rep.pubs = append(rep.pubs, p)
	if rep.resolve {
		rep.resolve = false
		g.Intend(g.k, time.Time{})
	}
}

// Resolve implements meshstate.Intents: the next publication withdraws
// the replica's intent, at the same virtual instant.
func (g gossip) Resolve() { g.r.routers[g.k].resolve = true }

// Engine implements meshstate.Transport: the engine's queue as its sidecar
// reported it GossipDelay ago, and the other replicas' latest
// publications that have arrived (PeerDelay old).
func (g gossip) Engine(key string) (meshstate.Remote, bool) {
	e, ok := g.r.keys[key]
	if !ok {
		return meshstate.Remote{}, false
	}
	rem := meshstate.Remote{Queue: g.r.engines[e].lag.queueAt(g.r.viewTime()), QueueOK: true}
	seen := g.r.now - g.r.cfg.PeerDelay
	for j, rep := range g.r.routers {
		if j == g.k {
			continue
		}
		i := arrived(rep.pubs, seen)
		if i == 0 {
			continue
		}
		p := rep.pubs[i-1]
		rem.Inflight += p.inflight[e]
		rem.Prefill += p.prefill[e]
		for b, n := range p.waiting[e] {
			rem.Waiting[b] += n
		}
		rem.PeersOK = true
	}
	return rem, true
}

// PeerPublished implements meshstate.PeerNews: when the newest
// publication of another replica that has arrived (is PeerDelay old) was
// made.
func (g gossip) PeerPublished() time.Time {
	seen := g.r.now - g.r.cfg.PeerDelay
	newest := time.Duration(-1)
	for j, rep := range g.r.routers {
		if j == g.k {
			continue
		}
		if i := arrived(rep.pubs, seen); i > 0 {
			newest = max(newest, rep.pubs[i-1].at)
		}
	}
	if newest < 0 {
		return time.Time{}
	}
	return epoch.Add(newest)
}

// PeerNews implements meshstate.PeerNews. The simulator asks
// State.Ready at its own event times and never waits on the channel.
func (g gossip) PeerNews() <-chan struct{} { return nil }

// Intend implements meshstate.Intents: the intent goes on the replica's
// intent log at once, read by the others once it is PeerDelay old.
func (g gossip) Intend(_ int, at time.Time) {
	rep := g.r.routers[g.k]
	m := intentMsg{at: g.r.now, last: -1}
	if n := len(rep.intents); n > 0 {
		m.last = rep.intents[n-1].last
	}
	if !at.IsZero() {
		m.last, m.carried = at.Sub(epoch), true
	}
	rep.intents = append(rep.intents, m)
}

// PeerPicks implements meshstate.Intents: each other replica's newest
// intent message that has arrived (is PeerDelay old); a replica's rank is
// its index.
func (g gossip) PeerPicks(buf []meshstate.PeerPick) []meshstate.PeerPick {
	seen := g.r.now - g.r.cfg.PeerDelay
	for j, rep := range g.r.routers {
		if j == g.k {
			continue
		}
		i, _ := slices.BinarySearchFunc(rep.intents, seen, func(m intentMsg, t time.Duration) int {
			if m.at <= t {
				return -1
			}
			return 1
		})
		if i == 0 || rep.intents[i-1].last < 0 {
			continue
		}
		m := rep.intents[i-1]
		buf = append(buf, meshstate.PeerPick{Rank: j, Intent: epoch.Add(m.last), Pending: m.carried})
	}
	return buf
}

// PeerDelay implements meshstate.PeerDelay: the run's peer delay, which
// every message takes exactly.
func (g gossip) PeerDelay() time.Duration { return g.r.cfg.PeerDelay }

// nextNews is when the next message (publication or intent) of a replica
// other than k reaches k after now; ok is false when none is on the wire.
func (r *run) nextNews(k int) (time.Duration, bool) {
	next, ok := time.Duration(1<<62), false
	sent := r.now - r.cfg.PeerDelay
	for j, rep := range r.routers {
		if j == k {
			continue
		}
		if i := arrived(rep.pubs, sent); i < len(rep.pubs) {
			next, ok = min(next, rep.pubs[i].at+r.cfg.PeerDelay), true
		}
		i, _ := slices.BinarySearchFunc(rep.intents, sent, func(m intentMsg, t time.Duration) int {
			if m.at <= t {
				return -1
			}
			return 1
		})
		if i < len(rep.intents) {
			next, ok = min(next, rep.intents[i].at+r.cfg.PeerDelay), true
		}
	}
	return next, ok
}

// arrived is how many of pubs were made by seen.
func arrived(pubs []publication, seen time.Duration) int {
	i, _ := slices.BinarySearchFunc(pubs, seen, func(p publication, t time.Duration) int {
		if p.at <= t {
			return -1
		}
		return 1
	})
	return i
}

// Routers implements meshstate.Inventory: the run's replicas, ranked by
// index.
func (g gossip) Routers() (live, rank int) { return g.r.cfg.Routers, g.k }

// meshOn reports whether the replicas exchange anything at all.
func (r *run) meshOn() bool { return !r.cfg.Isolated && r.cfg.Routers > 1 && !r.oracleOn }

// shares reports whether the replicas learn from each other: the mesh
// hands records only to balancers with a hook, so without one the
// exchange changes nothing and is skipped.
func (r *run) shares(lb strategies.LoadBalancer) bool { return r.meshOn() && meshstate.Shares(lb) }

// deliver files at replica k every record that has reached it by now:
// a record shared at t goes out with its replica's batch at the next
// meshstate.LearnedGap boundary and arrives PeerDelay later.
func (r *run) deliver(k int) {
	rep := r.routers[k]
	for rep.next < len(r.learned) {
		s := r.learned[rep.next]
		at := learnedArrival(s.at, r.cfg.PeerDelay)
		if at > r.now {
			return
		}
		rep.next++
		if s.from == k {
			continue
		}
		rec := s.rec
		rec.At = epoch.Add(at)
		rep.state.File(rec)
	}
}

// learnedArrival is when a record shared at t reaches the other replicas.
func learnedArrival(t, peer time.Duration) time.Duration {
	return (t/meshstate.LearnedGap+1)*meshstate.LearnedGap + peer
}

// publish has every replica's mesh state Tick at t, as the router's
// publish loop does when a change is due (meshstate.State.Due) and every
// Heartbeat/5: meshstate decides whether it publishes. With admission on
// each publication carries the replica's waiters by band on every engine
// (the fleet is one pool).
func (r *run) publish(t time.Duration) {
	for k, rep := range r.routers {
		rep.pub = rep.pub[:0]
		var waiting [3]uint64
		if r.adm != nil && !r.cfg.AloneQueues {
			q := r.adm.queues[k]
			for b := range waiting {
				waiting[b] = uint64(q.Len(admission.Band(b)))
			}
		}
		for e := range r.engines {
			rep.pub = append(rep.pub, meshstate.EngineLoad{Engine: r.keyOf[e],
				Inflight: rep.stats[e].InFlight(), Prefill: rep.stats[e].QueuedPrefill(), Waiting: waiting})
		}
		rep.state.Tick(epoch.Add(t), rep.pub)
	}
}

// changed tells replica k's mesh state its counts changed at t, as the
// router's tracker does (strategies.Tracker.Changes).
func (r *run) changed(k int, t time.Duration) {
	if r.meshOn() {
		r.routers[k].state.Changed(epoch.Add(t))
	}
}

// nextEvent is the earliest time after the last step, up to t, at which
// the mesh has something to do: a replica's change falls due, a held pick
// may go (its wait ends by itself, or a message of another replica
// arrives at its replica), or the heartbeat tick; ok is false when
// nothing is due by t.
func (r *run) nextEvent(t time.Duration) (time.Duration, bool) {
	next := r.nextPub
	for _, rep := range r.routers {
		if at, ok := rep.state.Due(); ok {
			next = min(next, at.Sub(epoch))
		}
	}
	now := epoch.Add(r.now)
	for _, h := range r.held {
		d, _ := r.routers[h.k].state.Ready(h.p, now)
		next = min(next, r.now+max(d, 0))
		if at, ok := r.nextNews(h.k); ok {
			next = min(next, at)
		}
	}
	return max(next, r.now), next <= t
}

// hold places request i in its instant's order at replica k
// (meshstate's Arrive) and holds it when Ready says it must wait; it
// reports whether it did.
func (r *run) hold(i, k int) bool {
	rep := r.routers[k]
	if !r.meshOn() || rep.lb == nil {
		return false
	}
	p := rep.state.Arrive(epoch.Add(r.now))
	if d, _ := rep.state.Ready(p, epoch.Add(r.now)); d <= 0 {
		return false
	}
	r.held = append(r.held, heldPick{i: i, k: k, p: p})
	return true
}

// releaseHeld picks, in arrival order, every held request meshstate
// releases now.
func (r *run) releaseHeld() {
	now := epoch.Add(r.now)
	var due []heldPick
	r.held = slices.DeleteFunc(r.held, func(h heldPick) bool {
		if d, _ := r.routers[h.k].state.Ready(h.p, now); d <= 0 {
			due = append(due, h)
			return true
		}
		return false
	})
	for _, h := range due {
		if r.waited == nil {
			r.waited = make([]time.Duration, len(r.flights))
		}
		r.waited[h.i] = r.now - h.p.At().Sub(epoch)
		r.route(h.i, h.k)
	}
}

// estimateUncached is the router's estimate of p's uncached prompt tokens
// on engine e: the prompt minus the resident prefix in its (lagged) view.
func (r *run) estimateUncached(e int, p *prepared) int {
	hit := r.engines[e].lag.res.prefix(p.rc.BlockKeys) * r.cfg.Engine.BlockSize
	return max(0, len(p.Tokens)-hit)
}
