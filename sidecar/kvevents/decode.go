package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/rolter/rolter/kvblock"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Limits that keep a hostile payload from costing more than its own size.
const (
	// MaxPayload is the largest batch Decode accepts.
	MaxPayload = 64 << 20
	// maxDepth bounds nesting inside skipped values (the format itself
	// nests four deep).
	maxDepth = 16
	// maxHashLen bounds a binary block hash (vLLM sends 32 bytes).
	maxHashLen = 64
	// maxShortString bounds the strings kept: tags, keys, medium, adapter
	// names, extra keys. Longer ones are consumed and treated as unknown.
	maxShortString = 256
)

var (
	errType     = errors.New("unexpected msgpack type")
	errTooDeep  = errors.New("nesting too deep")
	errTrailing = errors.New("trailing bytes after batch")
	errNoEvents = errors.New("batch without events")
	errNoHashes = errors.New("event without block hashes")
	errNoType   = errors.New("event map without type")
	errToken    = errors.New("token id out of range")
	errHash     = errors.New("bad block hash")
	errTooLarge = errors.New("payload too large")
)

// Decoder decodes KV-event batches, reusing its buffers between calls. It is
// not safe for concurrent use; give each stream its own.
type Decoder struct {
	r      bytes.Reader
	d      *msgpack.Decoder
	batch  Batch
	hashes []uint64
	tokens []uint32
	extras []extraItem
	// sawTokens is set when the current event carries token_ids.
	sawTokens bool
	buf       [maxShortString]byte
	// lastLoRA avoids allocating the same adapter name for every event.
	lastLoRA string
}

// extraItem is one element of a block's extra_keys tuple.
type extraItem struct {
	block int
	str   string
	num   int64
	isStr bool
	isNum bool
}

// NewDecoder returns a ready Decoder.
func NewDecoder() *Decoder {
	x := &Decoder{}
	x.d = msgpack.NewDecoder(&x.r)
	return x
}

