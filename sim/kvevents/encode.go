package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/rolter/rolter/kvblock"
	"github.com/vmihailenco/msgpack/v5"
)

// Format selects how each event is encoded inside a batch.
type Format uint8

const (
	// FormatArray encodes an event as an array whose first element is the
	// tag (vLLM up to mid-2026).
	FormatArray Format = iota
	// FormatMap encodes an event as a map with a "type" key and only the
	// non-default fields (vLLM v0.26+).
	FormatMap
)

// ErrFormat is returned for an unknown encoding name.
var ErrFormat = errors.New("kvevents: unknown format")

// ParseFormat maps "array" or "map" to a Format.
func ParseFormat(s string) (Format, error) {
	switch s {
	case "array", "":
		return FormatArray, nil
	case "map":
		return FormatMap, nil
	}
	return 0, fmt.Errorf("%w %q (want array or map)", ErrFormat, s)
}

// Encoding is the full choice of wire encoding of a publisher.
type Encoding struct {
	Format Format
	// BytesHashes sends block hashes as 32-byte binary strings instead of
	// unsigned 64-bit integers (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0).
	BytesHashes bool
}

// EndMarkerSeq is the sequence number of the replay end marker.
const EndMarkerSeq uint64 = 0xFFFFFFFFFFFFFFFF

// SeqFrame returns seq as the 8-byte big-endian second frame.
func SeqFrame(seq uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, seq)
	return b
}

// EncodeBatch returns the msgpack payload of one scheduler step's events:
// [ts, events, data_parallel_rank]. A negative dpRank is sent as nil.
func (c Encoding) EncodeBatch(ts float64, events []Event, dpRank int) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(true)
	w := writer{enc: enc}
	w.arrayLen(3)
	w.float(ts)
	w.arrayLen(len(events))
	for i := range events {
		if c.Format == FormatMap {
			c.encodeMap(&w, &events[i])
		} else {
			c.encodeArray(&w, &events[i])
		}
	}
	if dpRank < 0 {
		w.nil()
	} else {
		w.int(int64(dpRank))
	}
	if w.err != nil {
		return nil, fmt.Errorf("kvevents: encode batch: %w", w.err)
	}
	return buf.Bytes(), nil
}

func (c Encoding) encodeArray(w *writer, e *Event) {
	switch e.Kind {
	case kvblock.BlockStored:
		// [tag, block_hashes, parent_block_hash, token_ids, block_size,
		//  lora_id, medium, lora_name, extra_keys, group_idx,
		//  kv_cache_spec_kind, kv_cache_spec_sliding_window]
		w.arrayLen(12)
		w.str(e.Kind.String())
		c.hashes(w, e.Hashes)
		c.parent(w, e)
		w.tokens(e.TokenIDs)
		w.int(int64(e.BlockSize))
		if e.LoraID != 0 {
			w.int(int64(e.LoraID))
		} else {
			w.nil()
		}
		w.str(e.medium())
		if e.LoraName != "" {
			w.str(e.LoraName)
		} else {
			w.nil()
		}
		w.nil() // extra_keys
		w.int(0)
		w.str("full_attention")
		w.nil()
	case kvblock.BlockRemoved:
		w.arrayLen(4)
		w.str(e.Kind.String())
		c.hashes(w, e.Hashes)
		w.str(e.medium())
		w.int(0)
	default:
		w.arrayLen(1)
		w.str(kvblock.AllBlocksCleared.String())
	}
}

func (c Encoding) encodeMap(w *writer, e *Event) {
	switch e.Kind {
	case kvblock.BlockStored:
		n := 8
		if e.LoraName != "" {
			n++
		}
		if e.LoraID != 0 {
			n++
		}
		w.mapLen(n)
		w.str("type")
		w.str(e.Kind.String())
		w.str("block_hashes")
		c.hashes(w, e.Hashes)
		w.str("parent_block_hash")
		c.parent(w, e)
		w.str("token_ids")
		w.tokens(e.TokenIDs)
		w.str("block_size")
		w.int(int64(e.BlockSize))
		w.str("medium")
		w.str(e.medium())
		w.str("group_idx")
		w.int(0)
		w.str("kv_cache_spec_kind")
		w.str("full_attention")
		if e.LoraID != 0 {
			w.str("lora_id")
			w.int(int64(e.LoraID))
		}
		if e.LoraName != "" {
			w.str("lora_name")
			w.str(e.LoraName)
		}
	case kvblock.BlockRemoved:
		w.mapLen(3)
		w.str("type")
		w.str(e.Kind.String())
		w.str("block_hashes")
		c.hashes(w, e.Hashes)
		w.str("medium")
		w.str(e.medium())
	default:
		w.mapLen(1)
		w.str("type")
		w.str(kvblock.AllBlocksCleared.String())
	}
}

func (c Encoding) hashes(w *writer, hs []Digest) {
	w.arrayLen(len(hs))
	for i := range hs {
		c.hash(w, hs[i])
	}
}

func (c Encoding) hash(w *writer, d Digest) {
	if c.BytesHashes {
		w.bytes(d[:])
		return
	}
	w.uint(d.Uint64())
}

func (c Encoding) parent(w *writer, e *Event) {
	if !e.HasParent {
		w.nil()
		return
	}
	c.hash(w, e.Parent)
}

// writer keeps the first encoding error so the encoders read as a flat
// list of fields.
type writer struct {
	enc *msgpack.Encoder
	err error
}

func (w *writer) keep(err error) {
	if w.err == nil {
		w.err = err
	}
}

func (w *writer) arrayLen(n int)  { w.keep(w.enc.EncodeArrayLen(n)) }
func (w *writer) mapLen(n int)    { w.keep(w.enc.EncodeMapLen(n)) }
func (w *writer) str(s string)    { w.keep(w.enc.EncodeString(s)) }
func (w *writer) int(v int64)     { w.keep(w.enc.EncodeInt(v)) }
func (w *writer) uint(v uint64)   { w.keep(w.enc.EncodeUint(v)) }
func (w *writer) float(v float64) { w.keep(w.enc.EncodeFloat64(v)) }
func (w *writer) bytes(b []byte)  { w.keep(w.enc.EncodeBytes(b)) }
func (w *writer) nil()            { w.keep(w.enc.EncodeNil()) }
func (w *writer) tokens(t []uint32) {
	w.arrayLen(len(t))
	for _, v := range t {
		w.uint(uint64(v))
	}
}
