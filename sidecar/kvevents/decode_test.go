package kvevents

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"github.com/rolter/rolter/kvblock"
	"github.com/vmihailenco/msgpack/v5"
)

// vector is one captured ZMQ message (see testdata/vectors/README in the
// shared spec): three base64 frames and a JSON rendering of the batch.
type vector struct {
	Frames  []string        `json:"frames_b64"`
	Seq     uint64          `json:"seq"`
	Topic   string          `json:"topic"`
	Decoded json.RawMessage `json:"decoded"`
}

func loadVectors(t testing.TB) map[string][]vector {
	t.Helper()
	files, err := filepath.Glob("testdata/vectors/*.jsonl")
	if err != nil || len(files) != 4 {
		t.Fatalf("want the 4 captured vector files, got %v (%v)", files, err)
	}
	out := map[string][]vector{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var v vector
			if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out[filepath.Base(f)] = append(out[filepath.Base(f)], v)
		}
		fh.Close()
	}
	return out
}

func frame(t testing.TB, v vector, i int) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(v.Frames[i])
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// expectFromJSON interprets the vector's JSON rendering independently of
// the msgpack decoder: it is the test's model of what the batch says.
func expectFromJSON(t *testing.T, raw json.RawMessage) Batch {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var top []any
	if err := dec.Decode(&top); err != nil {
		t.Fatal(err)
	}
	b := Batch{}
	ts, _ := top[0].(json.Number).Float64()
	b.TS = ts
	if n, ok := top[2].(json.Number); ok {
		b.DPRank, _ = n.Int64()
		b.HasDPRank = true
	}
	for _, e := range top[1].([]any) {
		fields := map[string]any{}
		var tag string
		switch e := e.(type) {
		case []any:
			tag = e[0].(string)
			names := storedFields[:]
			if tag == "BlockRemoved" {
				names = removedFields[:]
			}
			for i := 1; i < len(e) && i < len(names); i++ {
				fields[names[i]] = e[i]
			}
		case map[string]any:
			tag = e["type"].(string)
			fields = e
		}
		ev := Event{OpaqueFrom: -1, Kind: kindOf([]byte(tag))}
		for _, h := range asList(fields["block_hashes"]) {
			ev.Hashes = append(ev.Hashes, jsonHash(t, h))
		}
		if p := fields["parent_block_hash"]; p != nil {
			ev.Parent = jsonHash(t, p)
			ev.HasParent = ev.Parent != 0
		}
		if toks, ok := fields["token_ids"].([]any); ok {
			ev.Tokens = []uint32{}
			for _, tk := range toks {
				n, _ := strconv.ParseUint(string(tk.(json.Number)), 10, 32)
				ev.Tokens = append(ev.Tokens, uint32(n))
			}
		}
		if bs, ok := fields["block_size"].(json.Number); ok {
			n, _ := bs.Int64()
			ev.BlockSize = int(n)
		}
		if m, ok := fields["medium"].(string); ok {
			ev.Medium = m
		}
		if l, ok := fields["lora_name"].(string); ok {
			ev.LoRAName = l
		}
		b.Events = append(b.Events, ev)
	}
	return b
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func jsonHash(t *testing.T, v any) uint64 {
	t.Helper()
	switch v := v.(type) {
	case json.Number:
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			t.Fatalf("hash %v: %v", v, err)
		}
		return n
	case map[string]any:
		raw, err := hex.DecodeString(v["bin"].(string))
		if err != nil || len(raw) < 8 {
			t.Fatalf("bin hash %v: %v", v, err)
		}
		return binary.BigEndian.Uint64(raw[len(raw)-8:])
	}
	t.Fatalf("unexpected hash %T", v)
	return 0
}

func TestDecodeCapturedVectors(t *testing.T) {
	vecs := loadVectors(t)
	dec := NewDecoder()
	for file, lines := range vecs {
		for i, v := range lines {
			t.Run(file+"/"+strconv.Itoa(i), func(t *testing.T) {
				if len(v.Frames) != 3 {
					t.Fatalf("want 3 frames, got %d", len(v.Frames))
				}
				if got := string(frame(t, v, 0)); got != v.Topic {
					t.Errorf("topic frame %q, want %q", got, v.Topic)
				}
				if got := binary.BigEndian.Uint64(frame(t, v, 1)); got != v.Seq {
					t.Errorf("seq frame %d, want %d", got, v.Seq)
				}
				got, err := dec.Decode(frame(t, v, 2))
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				want := expectFromJSON(t, v.Decoded)
				if !reflect.DeepEqual(*got, want) {
					t.Fatalf("decoded\n got %+v\nwant %+v", *got, want)
				}
			})
		}
	}
}

