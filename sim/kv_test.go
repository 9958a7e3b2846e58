package sim

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/rolter/rolter/internal/testwait"
	"github.com/rolter/rolter/kvblock"
	"github.com/rolter/rolter/sim/kvevents"
)

func asUint(t *testing.T, v any) uint64 {
	t.Helper()
	switch x := v.(type) {
	case int8:
		return uint64(x)
	case int16:
		return uint64(x)
	case int32:
		return uint64(x)
	case int64:
		return uint64(x)
	case uint8:
		return uint64(x)
	case uint16:
		return uint64(x)
	case uint32:
		return uint64(x)
	case uint64:
		return x
	}
	t.Fatalf("%v (%T) is not an integer", v, v)
	return 0
}

// A sidecar must be able to rebuild rolter's block keys from the engine's
// BlockStored events alone: token ids per block, parent links across
// requests, and removals naming stored hashes.
func TestServedRequestsEmitDecodableStores(t *testing.T) {
	live := &captureSender{}
	pub := kvevents.NewPublisher(kvevents.Options{Encoding: kvevents.Encoding{Format: kvevents.FormatMap}, Topic: "kv@sim@m", DPRank: 0}, live)
	_, url := startSim(t, nil, pub)
	base := make([]int, 48)
	for i := range base {
		base[i] = 300 + i
	}
	longer := append(slices.Clone(base), 900, 901, 902, 903, 904, 905, 906, 907, 908, 909, 910, 911, 912, 913, 914, 915, 916)
	for _, p := range [][]int{base, longer} {
		if resp, body := post(t, url+"/v1/completions", map[string]any{"prompt": p, "max_tokens": 1}); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	testwait.For(t, 2*time.Second, "two batches", func() bool { return len(live.get()) >= 2 })
	type stored struct {
		hashes []uint64
		parent any
		tokens []uint32
	}
	var stores []stored
	var lastSeq uint64
	for i, m := range live.get() {
		if string(m[0]) != "kv@sim@m" {
			t.Fatalf("topic %q", m[0])
		}
		seq := binary.BigEndian.Uint64(m[1])
		if i > 0 && seq != lastSeq+1 {
			t.Fatalf("seq %d after %d", seq, lastSeq)
		}
		lastSeq = seq
		var batch []any
		if err := msgpack.Unmarshal(m[2], &batch); err != nil {
			t.Fatal(err)
		}
		for _, e := range batch[1].([]any) {
			ev := e.(map[string]any)
			if ev["type"] != "BlockStored" {
				continue
			}
			var s stored
			for _, h := range ev["block_hashes"].([]any) {
				s.hashes = append(s.hashes, asUint(t, h))
			}
			for _, tok := range ev["token_ids"].([]any) {
				s.tokens = append(s.tokens, uint32(asUint(t, tok)))
			}
			s.parent = ev["parent_block_hash"]
			stores = append(stores, s)
		}
	}
	if len(stores) != 2 {
		t.Fatalf("%d BlockStored events", len(stores))
	}
	// First request: 3 full blocks; second: only its new 4th block, whose
	// parent is the first request's last block (the rest was a cache hit).
	if len(stores[0].hashes) != 3 || stores[0].parent != nil || len(stores[0].tokens) != 48 {
		t.Fatalf("first store %+v", stores[0])
	}
	if len(stores[1].hashes) != 1 || asUint(t, stores[1].parent) != stores[0].hashes[2] {
		t.Fatalf("second store %+v", stores[1])
	}
	all := append(slices.Clone(stores[0].tokens), stores[1].tokens...)
	want := make([]uint32, 64)
	for i := range want {
		want[i] = uint32(longer[i])
	}
	if !slices.Equal(all, want) {
		t.Fatalf("token ids %v", all)
	}
	// The keys a sidecar derives from the events equal the router's keys
	// for the prompt.
	var fromEvents []uint64
	parent := kvblock.Root
	for i := 0; i+16 <= len(all); i += 16 {
		parent = kvblock.Next(parent, 0, all[i:i+16])
		fromEvents = append(fromEvents, parent)
	}
	if !slices.Equal(fromEvents, kvblock.Keys(nil, want, 16, 0)) {
		t.Fatal("keys differ")
	}
}
