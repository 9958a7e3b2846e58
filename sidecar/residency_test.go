package sidecar

import (
	"runtime"
	"slices"
	"testing"

	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/kvblock"
	"github.com/rolter/rolter/sidecar/kvevents"
)

func toks(from uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = from + uint32(i)
	}
	return out
}

func stored(hashes []uint64, parent uint64, tokens []uint32, medium string) kvevents.Event {
	return kvevents.Event{Kind: kvblock.BlockStored, Hashes: hashes, Parent: parent, HasParent: parent != 0,
		Tokens: tokens, BlockSize: 16, Medium: medium, OpaqueFrom: -1}
}

func removed(hashes ...uint64) kvevents.Event {
	return kvevents.Event{Kind: kvblock.BlockRemoved, Hashes: hashes, OpaqueFrom: -1}
}

func apply(tr *Tracker, evs ...kvevents.Event) {
	tr.Apply(&kvevents.Batch{Events: evs})
}

func TestDuplicateCopiesAreReferenceCounted(t *testing.T) {
	tr := NewTracker(16, 1)
	key := kvblock.Keys(nil, toks(0, 16), 16, 0)[0]
	apply(tr, stored([]uint64{100}, 0, toks(0, 16), "GPU"))
	apply(tr, stored([]uint64{100}, 0, nil, "CPU")) // offloaded copy, no token ids
	apply(tr, removed(100))                         // GPU copy evicted
	if !tr.Resident(key) {
		t.Fatal("block evicted from one tier while another copy is cached must stay resident")
	}
	apply(tr, removed(100))
	if tr.Resident(key) {
		t.Fatal("last copy removed: must not be resident")
	}
	apply(tr, removed(100))
	if s := tr.Stats(); s.UnknownRemovals != 1 || s.EngineBlocks != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestKeylessBlocks(t *testing.T) {
	tests := []struct {
		name string
		ev   kvevents.Event
	}{
		{"CPU store of an unseen block without token ids", stored([]uint64{7}, 0, nil, "CPU")},
		{"unknown parent", stored([]uint64{7}, 999, toks(0, 16), "GPU")},
		{"token ids do not cover the blocks", stored([]uint64{7, 8}, 0, toks(0, 17), "GPU")},
		{"opaque extra keys (cache salt, multimodal)", func() kvevents.Event {
			e := stored([]uint64{7}, 0, toks(0, 16), "GPU")
			e.OpaqueFrom = 0
			return e
		}()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(16, 1)
			apply(tr, tc.ev)
			// A child stored later chains from the keyless block: keyless too.
			apply(tr, stored([]uint64{8000}, 7, toks(100, 16), "GPU"))
			if s := tr.Stats(); s.ResidentKeys != 0 || s.KeylessBlocks == 0 {
				t.Fatalf("keyless block or its child produced a key: %+v", s)
			}
			// Removing them is clean.
			apply(tr, removed(7, 8000, 8))
			if s := tr.Stats(); s.EngineBlocks != 0 {
				t.Fatalf("blocks left: %+v", s)
			}
		})
	}
}

func TestLoRAIDOnlyNeverMatchesBaseKeys(t *testing.T) {
	tr := NewTracker(16, 1)
	ev := stored([]uint64{1}, 0, toks(0, 16), "GPU")
	ev.LoRAID, ev.HasLoRAID = 3, true
	apply(tr, ev)
	if tr.Resident(kvblock.Keys(nil, toks(0, 16), 16, 0)[0]) {
		t.Fatal("an adapter's block must not look like a base-model block")
	}
}