func TestDecodeVectorFacts(t *testing.T) {
	// Facts the README states about the captures, asserted directly.
	vecs := loadVectors(t)
	dec := NewDecoder()
	b, err := dec.Decode(frame(t, vecs["publisher-a-array.jsonl"][0], 2))
	if err != nil {
		t.Fatal(err)
	}
	if ev := b.Events[0]; ev.HasParent || len(ev.Hashes) != 2 || len(ev.Tokens) != 32 || ev.Medium != MediumGPU {
		t.Errorf("publisher-a root store: %+v", ev)
	}
	b, err = dec.Decode(frame(t, vecs["publisher-b-array-byteshash.jsonl"][0], 2))
	if err != nil {
		t.Fatal(err)
	}
	if ev := b.Events[0]; ev.LoRAName != "sql-adapter" || ev.Hashes[0] != 0x303b39ded67da2c2 {
		t.Errorf("publisher-b store: %+v", ev)
	}
}

func enc(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeVariants(t *testing.T) {
	toks := make([]any, 32)
	for i := range toks {
		toks[i] = i + 1
	}
	bin32 := func(low uint64) []byte {
		b := make([]byte, 32)
		b[0] = 0xAA // high bytes are ignored
		binary.BigEndian.PutUint64(b[24:], low)
		return b
	}
	tests := []struct {
		name    string
		payload any
		check   func(t *testing.T, b *Batch)
	}{
		{
			name:    "map batch with map events and unknown keys",
			payload: map[string]any{"ts": 1.5, "future": []any{1, 2}, "events": []any{map[string]any{"type": "BlockStored", "block_hashes": []any{7, 8}, "token_ids": toks, "block_size": 16, "new_field": map[string]any{"x": 1}}}, "data_parallel_rank": 3},
			check: func(t *testing.T, b *Batch) {
				if b.TS != 1.5 || b.DPRank != 3 || !b.HasDPRank || len(b.Events) != 1 || len(b.Events[0].Tokens) != 32 {
					t.Fatalf("%+v", b)
				}
			},
		},
		{
			name:    "negative int64 hash is the same 64 bits",
			payload: []any{0, []any{[]any{"BlockRemoved", []any{int64(-2)}}}, nil},
			check: func(t *testing.T, b *Batch) {
				if b.Events[0].Hashes[0] != 0xFFFFFFFFFFFFFFFE || b.HasDPRank {
					t.Fatalf("%+v", b.Events[0])
				}
			},
		},
		{
			name:    "oldest prefix: hashes, parent, tokens, block size",
			payload: []any{0, []any{[]any{"BlockStored", []any{uint64(1 << 63)}, uint64(99), toks[:16], 16}}},
			check: func(t *testing.T, b *Batch) {
				ev := b.Events[0]
				if !ev.HasParent || ev.Parent != 99 || ev.BlockSize != 16 || ev.Medium != "" || ev.OpaqueFrom != -1 {
					t.Fatalf("%+v", ev)
				}
			},
		},
		{
			name:    "unknown tag skipped, known kept",
			payload: []any{0, []any{[]any{"BlockPinned", []any{1}, "x"}, map[string]any{"type": "Future"}, []any{"AllBlocksCleared", "extra"}}, 0},
			check: func(t *testing.T, b *Batch) {
				if len(b.Events) != 1 || b.Events[0].Kind != kvblock.AllBlocksCleared {
					t.Fatalf("%+v", b.Events)
				}
			},
		},
		{
			name:    "binary hashes in map, lora_id, CPU without tokens",
			payload: []any{0, []any{map[string]any{"type": "BlockStored", "block_hashes": []any{bin32(5)}, "parent_block_hash": bin32(0), "medium": "CPU", "lora_id": 4}}},
			check: func(t *testing.T, b *Batch) {
				ev := b.Events[0]
				if ev.Hashes[0] != 5 || ev.HasParent || ev.Tokens != nil || ev.Medium != MediumCPU || !ev.HasLoRAID || ev.LoRAID != 4 {
					t.Fatalf("%+v", ev)
				}
			},
		},
		{
			name: "extra_keys naming the adapter are not opaque, a salt is",
			payload: []any{0, []any{
				[]any{"BlockStored", []any{1, 2}, nil, toks, 16, nil, "GPU", "sql", []any{[]any{"sql"}, []any{"sql"}}},
				[]any{"BlockStored", []any{3, 4}, nil, toks, 16, nil, "GPU", "sql", []any{nil, []any{"sql", "salt-1"}}},
				[]any{"BlockStored", []any{5}, nil, toks[:16], 16, nil, "GPU", nil, []any{[]any{[]any{"mmhash", 0}}}},
			}},
			check: func(t *testing.T, b *Batch) {
				got := []int{b.Events[0].OpaqueFrom, b.Events[1].OpaqueFrom, b.Events[2].OpaqueFrom}
				if !reflect.DeepEqual(got, []int{-1, 1, 0}) {
					t.Fatalf("OpaqueFrom = %v", got)
				}
			},
		},
		{
			name: "locality REMOTE marks the event remote",
			payload: []any{0, []any{
				map[string]any{"type": "BlockRemoved", "block_hashes": []any{1}, "locality": "REMOTE"},
				[]any{"BlockRemoved", []any{2}, "GPU", 0, "LOCAL"},
			}},
			check: func(t *testing.T, b *Batch) {
				if !b.Events[0].Remote || b.Events[1].Remote {
					t.Fatalf("%+v", b.Events)
				}
			},
		},
		{
			name:    "empty event list",
			payload: []any{0, []any{}, 0},
			check: func(t *testing.T, b *Batch) {
				if len(b.Events) != 0 {
					t.Fatal(b.Events)
				}
			},
		},
	}
	dec := NewDecoder()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := dec.Decode(enc(t, tc.payload))
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, b)
		})
	}
}

