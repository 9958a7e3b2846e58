package strategies

import (
	"math/bits"
	"slices"
	"strconv"
)

// VirtualNodes is how many points each target has on the consistent-hash
// ring (compat.md).
const VirtualNodes = 100

// hashProbes is how many points of the ring a key is hashed to; see
// ConsistentHash.
const hashProbes = 8

// Hash64 is the stable 64-bit hash of consistent_hash: FNV-1a 64 over the
// bytes of s, then the splitmix64 finaliser (Mix64) to spread FNV's weak
// high bits. It is fixed: routers of one mesh must agree on it, so changing
// it moves every session.
func Hash64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return Mix64(h)
}

// Mix64 is the splitmix64 finaliser: a bijection on uint64 whose output
// bits each depend on every input bit.
func Mix64(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xBF58476D1CE4E5B9
	h ^= h >> 27
	h *= 0x94D049BB133111EB
	h ^= h >> 31
	return h
}

const golden = 0x9E3779B97F4A7C15

// ConsistentHash pins a key to a target with a hash ring of VirtualNodes
// points per target. Inputs: the key, which is RouteContext.SessionKey
// (x-session-id) when set, else PromptDigest (the router's digest of the
// whole conversation, or of the raw body), else the bounded Prompt; the
// targets' IDs; the eligibility mask. Loads are ignored.
//
// Point k of target t sits at Mix64(Hash64(t.ID) + (k+1)·φ) (φ = 2⁶⁴/golden
// ratio), so a point's position depends only on its own target's identity.
// A key is hashed to hashProbes positions p_j = Mix64(h + j·φ) (h = Hash64
// of the session key, or Mix64 of the digest); each probe's successor is the
// first point clockwise whose target is eligible, and the probe with the
// shortest clockwise distance wins (multi-probe consistent hashing,
// Appleton & O'Reilly 2015). A plain 100-point ring leaves each target's
// share about ±10% (one standard deviation) off fair; the probes tighten it
// to a few percent. Removing a target (or making it ineligible) only
// lengthens the distances of probes that landed on its points, so only its
// own keys move.
type ConsistentHash struct {
	points []uint64 // sorted ring positions
	owners []int32  // owners[j] is the target of points[j]
	index  []int32  // index[b]: first j with points[j]>>shift ≥ b
	shift  uint
}

var _ LoadBalancer = (*ConsistentHash)(nil)

func newConsistentHash(s Spec) (LoadBalancer, error) {
	type point struct {
		pos   uint64
		owner int32
	}
	ps := make([]point, 0, len(s.Targets)*VirtualNodes)
	for t, tg := range s.Targets {
		id := tg.ID
		if id == "" {
			id = "#" + strconv.Itoa(t)
		}
		base := Hash64(id)
		for k := range VirtualNodes {
			ps = append(ps, point{Mix64(base + uint64(k+1)*golden), int32(t)})
		}
	}
	slices.SortFunc(ps, func(a, b point) int {
		if a.pos != b.pos {
			if a.pos < b.pos {
				return -1
			}
			return 1
		}
		return int(a.owner - b.owner)
	})
	c := &ConsistentHash{points: make([]uint64, len(ps)), owners: make([]int32, len(ps))}
	for j, p := range ps {
		c.points[j], c.owners[j] = p.pos, p.owner
	}
	// A bucket index over the top bits turns the successor search into a
	// table read plus a short scan.
	b := bits.Len(uint(len(ps)))
	c.shift = uint(64 - b)
	c.index = make([]int32, 1<<b+1)
	j := 0
	for bucket := range c.index {
		for j < len(c.points) && c.points[j]>>c.shift < uint64(bucket) {
			j++
		}
		c.index[bucket] = int32(j)
	}
	return c, nil
}

// Name implements LoadBalancer.
func (*ConsistentHash) Name() string { return "consistent_hash" }

// Pick implements LoadBalancer.
func (c *ConsistentHash) Pick(ctx *RouteContext, loads []uint64) (int, bool) {
	return c.PickEligible(ctx, loads, nil)
}

// KeyHash is the 64-bit key consistent_hash places ctx at.
func KeyHash(ctx *RouteContext) uint64 {
	switch {
	case ctx == nil:
		return 0
	case ctx.SessionKey != "":
		return Hash64(ctx.SessionKey)
	case ctx.PromptDigest != 0:
		return Mix64(ctx.PromptDigest)
	default:
		return Hash64(ctx.Prompt)
	}
}

// PickEligible implements LoadBalancer.
func (c *ConsistentHash) PickEligible(ctx *RouteContext, _ []uint64, eligible Eligible) (int, bool) {
	h := KeyHash(ctx)
	best, bestDist := -1, uint64(0)
	for p := range hashProbes {
		probe := Mix64(h + uint64(p)*golden)
		j, ok := c.successor(probe, eligible)
		if !ok {
			return 0, false
		}
		d := c.points[j] - probe // clockwise distance, wraps mod 2⁶⁴
		if best < 0 || d < bestDist {
			best, bestDist = int(c.owners[j]), d
		}
	}
	return best, true
}

// successor returns the index of the first ring point at or after pos whose
// owner is eligible.
func (c *ConsistentHash) successor(pos uint64, eligible Eligible) (int, bool) {
	j := int(c.index[pos>>c.shift])
	for j < len(c.points) && c.points[j] < pos {
		j++
	}
	for range len(c.points) {
		if j == len(c.points) {
			j = 0
		}
		if isEligible(eligible, int(c.owners[j])) {
			return j, true
		}
		j++
	}
	return 0, false
}

// Observe implements LoadBalancer; the ring learns nothing.
func (*ConsistentHash) Observe(int, *RouteContext) {}
