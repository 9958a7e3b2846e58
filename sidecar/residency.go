package sidecar

import (
	"strconv"
	"sync"

	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/kvblock"
	"github.com/rolter/rolter/sidecar/kvevents"
)

// block is what the tracker keeps per engine block hash.
type block struct {
	key  uint64 // own block key, valid when keyed
	refs uint32 // physical copies (GPU, CPU tier, KV groups) still cached
	// keyed is false when the key cannot be computed: no token ids (a CPU
	// tier store of a block never seen on the GPU), an unknown parent, or
	// extra keys (multimodal, cache salt) the token ids do not carry.
	keyed bool
}

// Tracker turns one engine's KV events into the set of resident block keys
// and batches the changes into Deltas. Keys are computed with package kvblock
// from each BlockStored's token ids, chained from the parent's key; an
// engine-hash → key map resolves parents and applies BlockRemoved.
//
// Memory: about 40 bytes of map entries per resident engine block plus 12 per
// distinct key (plain uint64 maps), plus the changes pending until the next
// Flush.
//
// A Tracker is safe for concurrent use; Apply is meant to be called from
// one stream goroutine and Flush/Snapshot from a publisher loop.
type Tracker struct {
	mu        sync.Mutex
	blockSize int
	epoch     uint64
	version   uint64
	state     mesh.ResidencyState
	blocks    map[uint64]block  // engine hash → block
	keys      map[uint64]uint32 // own key → number of engine blocks with it
	// dirty holds every key changed since the last Flush with whether it
	// was resident at that Flush.
	dirty        map[uint64]bool
	cleared      bool
	stateChanged bool
	// Counters, read with Stats.
	unknownRemovals uint64
	keyless         uint64
}

// TrackerStats are counters a sidecar exports.
type TrackerStats struct {
	ResidentKeys    int
	EngineBlocks    int
	KeylessBlocks   uint64 // stored blocks that could not be keyed
	UnknownRemovals uint64 // BlockRemoved of a hash never stored
	State           mesh.ResidencyState
	Version         uint64
}

// NewTracker returns an empty tracker in mesh.StateUnknown. blockSize is the
// engine's block size, used when an event does not carry one; epoch
// identifies this sidecar incarnation in every Delta.
func NewTracker(blockSize int, epoch uint64) *Tracker {
	if blockSize <= 0 {
		blockSize = kvblock.DefaultBlockSize
	}
	return &Tracker{
		blockSize: blockSize,
		epoch:     epoch,
		blocks:    make(map[uint64]block),
		keys:      make(map[uint64]uint32),
		dirty:     make(map[uint64]bool),
	}
}

// extraFor returns the kvblock extra of an event's blocks. An adapter known
// only by its integer id gets an extra no router computes, so its blocks
// never match a request of another (or no) adapter.
func extraFor(ev *kvevents.Event) uint64 {
	switch {
	case ev.LoRAName != "":
		return kvblock.Extra(ev.LoRAName, "")
	case ev.HasLoRAID:
		return kvblock.Extra("\x00lora-id:"+strconv.FormatInt(ev.LoRAID, 10), "")
	}
	return 0
}

// Apply applies one decoded batch.
func (t *Tracker) Apply(b *kvevents.Batch) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range b.Events {
		ev := &b.Events[i]
		if ev.Remote {
			continue
		}
		switch ev.Kind {
		case kvblock.BlockStored:
			t.stored(ev)
		case kvblock.BlockRemoved:
			t.removed(ev)
		case kvblock.AllBlocksCleared:
			t.clearLocked()
		}
	}
}

func (t *Tracker) stored(ev *kvevents.Event) {
	n := len(ev.Hashes)
	bs := ev.BlockSize
	if bs <= 0 {
		bs = t.blockSize
	}
	if ev.Tokens != nil && n > 0 && len(ev.Tokens) != n*bs && len(ev.Tokens)%n == 0 {
		bs = len(ev.Tokens) / n // trust the tokens over a missing/odd size
	}
	tokensOK := bs > 0 && ev.Tokens != nil && len(ev.Tokens) == n*bs
	extra := extraFor(ev)
	parent, parentKeyed := kvblock.Root, true
	if ev.HasParent {
		p, ok := t.blocks[ev.Parent]
		parent, parentKeyed = p.key, ok && p.keyed
	}
	for i, h := range ev.Hashes {
		if b, ok := t.blocks[h]; ok {
			// Another physical copy of a block we know.
			if b.refs < ^uint32(0) {
				b.refs++
			}
			t.blocks[h] = b
			parent, parentKeyed = b.key, b.keyed
			continue
		}
		keyed := parentKeyed && tokensOK && (ev.OpaqueFrom < 0 || i < ev.OpaqueFrom)
		var key uint64
		if keyed {
			key = kvblock.Next(parent, extra, ev.Tokens[i*bs:(i+1)*bs])
			t.addKey(key)
		} else {
			t.keyless++
		}
		t.blocks[h] = block{key: key, refs: 1, keyed: keyed}
		parent, parentKeyed = key, keyed
	}
}

