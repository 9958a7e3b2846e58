package fleet

import (
	"time"

	"github.com/rolter/rolter/strategies"
)

// The replicas' mesh, as cmd/rolter/mesh.go runs it between real routers:
//
//   - Learning. After a replica's balancer observes a pick it shares the
//     request's prompt prefixes (FNV-1a of the first 64, 128, 256, … bytes
//     and of the whole bounded prompt) and its session key with the chosen
//     target, each (key, target) pair once. Another replica files a record
//     when it arrives, GossipDelay after it was shared (newest record per
//     key wins, 10 minute TTL, table bounded to 65 536 keys), and before
//     its next pick for a prompt or session that matches a filed key it
//     hands the record to its balancer (ObservePrefixRemote with the
//     matching prefix, PinSession with the arrival time) and drops it.
//   - Load. Every 250 ms a replica publishes its in-flight count per
//     engine; the others fold the last count that has arrived (published
//     ≤ now − GossipDelay) into the engine's load: own in-flight +
//     max(engine running and waiting − own published in-flight, the other
//     replicas' in-flight), as cluster/mesh's View.Load and router/proxy.go
//     do.

// Mesh parameters (cmd/rolter/mesh.go).
const (
	meshTTL          = 10 * time.Minute
	meshMaxLearned   = 1 << 16
	inflightInterval = 250 * time.Millisecond
	meshPool         = "fleet" // the route key both ends hash with
)

// The balancers' mesh hooks, as the real router type-asserts them.
type prefixImporter interface {
	ObservePrefixRemote(target int, prefix string)
}
type sessionImporter interface {
	PinSession(key string, target int, at time.Time)
}

// learnedRec is one shared observation on the gossip wire.
type learnedRec struct {
	at     time.Duration // when it was shared
	from   int           // sharing replica
	key    uint64
	target int
}

type learnedEntry struct {
	target      int
	at, expires time.Duration
}

// meshPeer is one replica's end of the mesh.
type meshPeer struct {
	next  int                     // first log record not yet delivered
	table map[uint64]learnedEntry // filed records by key
	sent  map[uint64]int          // key → target already shared or received
	// begins and ends are this replica's attempt start and end times per
	// engine, ascending: its in-flight count at any past time.
	begins, ends [][]time.Duration
}

func newMeshPeer(engines int) *meshPeer {
	return &meshPeer{table: map[uint64]learnedEntry{}, sent: map[uint64]int{},
		begins: make([][]time.Duration, engines), ends: make([][]time.Duration, engines)}
}

// inflightAt is the replica's in-flight count on engine e at t.
func (p *meshPeer) inflightAt(e int, t time.Duration) uint64 {
	in, out := countLE(p.begins[e], t), countLE(p.ends[e], t)
	if in <= out {
		return 0
	}
	return uint64(in - out)
}

// ended records that an attempt on engine e ended at t (kept sorted: the
// completions of one advance are reported in time order, but a failure at
// submit can precede a later-reported completion).
func (p *meshPeer) ended(e int, t time.Duration) {
	s := p.ends[e]
	i := len(s)
	for i > 0 && s[i-1] > t {
		i--
	}
	if i == len(s) {
		p.ends[e] = append(s, t)
		return
	}
	s = append(s, 0)
	copy(s[i+1:], s[i:])
	s[i] = t
	p.ends[e] = s
}

// shares reports whether the replicas learn from each other at all: the
// mesh hands records only to balancers with a hook, so without one the
// exchange changes nothing and is skipped.
func (r *run) shares(lb strategies.LoadBalancer) bool {
	if r.cfg.Isolated || r.cfg.Routers < 2 {
		return false
	}
	_, p := lb.(prefixImporter)
	_, s := lb.(sessionImporter)
	return p || s
}

// deliver files at replica k every record that has reached it by now.
func (r *run) deliver(k int) {
	p := r.routers[k].mesh
	for p.next < len(r.learned) && r.learned[p.next].at+r.cfg.GossipDelay <= r.now {
		rec := r.learned[p.next]
		p.next++
		if rec.from == k {
			continue
		}
		arrived := rec.at + r.cfg.GossipDelay
		if len(p.table) >= meshMaxLearned {
			for key, e := range p.table {
				if arrived >= e.expires {
					delete(p.table, key)
				}
			}
			if len(p.table) >= meshMaxLearned {
				clear(p.table)
			}
		}
		p.table[rec.key] = learnedEntry{target: rec.target, at: arrived, expires: arrived + meshTTL}
		if len(p.sent) >= meshMaxLearned {
			clear(p.sent)
		}
		p.sent[rec.key] = rec.target
	}
}

