package strategies

import "strings"

// Learned state across config snapshots.
//
// A config change rebuilds the router's snapshot. A pool whose strategy and
// target list are unchanged keeps its balancer (the router decides that;
// see SameBalancer). A pool whose targets changed gets a new balancer, and
// what the old one learned keyed by a target's identity, rather than by
// its position, is carried over: prefix tries, session pins, recently
// served adapters and adaptive's warm-up budgets and pick counters. The
// seeds rebuild because a carried-over index could name another provider;
// state moved through a mapping by Target.ID has no such problem.
// Positional state (round_robin's rotation, weighted's running weights) is
// not carried: it has no meaning for a different list.

// Carrier is an optional LoadBalancer capability: it imports from prev, the
// balancer the pool had in the previous snapshot, whatever of prev's
// learned state it can use. from[i] is prev's index of this balancer's
// target i, or -1 for a new target. CarryOver is called once, after Build
// and before the balancer takes its first pick; prev may still be serving
// requests of the old snapshot concurrently, so it is read under its own
// locks. A prev of another strategy is fine: state is matched by kind (a
// cache_aware trie feeds a pipeline's prefix scorer and the other way).
type Carrier interface {
	CarryOver(prev LoadBalancer, from []int)
}

// Mapping returns, for each target of next, the index in prev of the
// target with the same ID, or -1. A duplicated ID maps its occurrences in
// order.
func Mapping(prev, next []Target) []int {
	from := make([]int, len(next))
	used := make([]bool, len(prev))
	for j, t := range next {
		from[j] = -1
		for i, p := range prev {
			if !used[i] && p.ID == t.ID {
				from[j], used[i] = i, true
				break
			}
		}
	}
	return from
}

// SameBalancer reports whether a balancer built over prev can keep serving
// a pool now described by next: same target identities in the same order
// with the same weights and prices. Strategy, sources and sizing are the
// caller's to compare.
func SameBalancer(prev, next []Target) bool {
	if len(prev) != len(next) {
		return false
	}
	for i := range prev {
		if prev[i] != next[i] {
			return false
		}
	}
	return true
}

// learnedParts is the identity-keyed state one balancer holds.
type learnedParts struct {
	prefix   *prefixIndex
	sessions *SessionAffinity
	lora     *LoRAResidency
	adaptive *Adaptive
}

func partsOf(lb LoadBalancer) learnedParts {
	switch b := lb.(type) {
	case *CacheAware:
		return learnedParts{prefix: b.idx, sessions: b.sessions}
	case *Adaptive:
		p := partsOf(b.fallback)
		p.adaptive = b
		return p
	case *Pipeline:
		var p learnedParts
		for _, ws := range b.scorers {
			switch s := ws.Scorer.(type) {
			case *PrefixAffinity:
				if p.prefix == nil {
					p.prefix = s.idx
				}
			case *SessionAffinity:
				if p.sessions == nil {
					p.sessions = s
				}
			case *LoRAResidency:
				if p.lora == nil {
					p.lora = s
				}
			}
		}
		return p
	}
	return learnedParts{}
}

// carry moves what old holds into p through from.
func (p learnedParts) carry(old learnedParts, from []int) {
	if p.prefix != nil && old.prefix != nil {
		p.prefix.carryFrom(old.prefix, from)
	}
	if p.sessions != nil && old.sessions != nil {
		p.sessions.carryFrom(old.sessions, from)
	}
	if p.lora != nil && old.lora != nil {
		p.lora.carryFrom(old.lora, from)
	}
	if p.adaptive != nil && old.adaptive != nil {
		p.adaptive.carryFrom(old.adaptive, from)
	}
}

// CarryOver implements Carrier.
func (c *CacheAware) CarryOver(prev LoadBalancer, from []int) {
	partsOf(c).carry(partsOf(prev), from)
}

// CarryOver implements Carrier.
func (p *Pipeline) CarryOver(prev LoadBalancer, from []int) {
	partsOf(p).carry(partsOf(prev), from)
}

// CarryOver implements Carrier.
func (a *Adaptive) CarryOver(prev LoadBalancer, from []int) {
	partsOf(a).carry(partsOf(prev), from)
}

var (
	_ Carrier = (*CacheAware)(nil)
	_ Carrier = (*Pipeline)(nil)
	_ Carrier = (*Adaptive)(nil)
)

// carryFrom gives x, for every target j with from[j] ≥ 0, the prefixes old
// remembers for target from[j], in the same least-recently-used order.
// Into an empty index (a balancer just built, the router's case) it copies
// the tree's structure in one walk, O(nodes + holds), sharing the edge
// strings; otherwise it re-inserts each target's deepest prefixes, oldest
// first. Either way x's budget then applies.
func (x *prefixIndex) carryFrom(old *prefixIndex, from []int) {
	x.mu.Lock()
	empty := len(x.root.children) == 0
	if empty {
		old.mu.RLock()
		x.cloneFrom(old, from)
		old.mu.RUnlock()
		for t := range x.n {
			for x.size[t] > x.budget {
				x.evictOne(t)
			}
		}
	}
	x.mu.Unlock()
	if empty {
		return
	}
	for j, i := range from {
		if i < 0 || i >= old.n || j >= x.n {
			continue
		}
		for _, p := range old.leafPaths(i) {
			x.insert(j, p)
		}
	}
}

