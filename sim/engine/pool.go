package engine

import (
	"github.com/rolter/rolter/kvblock"
	"github.com/rolter/rolter/sim/kvevents"
)

// block is one physical KV block of the pool.
type block struct {
	id     int
	ref    int // requests using the block
	cached bool
	key    uint64 // rolter block key (lookup key) when cached
	digest kvevents.Digest
	// free-list links; a block is in the free list iff ref == 0.
	prev, next *block
}

// pool is the paged KV cache: a fixed set of blocks, a map from block key
// to the cached blocks holding it, and vLLM's free-block queue. Blocks
// enter the queue's tail when their last user frees them (a request's
// blocks are freed last-block-first, so its tail is evicted first) and
// allocation takes from the head, evicting the cached contents of the
// block it takes: least-recently-freed first. A cached free block that is
// hit again leaves the queue until freed again.
type pool struct {
	blocks []block
	head   block // sentinel of the free list
	nfree  int
	cached map[uint64][]*block

	events []kvevents.Event // pending removals and stores of this step
}

func newPool(n int) *pool {
	p := &pool{blocks: make([]block, n), cached: make(map[uint64][]*block)}
	p.head.prev, p.head.next = &p.head, &p.head
	for i := range p.blocks {
		p.blocks[i].id = i
		p.pushTail(&p.blocks[i])
	}
	return p
}

func (p *pool) pushTail(b *block) {
	b.prev, b.next = p.head.prev, &p.head
	p.head.prev.next = b
	p.head.prev = b
	p.nfree++
}

func (p *pool) unlink(b *block) {
	b.prev.next, b.next.prev = b.next, b.prev
	b.prev, b.next = nil, nil
	p.nfree--
}

// lookup returns the first cached block holding key, if any.
func (p *pool) lookup(key uint64) *block {
	if bs := p.cached[key]; len(bs) > 0 {
		return bs[0]
	}
	return nil
}

// hitBlocks returns how many of keys, from the first, are cached (at most
// limit) and how many of those sit in the free queue.
func (p *pool) hitBlocks(keys []uint64, limit int) (hits, inFree int) {
	for hits < len(keys) && hits < limit {
		b := p.lookup(keys[hits])
		if b == nil {
			break
		}
		if b.ref == 0 {
			inFree++
		}
		hits++
	}
	return hits, inFree
}

// touch takes a reference on b, removing it from the free queue.
func (p *pool) touch(b *block) {
	if b.ref == 0 {
		p.unlink(b)
	}
	b.ref++
}

// allocate takes n blocks from the head of the free queue, evicting what
// they cached. It returns nil when fewer than n blocks are free.
func (p *pool) allocate(n int) []*block {
	if n > p.nfree {
		return nil
	}
	out := make([]*block, n)
	for i := range out {
		b := p.head.next
		p.unlink(b)
		if b.cached {
			p.uncache(b)
		}
		b.ref = 1
		out[i] = b
	}
	return out
}

// uncache drops b from the cache map and records a BlockRemoved.
func (p *pool) uncache(b *block) {
	bs := p.cached[b.key]
	for i, x := range bs {
		if x == b {
			bs = append(bs[:i], bs[i+1:]...)
			break
		}
	}
	if len(bs) == 0 {
		delete(p.cached, b.key)
	} else {
		p.cached[b.key] = bs
	}
	b.cached = false
	p.events = append(p.events, kvevents.Event{Kind: kvblock.BlockRemoved, Hashes: []kvevents.Digest{b.digest}})
}

// cache registers b as holding key. Duplicate physical copies of a key are
// kept, as in vLLM; each is announced and each is removed on eviction.
func (p *pool) cache(b *block, key uint64, digest kvevents.Digest) {
	b.cached, b.key, b.digest = true, key, digest
	p.cached[key] = append(p.cached[key], b)
}

// free drops one reference on each block, last block first, so that the
// tail of a request's chain is evicted before its head.
func (p *pool) free(bs []*block) {
	for i := len(bs) - 1; i >= 0; i-- {
		b := bs[i]
		b.ref--
		if b.ref == 0 {
			p.pushTail(b)
		}
	}
}

// clear forgets every cached block (in use or free) and records one
// AllBlocksCleared.
func (p *pool) clear() {
	for i := range p.blocks {
		p.blocks[i].cached = false
	}
	clear(p.cached)
	p.events = append(p.events, kvevents.Event{Kind: kvblock.AllBlocksCleared})
}

// used is the number of blocks held by requests.
func (p *pool) used() int { return len(p.blocks) - p.nfree }

// takeEvents returns and resets the pending events.
func (p *pool) takeEvents() []kvevents.Event {
	ev := p.events
	p.events = nil
	return ev
}
