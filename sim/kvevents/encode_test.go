package kvevents

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/rolter/rolter/kvblock"
	"github.com/vmihailenco/msgpack/v5"
)

func digestOf(v uint64) Digest {
	var d Digest
	binary.BigEndian.PutUint64(d[24:], v)
	return d
}

// generic decodes a payload with msgpack's generic decoder only.
func generic(t *testing.T, payload []byte) []any {
	t.Helper()
	var v any
	if err := msgpack.Unmarshal(payload, &v); err != nil {
		t.Fatalf("generic decode: %v", err)
	}
	batch, ok := v.([]any)
	if !ok || len(batch) != 3 {
		t.Fatalf("batch is %T %v, want a 3-element array", v, v)
	}
	return batch
}

// num turns any msgpack integer into uint64.
func num(t *testing.T, v any) uint64 {
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

// jsonForm rewrites a generically decoded value into the vectors' JSON
// rendering: integers as float64-free uint64, binary as {"bin": hex}.
func jsonForm(t *testing.T, v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = jsonForm(t, x[i])
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonForm(t, e)
		}
		return out
	case []byte:
		return map[string]any{"bin": hex.EncodeToString(x)}
	case int8, int16, int32, int64, uint8, uint16, uint32, uint64:
		return json.Number(strings.TrimSpace(jsonNum(num(t, x))))
	}
	return v
}

func jsonNum(v uint64) string { b, _ := json.Marshal(v); return string(b) }