// cloneFrom builds x's (empty) tree from old's, keeping only the nodes a
// mapped target holds, with holds and LRU lists remapped. Both locks are
// held by the caller.
func (x *prefixIndex) cloneFrom(old *prefixIndex, from []int) {
	copied := map[*pnode]*pnode{old.root: x.root}
	var walk func(o, n *pnode)
	walk = func(o, n *pnode) {
		for _, oc := range o.children {
			held := newBitset(x.n)
			any := false
			for j, i := range from {
				if i >= 0 && i < old.n && j < x.n && oc.held.has(i) {
					held.set(j)
					any = true
				}
			}
			if !any {
				continue // nobody mapped holds it, so nobody holds what is below
			}
			nc := &pnode{edge: oc.edge, parent: n, held: held}
			n.children = append(n.children, nc)
			copied[oc] = nc
			walk(oc, nc)
		}
	}
	walk(old.root, x.root)
	for j, i := range from {
		if i < 0 || i >= old.n || j >= x.n {
			continue
		}
		// Oldest first, each pushed to the front: the order is kept.
		ohead, head := &old.lru[i], &x.lru[j]
		for e := ohead.prev; e != ohead; e = e.prev {
			nd := copied[e.node]
			ne := &pentry{node: nd, t: j}
			nd.entries = append(nd.entries, ne)
			ne.prev, ne.next = head, head.next
			head.next.prev = ne
			head.next = ne
			x.size[j] += len(nd.edge)
		}
	}
}

// leafPaths returns the full prompts of the nodes t holds none of whose
// children t holds, least recently used first.
func (x *prefixIndex) leafPaths(t int) []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	var out []string
	var b strings.Builder
	var chain []*pnode
	head := &x.lru[t]
	for e := head.prev; e != head; e = e.prev {
		nd := e.node
		leaf := true
		for _, ch := range nd.children {
			if ch.held.has(t) {
				leaf = false
				break
			}
		}
		if !leaf {
			continue
		}
		chain = chain[:0]
		for n := nd; n != x.root; n = n.parent {
			chain = append(chain, n)
		}
		b.Reset()
		for k := len(chain) - 1; k >= 0; k-- {
			b.WriteString(chain[k].edge)
		}
		out = append(out, b.String())
	}
	return out
}

// carryFrom copies old's live pins onto the targets they map to.
func (s *SessionAffinity) carryFrom(old *SessionAffinity, from []int) {
	to := inverse(from, -1)
	type pin struct {
		key string
		sessionPin
	}
	old.mu.RLock()
	pins := make([]pin, 0, len(old.pins))
	for k, p := range old.pins {
		pins = append(pins, pin{k, p})
	}
	old.mu.RUnlock()
	now := s.clock.Now().UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range pins {
		if p.expires <= now || p.target < 0 || p.target >= len(to) || to[p.target] < 0 {
			continue
		}
		if cur, ok := s.pins[p.key]; !ok || p.expires > cur.expires {
			s.pins[p.key] = sessionPin{target: to[p.target], expires: p.expires}
		}
	}
}

// inverse returns to with to[from[j]] = j, sized to the largest index
// plus one; unmapped entries hold none.
func inverse(from []int, none int) []int {
	n := 0
	for _, i := range from {
		n = max(n, i+1)
	}
	to := make([]int, n)
	for i := range to {
		to[i] = none
	}
	for j, i := range from {
		if i >= 0 {
			to[i] = j
		}
	}
	return to
}

// carryFrom copies each mapped target's recently served adapters, oldest
// first so the LRU order survives (and the new capacity bounds it).
func (s *LoRAResidency) carryFrom(old *LoRAResidency, from []int) {
	for j, i := range from {
		if i < 0 || i >= len(old.lrus) || j >= len(s.lrus) {
			continue
		}
		for _, name := range old.lrus[i].byAge() {
			s.lrus[j].touch(name)
		}
	}
}

// byAge returns the adapters held, least recently used first.
func (l *adapterLRU) byAge() []string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	idx := make([]int, len(l.names))
	for i := range idx {
		idx[i] = i
	}
	for a := 1; a < len(idx); a++ { // insertion sort: max-loras entries
		for b := a; b > 0 && l.used[idx[b]] < l.used[idx[b-1]]; b-- {
			idx[b], idx[b-1] = idx[b-1], idx[b]
		}
	}
	out := make([]string, len(idx))
	for k, i := range idx {
		out[k] = l.names[i]
	}
	return out
}

// carryFrom keeps each mapped target's spent warm-up budget (the seed's
// budget is eight picks in total, not eight per config change), its pick
// and served counters and the route's decision split.
func (a *Adaptive) carryFrom(old *Adaptive, from []int) {
	for j, i := range from {
		if i < 0 || i >= old.n || j >= a.n {
			continue
		}
		a.warmup[j].Store(old.warmup[i].Load())
		a.picks[j].Store(old.picks[i].Load())
		a.served[j].Store(old.served[i].Load())
		a.lastPick[j].Store(old.lastPick[i].Load())
	}
	for m := range a.decisions {
		a.decisions[m].Store(old.decisions[m].Load())
	}
}