func (t *Tracker) removed(ev *kvevents.Event) {
	for _, h := range ev.Hashes {
		b, ok := t.blocks[h]
		if !ok {
			t.unknownRemovals++
			continue
		}
		if b.refs > 1 {
			b.refs--
			t.blocks[h] = b
			continue
		}
		delete(t.blocks, h)
		if b.keyed {
			t.dropKey(b.key)
		}
	}
}

func (t *Tracker) addKey(k uint64) {
	n := t.keys[k]
	if n == 0 {
		if _, ok := t.dirty[k]; !ok {
			t.dirty[k] = false
		}
	}
	t.keys[k] = n + 1
}

func (t *Tracker) dropKey(k uint64) {
	n := t.keys[k]
	if n > 1 {
		t.keys[k] = n - 1
		return
	}
	delete(t.keys, k)
	if _, ok := t.dirty[k]; !ok {
		t.dirty[k] = true
	}
}

// Clear forgets every block, as on AllBlocksCleared or an engine restart.
func (t *Tracker) Clear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.clearLocked()
}

func (t *Tracker) clearLocked() {
	clear(t.blocks)
	clear(t.keys)
	clear(t.dirty)
	t.cleared = true
}

// SetState records the view's state; a change is published with the next
// Flush even when no key changed.
func (t *Tracker) SetState(s mesh.ResidencyState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state != s {
		t.state, t.stateChanged = s, true
	}
}

// State returns the view's state.
func (t *Tracker) State() mesh.ResidencyState {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.state
}

// Flush returns the changes since the last Flush as Deltas of at most
// maxKeys keys each (maxKeys ≤ 0: one Delta), or nil when nothing changed.
// Keys added and removed again in between cancel out.
func (t *Tracker) Flush(maxKeys int) []Delta {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.flushLocked(maxKeys)
}

func (t *Tracker) flushLocked(maxKeys int) []Delta {
	if len(t.dirty) == 0 && !t.cleared && !t.stateChanged {
		return nil
	}
	var added, removed []uint64
	for k, was := range t.dirty {
		_, now := t.keys[k]
		switch {
		case now && !was:
			added = append(added, k)
		case !now && was:
			removed = append(removed, k)
		}
	}
	clear(t.dirty)
	if maxKeys <= 0 {
		maxKeys = len(added) + len(removed) + 1
	}
	var out []Delta
	first := true
	for first || len(added)+len(removed) > 0 {
		d := Delta{Epoch: t.epoch, State: t.state, Cleared: first && t.cleared}
		room := maxKeys
		if len(removed) > 0 {
			n := min(room, len(removed))
			d.Removed, removed = removed[:n:n], removed[n:]
			room -= n
		}
		if room > 0 && len(added) > 0 {
			n := min(room, len(added))
			d.Added, added = added[:n:n], added[n:]
		}
		t.version++
		d.Version = t.version
		out = append(out, d)
		first = false
	}
	t.cleared, t.stateChanged = false, false
	return out
}

// Snapshot flushes pending changes (returned as Deltas, to be published
// before the Snapshot) and returns the full residency at the new Version.
func (t *Tracker) Snapshot(maxKeys int) ([]Delta, Snapshot) {
	t.mu.Lock()
	defer t.mu.Unlock()
	deltas := t.flushLocked(maxKeys)
	keys := make([]uint64, 0, len(t.keys))
	for k := range t.keys {
		keys = append(keys, k)
	}
	return deltas, Snapshot{Epoch: t.epoch, Version: t.version, Keys: keys, State: t.state}
}

// Resident reports whether key is resident (for tests and diagnostics).
func (t *Tracker) Resident(key uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.keys[key]
	return ok
}

// Stats returns the tracker's counters.
func (t *Tracker) Stats() TrackerStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return TrackerStats{
		ResidentKeys:    len(t.keys),
		EngineBlocks:    len(t.blocks),
		KeylessBlocks:   t.keyless,
		UnknownRemovals: t.unknownRemovals,
		State:           t.state,
		Version:         t.version,
	}
}