func TestDecodeMalformed(t *testing.T) {
	vecs := loadVectors(t)
	good, _ := base64.StdEncoding.DecodeString(vecs["publisher-a-array.jsonl"][0].Frames[2])
	// [0, [["BlockRemoved", [1], "GPU", [[[...100k deep...[0]...]]]]]]: valid
	// msgpack whose unknown field nests far deeper than any real event.
	deepPayload := append([]byte{0x92, 0x00, 0x91, 0x94, 0xac}, "BlockRemoved"...)
	deepPayload = append(deepPayload, 0x91, 0x01, 0xa3, 'G', 'P', 'U')
	deepPayload = append(deepPayload, bytes.Repeat([]byte{0x91}, 100000)...)
	deepPayload = append(deepPayload, 0x00)
	tests := []struct {
		name    string
		payload []byte
	}{
		{"empty", nil},
		{"truncated capture", good[:len(good)-5]},
		{"trailing garbage", append(append([]byte{}, good...), 0x01)},
		{"scalar batch", enc(t, 42)},
		{"batch without events", enc(t, []any{1.0})},
		{"events not a list", enc(t, []any{1.0, "x", 0})},
		{"event is a string", enc(t, []any{1.0, []any{"BlockStored"}, 0})},
		{"empty event array", enc(t, []any{1.0, []any{[]any{}}, 0})},
		{"map event without type", enc(t, []any{1.0, []any{map[string]any{"block_hashes": []any{1}}}, 0})},
		{"stored without hashes", enc(t, []any{1.0, []any{[]any{"BlockStored"}}, 0})},
		{"negative token", enc(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{-1}}}, 0})},
		{"token above uint32", enc(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{int64(1) << 40}}}, 0})},
		{"hash too long", enc(t, []any{1.0, []any{[]any{"BlockRemoved", []any{make([]byte, 100)}}}, 0})},
		{"hash is a float", enc(t, []any{1.0, []any{[]any{"BlockRemoved", []any{1.5}}}, 0})},
		{"deep nesting in unknown field", deepPayload},
		{"huge declared array", []byte{0x92, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff}},
	}
	dec := NewDecoder()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := dec.Decode(tc.payload)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("want ErrMalformed, got %v (%+v)", err, b)
			}
		})
	}
	// The decoder is still usable after errors.
	if _, err := dec.Decode(good); err != nil {
		t.Fatalf("decoder poisoned by malformed input: %v", err)
	}
}

func FuzzDecodeBatch(f *testing.F) {
	for _, lines := range loadVectors(f) {
		for _, v := range lines {
			f.Add(frame(f, v, 2))
		}
	}
	dec := NewDecoder()
	f.Fuzz(func(t *testing.T, payload []byte) {
		b, err := dec.Decode(payload)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error not wrapping ErrMalformed: %v", err)
			}
			return
		}
		for _, ev := range b.Events {
			if ev.Kind < kvblock.BlockStored || ev.Kind > kvblock.AllBlocksCleared {
				t.Fatalf("unknown kind escaped: %v", ev.Kind)
			}
			if ev.OpaqueFrom < -1 {
				t.Fatalf("bad OpaqueFrom %d", ev.OpaqueFrom)
			}
			if len(ev.Hashes) > len(payload) || len(ev.Tokens) > len(payload) {
				t.Fatalf("decoded more values than input bytes")
			}
		}
		// Decoding is deterministic: the same bytes give the same batch.
		first := cloneBatch(b)
		again, err := NewDecoder().Decode(payload)
		if err != nil || !reflect.DeepEqual(first, cloneBatch(again)) {
			t.Fatalf("second decode differs: %v", err)
		}
	})
}

func cloneBatch(b *Batch) Batch {
	out := *b
	out.Events = append([]Event(nil), b.Events...)
	return out
}

func BenchmarkDecodeCapturedStore(b *testing.B) {
	vecs := loadVectors(b)
	payload := frame(b, vecs["publisher-b-map-byteshash.jsonl"][0], 2)
	dec := NewDecoder()
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		if _, err := dec.Decode(payload); err != nil {
			b.Fatal(err)
		}
	}
}
