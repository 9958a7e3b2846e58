package strategies

import "math/bits"

// loadOf returns loads[i], or 0 when the router passed a shorter slice.
func loadOf(loads []uint64, i int) uint64 {
	if i < len(loads) {
		return loads[i]
	}
	return 0
}

// rejectionTries is how many uniform draws pickUniform makes before it
// counts the candidates exactly. With every target eligible the first draw
// wins, which keeps random and power_of_two O(1).
const rejectionTries = 8

// pickUniform returns a target drawn uniformly from the eligible targets in
// [0, n) other than skip (pass -1 to skip none). Draws are rejected until an
// eligible one comes up; after rejectionTries misses the eligible targets are
// counted and one is chosen exactly, so the result is uniform either way.
func pickUniform(r Rand, n int, eligible Eligible, skip int) (int, bool) {
	if n <= 0 {
		return 0, false
	}
	for range rejectionTries {
		i := r.IntN(n)
		if i != skip && isEligible(eligible, i) {
			return i, true
		}
	}
	m := 0
	for i := range n {
		if i != skip && isEligible(eligible, i) {
			m++
		}
	}
	if m == 0 {
		return 0, false
	}
	k := r.IntN(m)
	for i := range n {
		if i != skip && isEligible(eligible, i) {
			if k == 0 {
				return i, true
			}
			k--
		}
	}
	return 0, false
}

// bitset is a fixed-size set of target indices.
type bitset []uint64

func newBitset(n int) bitset { return make(bitset, (n+63)/64) }

func (b bitset) has(i int) bool { return b[i>>6]&(1<<(uint(i)&63)) != 0 }
func (b bitset) set(i int)      { b[i>>6] |= 1 << (uint(i) & 63) }
func (b bitset) clear(i int)    { b[i>>6] &^= 1 << (uint(i) & 63) }

func (b bitset) empty() bool {
	for _, w := range b {
		if w != 0 {
			return false
		}
	}
	return true
}

// intersects reports whether b and o share a member.
func (b bitset) intersects(o bitset) bool {
	for i, w := range b {
		if w&o[i] != 0 {
			return true
		}
	}
	return false
}

// fill sets b to the eligible targets in [0, n).
func (b bitset) fill(n int, eligible Eligible) {
	for i := range b {
		b[i] = 0
	}
	for i := range n {
		if isEligible(eligible, i) {
			b.set(i)
		}
	}
}

func trailingZeros(w uint64) int { return bits.TrailingZeros64(w) }
