package engine

import "container/list"

// cpuTier is a simulated LMCache CPU tier: every block the GPU computes is
// also stored here (LMCache's store-on-compute), up to capacity blocks,
// evicting least-recently-used. A request whose prompt continues past its
// GPU hit into blocks held here loads them instead of recomputing them.
type cpuTier struct {
	capacity int
	lru      *list.List // front = most recent; values are keys
	at       map[uint64]*list.Element
	hits     uint64 // tokens loaded
}

func newCPUTier(capacity int) *cpuTier {
	return &cpuTier{capacity: capacity, lru: list.New(), at: make(map[uint64]*list.Element)}
}

func (c *cpuTier) store(key uint64) {
	if c == nil || c.capacity <= 0 {
		return
	}
	if e, ok := c.at[key]; ok {
		c.lru.MoveToFront(e)
		return
	}
	c.at[key] = c.lru.PushFront(key)
	for c.lru.Len() > c.capacity {
		e := c.lru.Back()
		c.lru.Remove(e)
		delete(c.at, e.Value.(uint64))
	}
}

// prefix returns how many of keys, from the first, the tier holds, at most
// limit, marking them used.
func (c *cpuTier) prefix(keys []uint64, limit int) int {
	if c == nil {
		return 0
	}
	n := 0
	for n < len(keys) && n < limit {
		e, ok := c.at[keys[n]]
		if !ok {
			break
		}
		c.lru.MoveToFront(e)
		n++
	}
	return n
}

func (c *cpuTier) used() int {
	if c == nil {
		return 0
	}
	return c.lru.Len()
}

func (c *cpuTier) clear() {
	if c == nil {
		return
	}
	c.lru.Init()
	clear(c.at)
}
