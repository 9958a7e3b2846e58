package strategies

import (
	"strings"
	"sync"
)

// DefaultPrefixBytes is the default per-target budget of the prefix index:
// how many prompt bytes it remembers for one target before it evicts that
// target's least recently used prefixes (128 whole 32 KiB prompts; far
// more conversations when they share a system prompt). An index holds at
// most targets × budget bytes plus per-node bookkeeping.
const DefaultPrefixBytes = 4 << 20

// prefixIndex is the approximate prefix-affinity state of cache_aware and
// of the pipeline's prefix scorer: one radix tree over the prompt bytes the
// route has served, whose every node records which targets served a prompt
// running through it. Per target it is a bounded prefix trie with LRU
// eviction; sharing the nodes lets one walk down the tree score every
// target at once.
//
// Invariant: a target that holds a node holds all its ancestors, and holds
// them more recently used than the node (an insert touches its path leaf
// first, root last), so the least recently used entry of a target, the one
// eviction removes, is always a leaf for that target.
//
// Concurrency: match runs under the read lock, insert under the write lock.
type prefixIndex struct {
	mu     sync.RWMutex
	n      int
	budget int
	root   *pnode
	size   []int    // bytes held per target
	lru    []pentry // sentinel of each target's LRU list (next = most recent)
}

type pnode struct {
	edge     string
	parent   *pnode
	children []*pnode
	held     bitset
	entries  []*pentry // one per holder
}

// pentry is target t's hold on node: an element of t's LRU list.
type pentry struct {
	node       *pnode
	t          int
	prev, next *pentry
}

func newPrefixIndex(n, budget int) *prefixIndex {
	if budget <= 0 {
		budget = DefaultPrefixBytes
	}
	x := &prefixIndex{n: n, budget: budget, size: make([]int, n), lru: make([]pentry, n)}
	x.root = &pnode{held: newBitset(n)}
	for t := range x.lru {
		x.lru[t].next, x.lru[t].prev = &x.lru[t], &x.lru[t]
	}
	return x
}

// commonPrefix returns the length of the longest common prefix of a and b.
// It compares 64-byte chunks with the runtime's vectorised string equality
// before finding the mismatching byte.
func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i+64 <= n && a[i:i+64] == b[i:i+64] {
		i += 64
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

func (nd *pnode) child(c byte) *pnode {
	for _, ch := range nd.children {
		if ch.edge[0] == c {
			return ch
		}
	}
	return nil
}

// match zeroes out, then writes into out[t], for every target t in cand,
// how many leading bytes of prompt t holds, and returns the largest such
// count. Targets outside cand keep 0 and never raise the result.
func (x *prefixIndex) match(prompt string, cand bitset, out []int) int {
	for i := range out {
		out[i] = 0
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	nd, matched, best := x.root, 0, 0
	for matched < len(prompt) {
		ch := nd.child(prompt[matched])
		if ch == nil || !ch.held.intersects(cand) {
			break
		}
		c := commonPrefix(ch.edge, prompt[matched:])
		matched += c
		for w, word := range ch.held {
			word &= cand[w]
			for word != 0 {
				b := trailingZeros(word)
				out[w*64+b] = matched
				word &= word - 1
			}
		}
		best = matched
		if c < len(ch.edge) {
			break
		}
		nd = ch
	}
	return best
}

// bytesHeld returns how many prompt bytes the index remembers for t.
func (x *prefixIndex) bytesHeld(t int) int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.size[t]
}

// insert records that target t served a prompt starting with prompt, then
// evicts t's least recently used prefixes until t is within budget. It
// allocates only for bytes the tree has not seen before.
func (x *prefixIndex) insert(t int, prompt string) {
	if t < 0 || t >= x.n || prompt == "" {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	nd, pos := x.root, 0
	for pos < len(prompt) {
		ch := nd.child(prompt[pos])
		if ch == nil {
			ch = &pnode{edge: strings.Clone(prompt[pos:]), parent: nd, held: newBitset(x.n)}
			nd.children = append(nd.children, ch)
		} else if c := commonPrefix(ch.edge, prompt[pos:]); c < len(ch.edge) {
			ch = x.split(ch, c)
		}
		pos += len(ch.edge)
		nd = ch
	}
	// Touch the path leaf first so every ancestor ends up more recently
	// used than its descendants.
	for ; nd != x.root; nd = nd.parent {
		x.touch(nd, t)
	}
	for x.size[t] > x.budget {
		x.evictOne(t)
	}
}

// split cuts ch's edge after c bytes and returns the new upper node, which
// every holder of ch also holds.
func (x *prefixIndex) split(ch *pnode, c int) *pnode {
	up := &pnode{edge: ch.edge[:c], parent: ch.parent, held: make(bitset, len(ch.held))}
	copy(up.held, ch.held)
	for i, sib := range up.parent.children {
		if sib == ch {
			up.parent.children[i] = up
		}
	}
	ch.edge = ch.edge[c:]
	ch.parent = up
	up.children = []*pnode{ch}
	// Each holder's entry for ch now stands for the lower part; give it a
	// new entry for the upper part placed just ahead of it in the LRU order,
	// so the upper node is evicted only after the lower one.
	up.entries = make([]*pentry, 0, len(ch.entries))
	for _, e := range ch.entries {
		ue := &pentry{node: up, t: e.t}
		ue.prev, ue.next = e.prev, e
		e.prev.next = ue
		e.prev = ue
		up.entries = append(up.entries, ue)
	}
	return up
}

// touch makes t hold nd (if it did not) and marks it most recently used.
func (x *prefixIndex) touch(nd *pnode, t int) {
	var e *pentry
	if nd.held.has(t) {
		for _, c := range nd.entries {
			if c.t == t {
				e = c
				break
			}
		}
		e.prev.next, e.next.prev = e.next, e.prev
	} else {
		e = &pentry{node: nd, t: t}
		nd.held.set(t)
		nd.entries = append(nd.entries, e)
		x.size[t] += len(nd.edge)
	}
	head := &x.lru[t]
	e.prev, e.next = head, head.next
	head.next.prev = e
	head.next = e
}

// evictOne drops t's least recently used node, removing the node from the
// tree when nobody holds it any more.
func (x *prefixIndex) evictOne(t int) {
	head := &x.lru[t]
	e := head.prev
	if e == head {
		return
	}
	e.prev.next, e.next.prev = e.next, e.prev
	nd := e.node
	nd.held.clear(t)
	for i, c := range nd.entries {
		if c == e {
			nd.entries = append(nd.entries[:i], nd.entries[i+1:]...)
			break
		}
	}
	x.size[t] -= len(nd.edge)
	if len(nd.entries) == 0 {
		p := nd.parent
		for i, c := range p.children {
			if c == nd {
				p.children = append(p.children[:i], p.children[i+1:]...)
				break
			}
		}
	}
}