func vectorLines(t *testing.T, name string) []map[string]any {
	t.Helper()
	// The captured vectors live with the decoder that is proven against
	// them; both sides of the wire read the same files.
	raw, err := os.ReadFile("../../sidecar/kvevents/testdata/vectors/" + name)
	if err != nil {
		t.Fatalf("captured vectors are part of the repository: %v", err)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		dec := json.NewDecoder(strings.NewReader(line))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// The vectors were captured from other publishers; our encoder must
// produce the same generic structure for the same events (ts aside; the
// array encoding may carry more trailing fields, never fewer).
func TestEncodingMatchesCapturedVectors(t *testing.T) {
	tokens := make([]uint32, 32)
	for i := range tokens {
		tokens[i] = uint32(i + 1)
	}
	stored := Event{Kind: kvblock.BlockStored, Hashes: []Digest{digestOf(0x303b39ded67da2c2), digestOf(0x84e09493a66d3db9)},
		TokenIDs: tokens, BlockSize: 16, LoraName: "sql-adapter"}
	removed := Event{Kind: kvblock.BlockRemoved, Hashes: stored.Hashes}
	cleared := Event{Kind: kvblock.AllBlocksCleared}
	tests := []struct {
		file string
		enc  Encoding
	}{
		{"publisher-b-map-byteshash.jsonl", Encoding{Format: FormatMap, BytesHashes: true}},
		{"publisher-b-array-byteshash.jsonl", Encoding{Format: FormatArray, BytesHashes: true}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			lines := vectorLines(t, tt.file)
			for i, ev := range []Event{stored, removed, cleared} {
				payload, err := tt.enc.EncodeBatch(1.5, []Event{ev}, 0)
				if err != nil {
					t.Fatal(err)
				}
				got := jsonForm(t, generic(t, payload)).([]any)
				want := roundTrip(t, lines[i]["decoded"]).([]any)
				gotEv := got[1].([]any)[0]
				wantEv := want[1].([]any)[0]
				if tt.enc.Format == FormatArray {
					g, w := gotEv.([]any), wantEv.([]any)
					if len(g) < len(w) {
						t.Fatalf("event %d: %d fields, vector has %d", i, len(g), len(w))
					}
					gotEv = g[:len(w)]
				}
				if !reflect.DeepEqual(gotEv, wantEv) {
					t.Fatalf("event %d:\n got %v\nwant %v", i, gotEv, wantEv)
				}
				if !reflect.DeepEqual(got[2], want[2]) {
					t.Fatalf("dp rank %v, want %v", got[2], want[2])
				}
			}
		})
	}
}

func roundTrip(t *testing.T, v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestEncodingsGeneric(t *testing.T) {
	ev := Event{Kind: kvblock.BlockStored, Hashes: []Digest{digestOf(1 << 63), digestOf(7)}, Parent: digestOf(42), HasParent: true,
		TokenIDs: make([]uint32, 32), BlockSize: 16, LoraID: 3, LoraName: "a"}
	tests := []struct {
		name  string
		enc   Encoding
		check func(t *testing.T, e any)
	}{
		{"array int", Encoding{Format: FormatArray}, func(t *testing.T, e any) {
			a := e.([]any)
			if a[0] != "BlockStored" || len(a) != 12 {
				t.Fatalf("event %v", a)
			}
			hs := a[1].([]any)
			if num(t, hs[0]) != 1<<63 || num(t, hs[1]) != 7 || num(t, a[2]) != 42 || num(t, a[4]) != 16 || num(t, a[5]) != 3 || a[6] != "GPU" || a[7] != "a" {
				t.Fatalf("fields %v", a)
			}
		}},
		{"map int", Encoding{Format: FormatMap}, func(t *testing.T, e any) {
			m := e.(map[string]any)
			if m["type"] != "BlockStored" || num(t, m["parent_block_hash"]) != 42 || len(m["token_ids"].([]any)) != 32 || m["lora_name"] != "a" {
				t.Fatalf("event %v", m)
			}
		}},
		{"map bytes", Encoding{Format: FormatMap, BytesHashes: true}, func(t *testing.T, e any) {
			m := e.(map[string]any)
			h := m["block_hashes"].([]any)[1].([]byte)
			if len(h) != 32 || binary.BigEndian.Uint64(h[24:]) != 7 {
				t.Fatalf("hash %x", h)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload, err := tt.enc.EncodeBatch(12.25, []Event{ev}, 2)
			if err != nil {
				t.Fatal(err)
			}
			b := generic(t, payload)
			if b[0] != 12.25 || num(t, b[2]) != 2 {
				t.Fatalf("batch header %v %v", b[0], b[2])
			}
			tt.check(t, b[1].([]any)[0])
		})
	}
}

type captureSender struct{ msgs [][][]byte }

func (c *captureSender) Send(f [][]byte) error {
	c.msgs = append(c.msgs, f)
	return nil
}

func TestPublisherSequenceSkipReplayRestart(t *testing.T) {
	live := &captureSender{}
	p := NewPublisher(Options{Topic: "kv@sim@m", FirstSeq: 0, BufferSteps: 4}, live)
	ev := []Event{{Kind: kvblock.AllBlocksCleared}}
	publish := func(n int) {
		for i := 0; i < n; i++ {
			if err := p.Publish(ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(2)
	p.SkipNext(2)
	publish(3) // seq 2, 3 skipped live, 4 sent
	var seqs []uint64
	for _, m := range live.msgs {
		if len(m) != 3 || string(m[0]) != "kv@sim@m" || len(m[1]) != 8 {
			t.Fatalf("frames %q", m)
		}
		seqs = append(seqs, binary.BigEndian.Uint64(m[1]))
	}
	if !reflect.DeepEqual(seqs, []uint64{0, 1, 4}) {
		t.Fatalf("live seqs %v", seqs)
	}
	// The buffer keeps the last 4 (1..4), including the skipped ones.
	resp, err := p.ReplayResponse([][]byte{[]byte("id"), {}, SeqFrame(2)})
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, m := range resp {
		if string(m[0]) != "id" || len(m[1]) != 0 {
			t.Fatalf("reply envelope %q", m)
		}
		got = append(got, binary.BigEndian.Uint64(m[2]))
	}
	if !reflect.DeepEqual(got, []uint64{2, 3, 4, EndMarkerSeq}) || len(resp[3][3]) != 0 {
		t.Fatalf("replay seqs %v", got)
	}
	p.RestartSequence()
	publish(1)
	last := live.msgs[len(live.msgs)-1]
	if binary.BigEndian.Uint64(last[1]) != 0 {
		t.Fatalf("after restart seq %d", binary.BigEndian.Uint64(last[1]))
	}
	if _, err := p.ReplayResponse([][]byte{[]byte("id"), {1, 2}}); err == nil {
		t.Fatal("short start frame accepted")
	}
}