// Decode decodes one msgpack event batch. The result and every slice in it
// are valid until the next call. Errors wrap ErrMalformed.
func (x *Decoder) Decode(payload []byte) (*Batch, error) {
	if len(payload) > MaxPayload {
		return nil, fmt.Errorf("%w: %w (%d bytes)", ErrMalformed, errTooLarge, len(payload))
	}
	x.r.Reset(payload)
	x.d.Reset(&x.r)
	x.batch = Batch{Events: x.batch.Events[:0]}
	x.hashes = x.hashes[:0]
	x.tokens = x.tokens[:0]
	if err := x.decodeBatch(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if x.r.Len() != 0 {
		return nil, fmt.Errorf("%w: %w (%d)", ErrMalformed, errTrailing, x.r.Len())
	}
	return &x.batch, nil
}

func isArray(c byte) bool {
	return msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32
}

func isMap(c byte) bool {
	return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32
}

func isInt(c byte) bool {
	return msgpcode.IsFixedNum(c) || (c >= msgpcode.Uint8 && c <= msgpcode.Int64)
}

func isUint(c byte) bool {
	return c <= msgpcode.PosFixedNumHigh || (c >= msgpcode.Uint8 && c <= msgpcode.Uint64)
}

func isStrOrBin(c byte) bool {
	return msgpcode.IsFixedString(c) || (c >= msgpcode.Str8 && c <= msgpcode.Str32) ||
		(c >= msgpcode.Bin8 && c <= msgpcode.Bin32)
}

// skip skips one value of any type with nesting bounded by maxDepth
// (msgpack's own Skip recurses without a limit).
func (x *Decoder) skip(depth int) error {
	if depth > maxDepth {
		return errTooDeep
	}
	c, err := x.d.PeekCode()
	if err != nil {
		return err
	}
	var n int
	switch {
	case isArray(c):
		if n, err = x.d.DecodeArrayLen(); err != nil {
			return err
		}
	case isMap(c):
		if n, err = x.d.DecodeMapLen(); err != nil {
			return err
		}
		n *= 2
	default:
		return x.d.Skip()
	}
	for i := 0; i < n; i++ {
		if err := x.skip(depth + 1); err != nil {
			return err
		}
	}
	return nil
}

// isNil consumes a nil if one is next.
func (x *Decoder) isNil() (bool, error) {
	c, err := x.d.PeekCode()
	if err != nil {
		return false, err
	}
	if c != msgpcode.Nil {
		return false, nil
	}
	return true, x.d.DecodeNil()
}

// shortString reads a string or binary value of at most maxShortString bytes
// into x.buf and returns it; long is true (and the value consumed) when it
// was longer. nil reads as an empty string.
func (x *Decoder) shortString() (s []byte, long bool, err error) {
	c, err := x.d.PeekCode()
	if err != nil {
		return nil, false, err
	}
	if c == msgpcode.Nil {
		return nil, false, x.d.DecodeNil()
	}
	if !isStrOrBin(c) {
		return nil, false, fmt.Errorf("%w %#x for string", errType, c)
	}
	n, err := x.d.DecodeBytesLen()
	if err != nil {
		return nil, false, err
	}
	if n <= len(x.buf) {
		if err := x.d.ReadFull(x.buf[:n]); err != nil {
			return nil, false, err
		}
		return x.buf[:n], false, nil
	}
	for n > 0 {
		k := min(n, len(x.buf))
		if err := x.d.ReadFull(x.buf[:k]); err != nil {
			return nil, false, err
		}
		n -= k
	}
	return nil, true, nil
}

func (x *Decoder) number() (float64, error) {
	c, err := x.d.PeekCode()
	if err != nil {
		return 0, err
	}
	if c == msgpcode.Float || c == msgpcode.Double || isInt(c) {
		return x.d.DecodeFloat64()
	}
	return 0, fmt.Errorf("%w %#x for number", errType, c)
}

// integer reads an integer; ok is false for nil.
func (x *Decoder) integer() (v int64, ok bool, err error) {
	c, err := x.d.PeekCode()
	if err != nil {
		return 0, false, err
	}
	if c == msgpcode.Nil {
		return 0, false, x.d.DecodeNil()
	}
	if !isInt(c) {
		return 0, false, fmt.Errorf("%w %#x for integer", errType, c)
	}
	if c == msgpcode.Uint64 {
		u, err := x.d.DecodeUint64()
		if u > math.MaxInt64 {
			u = math.MaxInt64
		}
		return int64(u), true, err
	}
	v, err = x.d.DecodeInt64()
	return v, true, err
}

// hash reads one block hash: an unsigned or signed 64-bit integer (signed
// values are the same bits reinterpreted) or a binary string whose last 8
// bytes are the big-endian low 64 bits.
func (x *Decoder) hash() (uint64, error) {
	c, err := x.d.PeekCode()
	if err != nil {
		return 0, err
	}
	switch {
	case isUint(c):
		return x.d.DecodeUint64()
	case isInt(c):
		v, err := x.d.DecodeInt64()
		return uint64(v), err
	case isStrOrBin(c):
		b, long, err := x.shortString()
		if err != nil {
			return 0, err
		}
		if long || len(b) == 0 || len(b) > maxHashLen {
			return 0, errHash
		}
		var tail [8]byte
		copy(tail[8-min(8, len(b)):], b[max(0, len(b)-8):])
		return binary.BigEndian.Uint64(tail[:]), nil
	}
	return 0, fmt.Errorf("%w %#x for block hash", errType, c)
}

// arrayLen reads an array header; nil reads as 0.
func (x *Decoder) arrayLen() (int, error) {
	c, err := x.d.PeekCode()
	if err != nil {
		return 0, err
	}
	if c == msgpcode.Nil {
		return 0, x.d.DecodeNil()
	}
	if !isArray(c) {
		return 0, fmt.Errorf("%w %#x for array", errType, c)
	}
	return x.d.DecodeArrayLen()
}

func (x *Decoder) decodeBatch() error {
	c, err := x.d.PeekCode()
	if err != nil {
		return err
	}
	seenEvents := false
	switch {
	case isArray(c):
		n, err := x.d.DecodeArrayLen()
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			switch i {
			case 0:
				x.batch.TS, err = x.number()
			case 1:
				err, seenEvents = x.decodeEvents(), true
			case 2:
				x.batch.DPRank, x.batch.HasDPRank, err = x.integer()
			default:
				err = x.skip(1)
			}
			if err != nil {
				return err
			}
		}
	case isMap(c):
		n, err := x.d.DecodeMapLen()
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			key, _, err := x.shortString()
			if err != nil {
				return err
			}
			switch string(key) {
			case "ts":
				x.batch.TS, err = x.number()
			case "events":
				err, seenEvents = x.decodeEvents(), true
			case "data_parallel_rank":
				x.batch.DPRank, x.batch.HasDPRank, err = x.integer()
			default:
				err = x.skip(1)
			}
			if err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("%w %#x for batch", errType, c)
	}
	if !seenEvents {
		return errNoEvents
	}
	return nil
}