// recall imports into replica k's balancer what the others shared about
// rc's prompt prefixes and session (the real router's Learner.Recall).
func (r *run) recall(k int, rc *strategies.RouteContext) {
	rep := r.routers[k]
	r.deliver(k)
	if len(rep.mesh.table) == 0 {
		return
	}
	if pi, ok := rep.lb.(prefixImporter); ok && rc.Prompt != "" {
		r.hashes = strategies.AppendPrefixHashes(r.hashes[:0], meshPool, rc.Prompt)
		for _, ph := range r.hashes {
			if e, ok := rep.mesh.table[ph.Hash]; ok {
				delete(rep.mesh.table, ph.Hash)
				if r.now < e.expires {
					pi.ObservePrefixRemote(e.target, rc.Prompt[:ph.Cut])
				}
			}
		}
	}
	if si, ok := rep.lb.(sessionImporter); ok && rc.SessionKey != "" {
		h := strategies.SessionHash(meshPool, rc.SessionKey)
		if e, ok := rep.mesh.table[h]; ok {
			delete(rep.mesh.table, h)
			if r.now < e.expires {
				si.PinSession(rc.SessionKey, e.target, epoch.Add(e.at))
			}
		}
	}
}

// observed shares rc's prefixes and session pin on target from replica k
// (the real router's Learner.Observed), each (key, target) pair once.
func (r *run) observed(k, target int, rc *strategies.RouteContext) {
	p := r.routers[k].mesh
	share := func(key uint64) {
		if t, ok := p.sent[key]; ok && t == target {
			return
		}
		if len(p.sent) >= meshMaxLearned {
			clear(p.sent)
		}
		p.sent[key] = target
		r.learned = append(r.learned, learnedRec{at: r.now, from: k, key: key, target: target})
	}
	if rc.Prompt != "" {
		r.hashes = strategies.AppendPrefixHashes(r.hashes[:0], meshPool, rc.Prompt)
		for _, ph := range r.hashes {
			share(ph.Hash)
		}
	}
	if rc.SessionKey != "" {
		share(strategies.SessionHash(meshPool, rc.SessionKey))
	}
}

// peerInflight is the sum of the other replicas' in-flight counts on
// engine e as replica k last received them: published at the latest
// 250 ms tick at or before now − GossipDelay.
func (r *run) peerInflight(k, e int) uint64 {
	if r.cfg.Isolated || r.cfg.Routers < 2 {
		return 0
	}
	seen := r.now - r.cfg.GossipDelay
	if seen < 0 {
		return 0
	}
	tick := seen / inflightInterval * inflightInterval
	var sum uint64
	for j, rep := range r.routers {
		if j != k {
			sum += rep.mesh.inflightAt(e, tick)
		}
	}
	return sum
}

// ownPublished is replica k's own in-flight on engine e as it last
// published it (the latest 250 ms tick); 0 when replicas do not gossip.
func (r *run) ownPublished(k, e int) uint64 {
	if r.cfg.Isolated || r.cfg.Routers < 2 {
		return 0
	}
	return r.routers[k].mesh.inflightAt(e, r.now/inflightInterval*inflightInterval)
}

// queuedPrefill fills replica k's QueuedPrefill: per engine, the
// estimated uncached prompt tokens of its own requests that have no first
// token yet (known now: the router sees the first byte), plus the other
// replicas' sums as published at the last 250 ms tick that has arrived.
// (A peer request that had no first token at the tick but has completed
// since is no longer in the engine's outstanding list and is missed: a
// slight undercount of the peers' part.)
func (r *run) queuedPrefill(k int) {
	rep := r.routers[k]
	tick := time.Duration(-1)
	if !r.cfg.Isolated && r.cfg.Routers > 1 {
		if seen := r.now - r.cfg.GossipDelay; seen >= 0 {
			tick = seen / inflightInterval * inflightInterval
		}
	}
	for e, n := range r.engines {
		var q uint64
		for _, f := range n.outstanding {
			if f.router == k {
				if f.first < 0 || f.first > r.now {
					q += uint64(f.estUncached)
				}
				continue
			}
			if tick >= 0 && f.at <= tick && (f.first < 0 || f.first > tick) {
				q += uint64(f.estUncached)
			}
		}
		rep.queued[e] = q
	}
}

// estimateUncached is the router's estimate of p's uncached prompt tokens
// on engine e: the prompt minus the resident prefix in its (lagged) view.
func (r *run) estimateUncached(e int, p *prepared) int {
	hit := r.engines[e].lag.res.prefix(p.rc.BlockKeys) * r.cfg.Engine.BlockSize
	return max(0, len(p.Tokens)-hit)
}
