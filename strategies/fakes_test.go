package strategies

// residencyIndex is a realistic fake of the cluster view's KV residency,
// shaped the way the real index should be to answer precise_cache_aware
// within its budget.
//
// Block keys are already uniformly mixed 64-bit hashes, so the table is a
// flat open-addressing array indexed by the key's low bits with linear
// probing, each entry the key followed inline by two bitsets of targets:
// held (the target stored the block) and closed (the target holds the
// block and every block before it in its chain). Because a block key
// determines its whole prefix, the closed sets along one request's keys
// only shrink, and a target's leading resident run is exactly the number
// of keys whose closed set contains it. ResidentPrefixes therefore gallops
// over the keys, finding each point where the closed set shrinks with
// O(log gap) lookups instead of reading all of them. (The real index must
// also unclose a target's descendants when it evicts a block; this fake
// only stores.) The cost is about 2·log2(gap) lookups per distinct run
// length among the targets: a few dozen for the usual fleet (everyone
// holds the system prompt, one or two targets hold the conversation), and
// no better than reading every key when every target's run differs
// (BenchmarkPreciseDistinctRuns). Key 0 marks an empty entry.
type residencyIndex struct {
	n, words int
	table    []uint64 // entries of 1+2·words uint64s: key, held, closed
	size     int      // entries
	used     int
	unknown  bitset
}

func newResidencyIndex(n int) *residencyIndex {
	r := &residencyIndex{n: n, words: (n + 63) / 64, unknown: newBitset(n)}
	r.resize(1024)
	return r
}

func (r *residencyIndex) stride() int { return 1 + 2*r.words }

func (r *residencyIndex) resize(size int) {
	old, st := r.table, r.stride()
	r.table, r.size, r.used = make([]uint64, size*st), size, 0
	for e := 0; e < len(old); e += st {
		if old[e] != 0 {
			copy(r.entry(old[e], true), old[e+1:e+st])
		}
	}
}

// entry returns k's held and closed words (held first), inserting k when
// insert is set; nil when absent.
func (r *residencyIndex) entry(k uint64, insert bool) []uint64 {
	st, mask := r.stride(), uint64(r.size-1)
	for i := k & mask; ; i = (i + 1) & mask {
		e := int(i) * st
		switch r.table[e] {
		case k:
			return r.table[e+1 : e+st]
		case 0:
			if !insert {
				return nil
			}
			r.table[e] = k
			r.used++
			return r.table[e+1 : e+st]
		}
	}
}

// store records that target t stored the chain keys, whose first key's
// parent is parent (0: the chain starts at the root).
func (r *residencyIndex) store(t int, parent uint64, keys ...uint64) {
	closed := parent == 0
	if !closed {
		if e := r.entry(parent, false); e != nil {
			closed = bitset(e[r.words:]).has(t)
		}
	}
	for _, k := range keys {
		if 2*(r.used+1) > r.size {
			r.resize(2 * r.size)
		}
		e := r.entry(k, true)
		bitset(e[:r.words]).set(t)
		if closed {
			bitset(e[r.words:]).set(t)
		}
	}
}

// add stores a chain starting at the root.
func (r *residencyIndex) add(t int, keys ...uint64) { r.store(t, 0, keys...) }

func (r *residencyIndex) ResidentPrefix(t int, keys []uint64) (int, bool) {
	if r.unknown.has(t) {
		return 0, false
	}
	for j, k := range keys {
		if e := r.entry(k, false); e == nil || !bitset(e[:r.words]).has(t) {
			return j, true
		}
	}
	return len(keys), true
}

// covers reports whether the closed set of key k contains all of set.
func (r *residencyIndex) covers(k uint64, set bitset) bool {
	e := r.entry(k, false)
	if e == nil {
		return set.empty()
	}
	c := e[r.words:]
	for w, b := range set {
		if b&^c[w] != 0 {
			return false
		}
	}
	return true
}

func (r *residencyIndex) ResidentPrefixes(keys []uint64, out []int) {
	var buf [16]uint64
	set := bitset(buf[:r.words])
	for t := range r.n {
		if r.unknown.has(t) {
			out[t] = -1
		} else {
			out[t] = 0
			set.set(t)
		}
	}
	// Invariant: every target in set holds keys[:cur] closed.
	for cur := 0; !set.empty(); {
		// Gallop for the first j ≥ cur whose closed set loses a member.
		lo, hi, step := cur, cur, 1 // keys[cur:lo] all cover set
		for hi < len(keys) && r.covers(keys[hi], set) {
			lo = hi + 1
			hi = min(len(keys), hi+step)
			step *= 2
		}
		for lo < hi { // first non-covering index in [lo, hi]
			mid := int(uint(lo+hi) >> 1)
			if r.covers(keys[mid], set) {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		for w := range set {
			for b := set[w]; b != 0; b &= b - 1 {
				out[w*64+trailingZeros(b)] = lo
			}
		}
		if lo == len(keys) {
			return
		}
		if e := r.entry(keys[lo], false); e != nil {
			for w := range set {
				set[w] &= e[r.words+w]
			}
		} else {
			clear(set)
		}
		cur = lo + 1
	}
}

// perTargetOnly hides the batch capability of a Residency.
type perTargetOnly struct{ r Residency }

func (p perTargetOnly) ResidentPrefix(t int, keys []uint64) (int, bool) {
	return p.r.ResidentPrefix(t, keys)
}

type cacheSignal map[int][3]float64 // occupancy, available (0/1), ok (0/1)

func (c cacheSignal) Occupancy(t int) (float64, bool, bool) {
	v, found := c[t]
	if !found {
		return 0, false, false
	}
	return v[0], v[1] == 1, v[2] == 1
}

type adapterView map[int]map[string]bool // nil inner map: unknown

func (a adapterView) AdapterResident(t int, adapter string) (bool, bool) {
	m, ok := a[t]
	if !ok || m == nil {
		return false, false
	}
	return m[adapter], true
}
