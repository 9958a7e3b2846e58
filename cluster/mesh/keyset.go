package mesh

import (
	"math/bits"
	"sync/atomic"
)

// keySet is an open-addressing set of 64-bit block keys with linear probing,
// built for one writer and many lock-free readers.
//
// Concurrency contract: Add, Remove and the constructors are called by one
// goroutine at a time (the caller serialises writers, e.g. with a mutex per
// engine). Has may be called concurrently with a writer from any number of
// goroutines and never blocks or allocates. Slots are written with atomic
// stores and only ever move empty → key, key → tombstone or tombstone → key,
// so a reader's probe chain is never cut short by a concurrent write; a
// growth builds a new table and publishes it with one atomic pointer swap.
//
// Memory: 8 bytes per slot; a rebuild leaves the load in (0.28, 0.57] and
// tombstones are swept then, so at most 28.6 bytes per resident key.
type keySet struct {
	tab atomic.Pointer[keyTable]
}

// Reserved slot values. A real key equal to one of them is tracked by a flag.
const (
	slotEmpty uint64 = 0
	slotTomb  uint64 = 1
)

type keyTable struct {
	slots []atomic.Uint64
	mask  uint64
	shift uint8
	// n counts live keys, tombs the tombstones (writer-owned, read atomically
	// for reporting).
	n     atomic.Int64
	tombs int
	// hasZero/hasOne record the two reserved key values.
	hasZero atomic.Bool
	hasOne  atomic.Bool
	// digest is the sum of mixKey over the live keys.
	digest atomic.Uint64
}

const minSlots = 64

func newKeyTable(capacity int) *keyTable {
	n := minSlots
	for n*3/4 < capacity {
		n <<= 1
	}
	return &keyTable{slots: make([]atomic.Uint64, n), mask: uint64(n - 1), shift: uint8(64 - bits.TrailingZeros(uint(n)))}
}

// mixKey spreads a key over 64 bits; used for slot positions and digests so a
// hostile key pattern cannot cluster the table. Keys are already hashes, but
// the sidecar is not trusted.
func mixKey(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

func (t *keyTable) home(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> t.shift }

func (t *keyTable) has(k uint64) bool {
	switch k {
	case slotEmpty:
		return t.hasZero.Load()
	case slotTomb:
		return t.hasOne.Load()
	}
	for i, probes := t.home(k), uint64(0); probes <= t.mask; i, probes = (i+1)&t.mask, probes+1 {
		switch t.slots[i].Load() {
		case k:
			return true
		case slotEmpty:
			return false
		}
	}
	return false
}

// add inserts k and reports whether it was absent. It does not grow.
func (t *keyTable) add(k uint64) bool {
	switch k {
	case slotEmpty, slotTomb:
		flag := &t.hasZero
		if k == slotTomb {
			flag = &t.hasOne
		}
		if flag.Load() {
			return false
		}
		flag.Store(true)
		t.n.Add(1)
		t.digest.Add(mixKey(k))
		return true
	}
	firstTomb := int64(-1)
	for i, probes := t.home(k), uint64(0); probes <= t.mask; i, probes = (i+1)&t.mask, probes+1 {
		switch v := t.slots[i].Load(); v {
		case k:
			return false
		case slotTomb:
			if firstTomb < 0 {
				firstTomb = int64(i)
			}
		case slotEmpty:
			at := i
			if firstTomb >= 0 {
				at = uint64(firstTomb)
				t.tombs--
			}
			t.slots[at].Store(k)
			t.n.Add(1)
			t.digest.Add(mixKey(k))
			return true
		}
	}
	if firstTomb >= 0 {
		t.slots[firstTomb].Store(k)
		t.tombs--
		t.n.Add(1)
		t.digest.Add(mixKey(k))
		return true
	}
	return false // full; callers grow before this can happen
}

func (t *keyTable) remove(k uint64) bool {
	switch k {
	case slotEmpty, slotTomb:
		flag := &t.hasZero
		if k == slotTomb {
			flag = &t.hasOne
		}
		if !flag.Load() {
			return false
		}
		flag.Store(false)
		t.n.Add(-1)
		t.digest.Add(-mixKey(k))
		return true
	}
	for i, probes := t.home(k), uint64(0); probes <= t.mask; i, probes = (i+1)&t.mask, probes+1 {
		switch t.slots[i].Load() {
		case k:
			t.slots[i].Store(slotTomb)
			t.tombs++
			t.n.Add(-1)
			t.digest.Add(-mixKey(k))
			return true
		case slotEmpty:
			return false
		}
	}
	return false
}

// each calls f for every live key.
func (t *keyTable) each(f func(uint64)) {
	if t.hasZero.Load() {
		f(slotEmpty)
	}
	if t.hasOne.Load() {
		f(slotTomb)
	}
	for i := range t.slots {
		if v := t.slots[i].Load(); v != slotEmpty && v != slotTomb {
			f(v)
		}
	}
}

func newKeySet(capacity int) *keySet {
	s := &keySet{}
	s.tab.Store(newKeyTable(capacity))
	return s
}

// Has reports whether k is in the set. Safe for concurrent use with a writer.
func (s *keySet) Has(k uint64) bool { return s.tab.Load().has(k) }

// Len returns the number of keys.
func (s *keySet) Len() int { return int(s.tab.Load().n.Load()) }

// Digest returns the order-independent digest of the keys (see setDigest).
func (s *keySet) Digest() uint64 { return s.tab.Load().digest.Load() }

// Bytes returns the memory held by the slot array.
func (s *keySet) Bytes() int { return len(s.tab.Load().slots) * 8 }

// Add inserts k (writer only) and reports whether it was absent.
func (s *keySet) Add(k uint64) bool {
	t := s.tab.Load()
	if (int(t.n.Load())+t.tombs+1)*4 > len(t.slots)*3 {
		t = s.rebuild(int(t.n.Load()) + 1)
	}
	return t.add(k)
}

// Remove deletes k (writer only) and reports whether it was present.
func (s *keySet) Remove(k uint64) bool { return s.tab.Load().remove(k) }

// Each calls f for every key. Run concurrently with a writer it sees some
// mix of the set before and after the concurrent changes.
func (s *keySet) Each(f func(uint64)) { s.tab.Load().each(f) }

// rebuild copies the live keys into a table sized for need and publishes it.
// Tombstones are dropped; the table shrinks when most keys were removed,
// and the new table is the smallest power of two holding 4/3·need at load
// ≤ 3/4, so load after a rebuild is in (0.28, 0.57]: ≤ 28.6 bytes per key.
func (s *keySet) rebuild(need int) *keyTable {
	old := s.tab.Load()
	nt := newKeyTable(need + need/3)
	old.each(func(k uint64) { nt.add(k) })
	s.tab.Store(nt)
	return nt
}

// setDigest is the digest the sidecar and the router both compute over a key
// set: the wrapping sum of mixKey over its keys. It is independent of order
// and can be updated incrementally on add and remove.
func setDigest(keys []uint64) uint64 {
	var d uint64
	for _, k := range keys {
		d += mixKey(k)
	}
	return d
}