func TestFlushNetsBatchesAndSplits(t *testing.T) {
	tr := NewTracker(16, 9)
	tr.SetState(mesh.StateExact)
	apply(tr, stored([]uint64{1, 2, 3}, 0, toks(0, 48), "GPU"))
	keys := kvblock.Keys(nil, toks(0, 48), 16, 0)
	v := newView()
	v.apply(t, tr.Flush(2)) // 3 added keys in deltas of ≤ 2
	if v.version != 2 || len(v.keys) != 3 || v.state != mesh.StateExact {
		t.Fatalf("view %+v", v)
	}
	// Added and removed between flushes: nothing to send for that key.
	apply(tr, stored([]uint64{4}, 3, toks(48, 16), "GPU"), removed(4), removed(1))
	ds := tr.Flush(0)
	if len(ds) != 1 || len(ds[0].Added) != 0 || !slices.Equal(ds[0].Removed, keys[:1]) {
		t.Fatalf("deltas %+v", ds)
	}
	v.apply(t, ds)
	if tr.Flush(0) != nil {
		t.Fatal("nothing changed: no delta expected")
	}
	// A state change alone is published.
	tr.SetState(mesh.StateDegraded)
	ds = tr.Flush(0)
	if len(ds) != 1 || ds[0].State != mesh.StateDegraded || ds[0].Epoch != 9 {
		t.Fatalf("state-only delta %+v", ds)
	}
	v.apply(t, ds)
	// A clear is one Cleared delta carrying what was stored after it.
	apply(tr, kvevents.Event{Kind: kvblock.AllBlocksCleared}, stored([]uint64{50}, 0, toks(900, 16), "GPU"))
	ds = tr.Flush(0)
	if len(ds) != 1 || !ds[0].Cleared || len(ds[0].Added) != 1 {
		t.Fatalf("clear delta %+v", ds)
	}
	v.apply(t, ds)
	if len(v.keys) != 1 || !v.keys[kvblock.Keys(nil, toks(900, 16), 16, 0)[0]] {
		t.Fatalf("view after clear %+v", v.keys)
	}
}

func TestSnapshotPlusLaterDeltasIsExact(t *testing.T) {
	h := newHarness(t, 21, 0, 0)
	for i := 0; i < 200; i++ {
		h.deliver(h.engine.step())
	}
	// A late consumer: it ignores the early deltas and starts from a
	// snapshot (published deltas are those the snapshot call flushed).
	_, snap := h.tr.Snapshot(0)
	late := newView()
	late.version = snap.Version
	for _, k := range snap.Keys {
		late.keys[k] = true
	}
	for i := 0; i < 200; i++ {
		h.deliver(h.engine.step())
		late.apply(t, h.tr.Flush(16))
	}
	if !slices.Equal(late.sorted(), h.engine.truth()) {
		t.Fatal("snapshot + later deltas diverge from the engine")
	}
}

// BenchmarkTrackerStore measures applying one 4-block BlockStored and its
// removal (the steady state of a busy engine), and reports the tracker's
// memory per resident block at 50k blocks.
func BenchmarkTrackerStore(b *testing.B) {
	tr := NewTracker(16, 1)
	tk := toks(0, 64)
	batch := &kvevents.Batch{Events: []kvevents.Event{stored([]uint64{1, 2, 3, 4}, 0, tk, "GPU")}}
	rm := &kvevents.Batch{Events: []kvevents.Event{removed(1, 2, 3, 4)}}
	b.ReportAllocs()
	for b.Loop() {
		tr.Apply(batch)
		tr.Apply(rm)
	}
	b.StopTimer()
	b.ReportMetric(bytesPerBlock(50000), "B/resident-block")
}

func bytesPerBlock(n int) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tr := NewTracker(16, 1)
	tk := toks(0, 16)
	for i := 0; i < n; i++ {
		tk[0] = uint32(i)
		tr.Apply(&kvevents.Batch{Events: []kvevents.Event{stored([]uint64{uint64(i) + 1}, 0, tk, "GPU")}})
	}
	tr.Flush(0)
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(tr)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

func TestRemoteBlocksAreNotResident(t *testing.T) {
	tr := NewTracker(16, 1)
	ev := stored([]uint64{1}, 0, toks(0, 16), "GPU")
	ev.Remote = true
	apply(tr, ev)
	if s := tr.Stats(); s.EngineBlocks != 0 || s.ResidentKeys != 0 {
		t.Fatalf("a REMOTE store must not count as resident: %+v", s)
	}
}
