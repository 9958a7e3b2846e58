package router

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"unsafe"
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
		// The usual elements are read in one run (idRun); the general
		// reading below takes one element the run stopped at.
		if room := min(cap(dst), maxTokenIDs) - len(dst); room > 0 {
			var k int
			i, k = idRun(b, i, dst[len(dst):len(dst)+room])
			dst = dst[:len(dst)+k]
		}
		i = skipSpace(b, i)
		start := i
		v, n := digits(b, i)
		i += n
		if v > math.MaxUint32 {
			return dst, i, false
		}
		if n == 0 || (b[start] == '0' && n > 1) { // JSON has no leading zeros
			return dst, i, false
		}
		if len(dst) < maxTokenIDs {
			dst = append(dst, uint32(v))
		}
		if i < len(b) && b[i] == ',' && i+1 < len(b) && b[i+1]-'0' <= 9 {
			i++ // the usual "12,345": no space to skip
			continue
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

// idRun reads the run of elements at b[i:] that are an id of one to seven
// digits and its comma into out, each from one eight-byte word, up to
// len(out) of them, and returns the index after the run and how many it
// read. It stops before anything else: spaces, the last id (no comma), a
// leading zero, a longer number. It calls nothing, so the loop keeps its
// state in registers.
func idRun(b []byte, i int, out []uint32) (end, k int) {
	for i+8 <= len(b) && k < len(out) {
		w := binary.LittleEndian.Uint64(b[i : i+8])
		a := w ^ zeros // a digit's byte is now its value, 0-9
		// The top byte is marked whatever it holds: n ≤ 7, and a digit
		// there fails the comma test (eight digits stop the run).
		n := bits.TrailingZeros64(((a+0x7676767676767676)|a)&highs|1<<63) >> 3
		if n == 0 || byte(w>>(8*n&63)) != ',' || (a&0xFF == 0 && n > 1) {
			break
		}
		out[k] = uint32(swarValue(a, n))
		k++
		i += n + 1
	}
	return i, k
}

// digits reads the decimal digits at b[i:] and returns their value and
// count; past 10 digits the value is only known to exceed 32 bits. A number
// of up to seven digits followed by a non-digit is read eight bytes at a
// time: no branch per digit.
func digits(b []byte, i int) (v uint64, n int) {
	if i+8 <= len(b) {
		a := binary.LittleEndian.Uint64(b[i:]) ^ zeros // a digit's byte is now its value, 0-9
		// A byte above 9 gets its high bit set by the add (or had it);
		// a carry can only mark bytes after the first non-digit.
		m := ((a + 0x7676767676767676) | a) & highs
		if n = bits.TrailingZeros64(m) / 8; n > 0 && n < 8 {
			return swarValue(a, n), n
		}
	}
	for n = 0; i+n < len(b) && b[i+n]-'0' <= 9; n++ {
		if v <= math.MaxUint32 {
			v = v*10 + uint64(b[i+n]-'0')
		}
	}
	return v, n
}

// zeros turns each ASCII digit of a word into its value (by xor).
const zeros = 0x3030303030303030

// swarValue is the number written by the n (1-7) digit values in the low
// bytes of a, first digit lowest: the digits are shifted to the top bytes
// (zeros lead), then pairs, quads and octets of digits are combined.
func swarValue(a uint64, n int) uint64 {
	x := a << ((64 - 8*n) & 63)
	x = (x & 0x0F0F0F0F0F0F0F0F) * (10<<8 + 1) >> 8
	x = (x & 0x00FF00FF00FF00FF) * (100<<16 + 1) >> 16
	x = (x & 0x0000FFFF0000FFFF) * (10000<<32 + 1) >> 32
	return x
}

// scanTokenIDHeader reads an x-rolter-vllm-token-ids value: ids separated
// by commas, spaces and tabs around them. ok is false when the value holds
// anything else, or too many ids: parseTokenIDs then reads it the slow way
// (and words the error).
func scanTokenIDHeader(hs string) (ids []uint32, ok bool) {
	if hs == "" {
		return nil, false
	}
	// A read-only view of the header's bytes: it is not copied (a long
	// prompt's header is most of a megabyte) and never written.
	h := unsafe.Slice(unsafe.StringData(hs), len(hs))
	n := bytes.Count(h, []byte{','}) + 1
	if n > maxTokenIDs {
		return nil, false
	}
	ids = make([]uint32, 0, n)
	i := 0
	for {
		// The usual "12,345," run, as in a body's list (idRun).
		if room := cap(ids) - len(ids); room > 0 {
			var k int
			i, k = idRun(h, i, ids[len(ids):cap(ids)])
			ids = ids[:len(ids)+k]
		}
		for i < len(h) && (h[i] == ' ' || h[i] == '\t') {
			i++
		}
		v, n := digits(h, i)
		i += n
		if n == 0 || v > math.MaxUint32 {
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

// ids adds a field of token ids to the digest: like bytes of the ids'
// four-byte little-endian forms, so a long prompt's ids enter it as one
// contentSum.
func (d *digest) ids(tag byte, ids []uint32) {
	if len(ids) == 0 {
		d.bytes(tag, nil)
		return
	}
	if littleEndian {
		// The ids' memory is their little-endian bytes: read in place.
		d.bytes(tag, unsafe.Slice((*byte)(unsafe.Pointer(&ids[0])), 4*len(ids)))
		return
	}
	b := make([]byte, 4*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint32(b[4*i:], id)
	}
	d.bytes(tag, b)
}

// littleEndian reports whether this machine stores integers lowest byte
// first (amd64, arm64 and most others).
var littleEndian = func() bool { x := uint16(1); return *(*byte)(unsafe.Pointer(&x)) == 1 }()

// errTokenIDs is the error for a malformed x-rolter-vllm-token-ids value.
func errTokenIDs(field string) error {
	return fmt.Errorf("%w: %s must be comma-separated token ids, got %q", ErrBadRequest, headerTokenIDs, field)
}
