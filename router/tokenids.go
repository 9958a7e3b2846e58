package router

import (
	"bytes"
	"fmt"
	"math"
)

// Token ids arrive as a completions prompt (a JSON array) or in the
// x-rolter-vllm-token-ids header (comma-separated). A 100k-token prompt is
// about 700 KB of digits, so both are read in one pass with one allocation
// (the ids) whatever their number; shapes the fast readers do not take go
// to the reference readings (encoding/json, strconv), which decide.

// appendTokenIDs reads raw, a JSON array of token ids each written as a
// plain unsigned integer that fits 32 bits, onto dst. ok is false for any
// other array (null, fractions, exponents, signs, nested lists, strings,
// out-of-range values): the decoder reads those. Past maxTokenIDs ids the
// rest is checked but not kept.
func appendTokenIDs(dst []uint32, raw []byte) (ids []uint32, ok bool) {
	ids, end, ok := readTokenIDs(dst, raw, 0)
	return ids, ok && end == len(raw)
}

// readTokenIDs is appendTokenIDs for the array starting at b[i] == '[';
// end is the index after its ']'. ok also says that the array is valid
// JSON, so a caller need not check it again.
func readTokenIDs(dst []uint32, b []byte, i int) (ids []uint32, end int, ok bool) {
	if i >= len(b) || b[i] != '[' {
		return dst, i, false
	}
	i = skipSpace(b, i+1)
	if i >= len(b) || b[i] == ']' {
		return dst, i, false // [] reads as an empty list of strings
	}
	if dst == nil {
		// Sized by the commas before the first ']': exact for a list of
		// ids, and never more than the list's own bytes.
		span := b[i:]
		if j := bytes.IndexByte(span, ']'); j >= 0 {
			span = span[:j]
		}
		dst = make([]uint32, 0, min(bytes.Count(span, []byte{','})+1, maxTokenIDs))
	}
	for {
		start := i
		var v uint64
		for i < len(b) && b[i]-'0' <= 9 {
			v = v*10 + uint64(b[i]-'0')
			i++
			if v > math.MaxUint32 {
				return dst, i, false
			}
		}
		if i == start || (b[start] == '0' && i > start+1) { // JSON has no leading zeros
			return dst, i, false
		}
		if len(dst) < maxTokenIDs {
			dst = append(dst, uint32(v))
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return dst, i, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case ']':
			return dst, i + 1, true
		default:
			return dst, i, false
		}
	}
}

// scanTokenIDHeader reads an x-rolter-vllm-token-ids value: ids separated
// by commas, spaces and tabs around them. ok is false when the value holds
// anything else, or too many ids: parseTokenIDs then reads it the slow way
// (and words the error).
func scanTokenIDHeader(h string) (ids []uint32, ok bool) {
	n := 1
	for i := 0; i < len(h); i++ {
		if h[i] == ',' {
			n++
		}
	}
	if n > maxTokenIDs {
		return nil, false
	}
	ids = make([]uint32, 0, n)
	i := 0
	for {
		for i < len(h) && (h[i] == ' ' || h[i] == '\t') {
			i++
		}
		start := i
		var v uint64
		for i < len(h) && h[i]-'0' <= 9 {
			v = v*10 + uint64(h[i]-'0')
			i++
			if v > math.MaxUint32 {
				return nil, false
			}
		}
		if i == start {
			return nil, false
		}
		ids = append(ids, uint32(v))
		for i < len(h) && (h[i] == ' ' || h[i] == '\t') {
			i++
		}
		if i == len(h) {
			return ids, true
		}
		if h[i] != ',' {
			return nil, false
		}
		i++
	}
}

// ids adds a field of token ids to the digest, one multiply per id (a
// long prompt's ids are most of its bytes; byte-wise FNV over their
// decimal text cost more than reading them).
func (d *digest) ids(tag byte, ids []uint32) {
	d.byte1(tag)
	n := len(ids)
	d.byte1(byte(n))
	d.byte1(byte(n >> 8))
	d.byte1(byte(n >> 16))
	d.byte1(byte(n >> 24))
	h := *d
	for _, id := range ids {
		h = (h ^ digest(id)) * fnvPrime
	}
	*d = h
}

// errTokenIDs is the error for a malformed x-rolter-vllm-token-ids value.
func errTokenIDs(field string) error {
	return fmt.Errorf("%w: %s must be comma-separated token ids, got %q", ErrBadRequest, headerTokenIDs, field)
}