func (x *Decoder) decodeEvents() error {
	n, err := x.arrayLen()
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		ev := Event{OpaqueFrom: -1}
		keep, err := x.decodeEvent(&ev)
		if err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
		if keep {
			x.batch.Events = append(x.batch.Events, ev)
		}
	}
	return nil
}

// decodeEvent decodes one event in either encoding; keep is false for an
// unknown tag (skipped, not an error).
func (x *Decoder) decodeEvent(ev *Event) (keep bool, err error) {
	c, err := x.d.PeekCode()
	if err != nil {
		return false, err
	}
	x.extras = x.extras[:0]
	x.sawTokens = false
	hashStart, tokStart := len(x.hashes), len(x.tokens)
	sawHashes := false
	switch {
	case isArray(c):
		n, err := x.d.DecodeArrayLen()
		if err != nil {
			return false, err
		}
		if n == 0 {
			return false, errNoType
		}
		tag, _, err := x.shortString()
		if err != nil {
			return false, err
		}
		ev.Kind = kindOf(tag)
		for i := 1; i < n; i++ {
			name := fieldAt(ev.Kind, i)
			sawHashes = sawHashes || name == "block_hashes"
			if err := x.field(ev, name); err != nil {
				return false, fmt.Errorf("%s field %d: %w", ev.Kind, i, err)
			}
		}
	case isMap(c):
		n, err := x.d.DecodeMapLen()
		if err != nil {
			return false, err
		}
		sawType := false
		for i := 0; i < n; i++ {
			key, long, err := x.shortString()
			if err != nil {
				return false, err
			}
			if long {
				if err := x.skip(2); err != nil {
					return false, err
				}
				continue
			}
			if string(key) == "type" {
				tag, _, err := x.shortString()
				if err != nil {
					return false, err
				}
				ev.Kind, sawType = kindOf(tag), true
				continue
			}
			// Field names are shared by both event kinds that carry them.
			name := mapField(key)
			sawHashes = sawHashes || name == "block_hashes"
			if err := x.field(ev, name); err != nil {
				return false, fmt.Errorf("field %q: %w", key, err)
			}
		}
		if !sawType {
			return false, errNoType
		}
	default:
		return false, fmt.Errorf("%w %#x for event", errType, c)
	}
	if ev.Kind == 0 {
		return false, nil
	}
	if (ev.Kind == kvblock.BlockStored || ev.Kind == kvblock.BlockRemoved) && !sawHashes {
		return false, errNoHashes
	}
	if len(x.hashes) > hashStart {
		ev.Hashes = x.hashes[hashStart:len(x.hashes):len(x.hashes)]
	}
	if x.sawTokens {
		ev.Tokens = x.tokens[tokStart:len(x.tokens):len(x.tokens)]
		if ev.Tokens == nil {
			ev.Tokens = []uint32{}
		}
	}
	x.resolveExtras(ev)
	return true, nil
}

func kindOf(tag []byte) kvblock.EventKind {
	switch string(tag) {
	case "BlockStored":
		return kvblock.BlockStored
	case "BlockRemoved":
		return kvblock.BlockRemoved
	case "AllBlocksCleared":
		return kvblock.AllBlocksCleared
	}
	return 0
}

// Positional field names of the array encoding, in the order vLLM added them.
var (
	storedFields = [...]string{"", "block_hashes", "parent_block_hash", "token_ids", "block_size",
		"lora_id", "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind",
		"kv_cache_spec_sliding_window", "locality"}
	removedFields = [...]string{"", "block_hashes", "medium", "group_idx", "locality"}
)

func fieldAt(k kvblock.EventKind, i int) string {
	switch {
	case k == kvblock.BlockStored && i < len(storedFields):
		return storedFields[i]
	case k == kvblock.BlockRemoved && i < len(removedFields):
		return removedFields[i]
	}
	return ""
}

// mapField returns the canonical (static) name for a map key so that the
// field switch never allocates; unknown keys map to "".
func mapField(key []byte) string {
	for _, f := range storedFields[1:] {
		if string(key) == f {
			return f
		}
	}
	return ""
}

