package sidecar

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/kvblock"
	"github.com/vmihailenco/msgpack/v5"
)

// fakeEngine is the test's truth model: a prefix-caching engine that emits
// vLLM KV events (alternating array and map encodings) and knows exactly
// which block keys it holds.
type fakeEngine struct {
	t        testing.TB
	rng      *rand.Rand
	bs       int
	seq      uint64
	blocks   map[uint64]*fblock // engine hash → block
	prefixes [][]uint32
	useMap   bool
}

type fblock struct {
	key  uint64
	refs int
}

func newFakeEngine(t testing.TB, seed uint64, firstSeq uint64) *fakeEngine {
	e := &fakeEngine{t: t, rng: rand.New(rand.NewPCG(seed, 99)), bs: 16, seq: firstSeq, blocks: map[uint64]*fblock{}}
	for p := 0; p < 6; p++ {
		pre := make([]uint32, 16*(1+e.rng.IntN(4)))
		for i := range pre {
			pre[i] = uint32(e.rng.IntN(50000))
		}
		e.prefixes = append(e.prefixes, pre)
	}
	return e
}

// engineHash is the engine's own chained hash: deliberately not kvblock's.
func engineHash(parent uint64, lora string, toks []uint32) uint64 {
	h := parent*0x100000001B3 ^ 0xcbf29ce484222325
	for i := 0; i < len(lora); i++ {
		h = (h ^ uint64(lora[i])) * 0x100000001B3
	}
	for _, t := range toks {
		h = (h ^ uint64(t)) * 0x100000001B3
	}
	return h | 1
}

// truth returns the keys the engine holds, sorted.
func (e *fakeEngine) truth() []uint64 {
	set := map[uint64]bool{}
	for _, b := range e.blocks {
		set[b.key] = true
	}
	out := make([]uint64, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// message wraps events into the next sequenced message.
func (e *fakeEngine) message(events ...any) Message {
	payload, err := msgpack.Marshal([]any{1.0, events, 0})
	if err != nil {
		e.t.Fatal(err)
	}
	m := Message{Topic: "kv@test", Seq: e.seq, Payload: payload}
	e.seq++
	return m
}

// request serves a prompt: a shared prefix plus a random suffix, optionally
// with an adapter; stores every block not already cached.
func (e *fakeEngine) request() Message {
	toks := slices.Clone(e.prefixes[e.rng.IntN(len(e.prefixes))])
	for i := e.rng.IntN(3) * 16; i > 0; i-- {
		toks = append(toks, uint32(e.rng.IntN(50000)))
	}
	lora := ""
	if e.rng.IntN(4) == 0 {
		lora = "sql-adapter"
	}
	keys := kvblock.Keys(nil, toks, e.bs, kvblock.Extra(lora, ""))
	var parent uint64 // engine hash of the previous block; 0 before the first
	var par any       // the event's parent_block_hash
	var newHashes, newToks []any
	for i := range keys {
		blk := toks[i*e.bs : (i+1)*e.bs]
		h := engineHash(parent, lora, blk)
		if len(newHashes) == 0 {
			if _, ok := e.blocks[h]; ok {
				parent = h // prefix cache hit
				continue
			}
			if i > 0 {
				par = parent
			} else if e.rng.IntN(2) == 0 {
				par = uint64(0) // some publishers send 0 for a root parent
			}
		}
		if b, ok := e.blocks[h]; ok {
			b.refs++ // cached again after its parent was evicted: a duplicate copy
		} else {
			e.blocks[h] = &fblock{key: keys[i], refs: 1}
		}
		newHashes = append(newHashes, h)
		for _, t := range blk {
			newToks = append(newToks, t)
		}
		parent = h
	}
	if len(newHashes) == 0 {
		return e.message() // a step with nothing new
	}
	return e.message(e.storeEvent(newHashes, par, newToks, lora, "GPU"))
}

func (e *fakeEngine) storeEvent(hashes []any, parent any, toks []any, lora, medium string) any {
	e.useMap = !e.useMap
	if e.useMap {
		m := map[string]any{"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "block_size": e.bs, "medium": medium}
		if toks != nil {
			m["token_ids"] = toks
		}
		if lora != "" {
			m["lora_name"] = lora
		}
		return m
	}
	var ln any
	if lora != "" {
		ln = lora
	}
	return []any{"BlockStored", hashes, parent, toks, e.bs, nil, medium, ln}
}

// resident returns the engine hashes held, sorted (deterministic order).
func (e *fakeEngine) resident() []uint64 {
	hs := make([]uint64, 0, len(e.blocks))
	for h := range e.blocks {
		hs = append(hs, h)
	}
	slices.Sort(hs)
	return hs
}

// evict drops one copy of up to n random blocks.
func (e *fakeEngine) evict(n int) Message {
	hs := e.resident()
	var gone []any
	for i := 0; i < n && len(hs) > 0; i++ {
		j := e.rng.IntN(len(hs))
		h := hs[j]
		hs = slices.Delete(hs, j, j+1)
		b := e.blocks[h]
		b.refs--
		if b.refs == 0 {
			delete(e.blocks, h)
		}
		gone = append(gone, h)
	}
	return e.message([]any{"BlockRemoved", gone, "GPU"})
}

// offload stores a second (CPU tier) copy of a random block, without token
// ids, as vLLM's offloading connector does.
func (e *fakeEngine) offload() Message {
	hs := e.resident()
	if len(hs) == 0 {
		return e.message()
	}
	h := hs[e.rng.IntN(len(hs))]
	e.blocks[h].refs++
	return e.message(e.storeEvent([]any{h}, nil, nil, "", "CPU"))
}

func (e *fakeEngine) clearAll() Message {
	clear(e.blocks)
	return e.message([]any{"AllBlocksCleared"})
}

// step performs one random engine step.
func (e *fakeEngine) step() Message {
	switch r := e.rng.IntN(10); {
	case r < 6:
		return e.request()
	case r < 8:
		return e.evict(1 + e.rng.IntN(3))
	default:
		return e.offload()
	}
}

// view is a consumer of Deltas, as a router would hold them.
type view struct {
	keys    map[uint64]bool
	version uint64
	state   mesh.ResidencyState
	exact   []bool // state of every delta received, in order
}

func newView() *view { return &view{keys: map[uint64]bool{}} }

func (v *view) apply(t testing.TB, ds []Delta) {
	t.Helper()
	for _, d := range ds {
		if d.Version != v.version+1 {
			t.Fatalf("delta version %d after %d", d.Version, v.version)
		}
		v.version = d.Version
		if d.Cleared {
			clear(v.keys)
		}
		for _, k := range d.Removed {
			delete(v.keys, k)
		}
		for _, k := range d.Added {
			v.keys[k] = true
		}
		v.state = d.State
		v.exact = append(v.exact, d.State == mesh.StateExact)
	}
}

func (v *view) sorted() []uint64 {
	out := make([]uint64, 0, len(v.keys))
	for k := range v.keys {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