// field decodes the value of the named field into ev; unknown names are
// skipped.
func (x *Decoder) field(ev *Event, name string) error {
	switch name {
	case "block_hashes":
		n, err := x.arrayLen()
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			h, err := x.hash()
			if err != nil {
				return err
			}
			x.hashes = append(x.hashes, h)
		}
	case "parent_block_hash":
		null, err := x.isNil()
		if err != nil || null {
			return err
		}
		h, err := x.hash()
		if err != nil {
			return err
		}
		ev.Parent, ev.HasParent = h, h != 0
	case "token_ids":
		null, err := x.isNil()
		if err != nil || null {
			return err
		}
		n, err := x.arrayLen()
		if err != nil {
			return err
		}
		x.sawTokens = true
		for i := 0; i < n; i++ {
			v, ok, err := x.integer()
			if err != nil {
				return err
			}
			if !ok || v < 0 || v > math.MaxUint32 {
				return errToken
			}
			x.tokens = append(x.tokens, uint32(v))
		}
	case "block_size":
		v, _, err := x.integer()
		if err != nil {
			return err
		}
		if v < 0 || v > math.MaxInt32 {
			return fmt.Errorf("%w: block size %d", errType, v)
		}
		ev.BlockSize = int(v)
	case "lora_id":
		v, ok, err := x.integer()
		if err != nil {
			return err
		}
		ev.LoRAID, ev.HasLoRAID = v, ok
	case "medium":
		b, long, err := x.shortString()
		if err != nil {
			return err
		}
		switch {
		case long:
			ev.Medium = "other"
		case string(b) == MediumGPU:
			ev.Medium = MediumGPU
		case string(b) == MediumCPU:
			ev.Medium = MediumCPU
		default:
			ev.Medium = string(b)
		}
	case "lora_name":
		s, long, err := x.loraName()
		if err != nil {
			return err
		}
		ev.LoRAName = s
		if long {
			// A name too long to keep cannot be keyed faithfully.
			x.extras = append(x.extras, extraItem{block: 0})
		}
	case "extra_keys":
		return x.extraKeys()
	case "locality":
		b, _, err := x.shortString()
		if err != nil {
			return err
		}
		ev.Remote = string(b) == "REMOTE"
	default:
		return x.skip(1)
	}
	return nil
}

// loraName reads an adapter name, reusing the previous string when the
// name repeats; long reports a name over maxShortString bytes (not kept).
func (x *Decoder) loraName() (name string, long bool, err error) {
	b, long, err := x.shortString()
	if err != nil || long {
		return "", long, err
	}
	if string(b) != x.lastLoRA {
		x.lastLoRA = string(b)
	}
	return x.lastLoRA, false, nil
}

// extraKeys records the per-block extra_keys tuples: [tuple|nil, ...].
func (x *Decoder) extraKeys() error {
	n, err := x.arrayLen()
	if err != nil {
		return err
	}
	for blk := 0; blk < n; blk++ {
		c, err := x.d.PeekCode()
		if err != nil {
			return err
		}
		if !isArray(c) {
			if c == msgpcode.Nil {
				if err := x.d.DecodeNil(); err != nil {
					return err
				}
				continue
			}
			// Not a tuple: opaque.
			x.extras = append(x.extras, extraItem{block: blk})
			if err := x.skip(2); err != nil {
				return err
			}
			continue
		}
		m, err := x.d.DecodeArrayLen()
		if err != nil {
			return err
		}
		for j := 0; j < m; j++ {
			c, err := x.d.PeekCode()
			if err != nil {
				return err
			}
			it := extraItem{block: blk}
			switch {
			case isStrOrBin(c):
				b, long, err := x.shortString()
				if err != nil {
					return err
				}
				if !long {
					it.str, it.isStr = string(b), true
				}
			case isInt(c):
				if it.num, _, err = x.integer(); err != nil {
					return err
				}
				it.isNum = true
			default:
				if err := x.skip(3); err != nil {
					return err
				}
			}
			x.extras = append(x.extras, it)
		}
	}
	return nil
}

// resolveExtras sets ev.OpaqueFrom from the extra_keys items: an item that
// is the event's own adapter (by name or id) is accounted for by the key's
// extra; anything else makes the block opaque.
func (x *Decoder) resolveExtras(ev *Event) {
	for _, it := range x.extras {
		if it.isStr && ev.LoRAName != "" && it.str == ev.LoRAName {
			continue
		}
		if it.isNum && ev.HasLoRAID && it.num == ev.LoRAID {
			continue
		}
		if ev.OpaqueFrom < 0 || it.block < ev.OpaqueFrom {
			ev.OpaqueFrom = it.block
		}
	}
}
