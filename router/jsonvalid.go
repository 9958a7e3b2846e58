package router

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// maxJSONDepth is encoding/json's nesting limit: deeper documents are not
// valid to it, so they are not to the router either.
const maxJSONDepth = 10000

// validJSON reports whether b is exactly one JSON value, as json.Valid
// does (same grammar, same nesting limit; bytes of strings are not checked
// for UTF-8, as there). It makes one pass without allocating and runs
// several times faster than json.Valid's state machine
// (TestValidJSONMatchesStdlib, FuzzValidJSON).
func validJSON(b []byte) bool {
	end, ok := validValue(b, skipSpace(b, 0), 0, nil)
	return ok && skipSpace(b, end) == len(b)
}

// validValue checks the one JSON value starting at b[i], nested in outer
// levels, and returns the index just past it. With known (a request
// body's reading, parseRequest), its strings must be valid UTF-8 too, and
// long ones are noted in known.
func validValue(b []byte, i, outer int, known *knownSpans) (int, bool) {
	text := known != nil
	var small [4]uint64
	objects := small[:] // bit d: level d is an object; grows past 256 levels
	depth := 0
	needValue := true
	for {
		if needValue {
			if i >= len(b) {
				return i, false
			}
			switch c := b[i]; c {
			case '{', '[':
				if outer+depth == maxJSONDepth {
					return i, false
				}
				word, bit := depth>>6, uint64(1)<<(depth&63)
				if word == len(objects) {
					objects = append(objects, 0)
				}
				objects[word] &^= bit
				if c == '{' {
					objects[word] |= bit
				}
				depth++
				i = skipSpace(b, i+1)
				if i < len(b) && b[i] == c+2 { // '}' is '{'+2, ']' is '['+2
					depth--
					i++
					needValue = false
					continue
				}
				if c == '{' {
					var ok bool
					if i, ok = objectKey(b, i, text); !ok {
						return i, false
					}
				}
				continue
			case '"':
				start := i
				var ok, esc bool
				if i, esc, ok = scanString(b, i, text); !ok {
					return i, false
				}
				if known != nil && i-start >= longSpan {
					known.add(start, i, esc)
				}
			case 't':
				if !hasLiteral(b, i, "true") {
					return i, false
				}
				i += 4
			case 'f':
				if !hasLiteral(b, i, "false") {
					return i, false
				}
				i += 5
			case 'n':
				if !hasLiteral(b, i, "null") {
					return i, false
				}
				i += 4
			default:
				var ok bool
				if i, ok = scanNumber(b, i); !ok {
					return i, false
				}
				// A list of numbers (token ids) is read here to its
				// end; the loop below sees only the last one.
				if d := depth - 1; d >= 0 && objects[d>>6]&(1<<(d&63)) == 0 {
					if i, ok = numberRun(b, i); !ok {
						return i, false
					}
				}
			}
			needValue = false
		}
		// After a value.
		if depth == 0 {
			return i, true
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return i, false
		}
		d := depth - 1
		object := objects[d>>6]&(1<<(d&63)) != 0
		switch c := b[i]; {
		case c == ',':
			i = skipSpace(b, i+1)
			if object {
				var ok bool
				if i, ok = objectKey(b, i, text); !ok {
					return i, false
				}
			}
			needValue = true
		case c == '}' && object, c == ']' && !object:
			depth--
			i++
		default:
			return i, false
		}
	}
}

// numberRun continues a list after a number ending at i: while the next
// element is a number too, it is checked and skipped. It returns the index
// after the last number read.
func numberRun(b []byte, i int) (int, bool) {
	for {
		j := skipSpace(b, i)
		if j >= len(b) || b[j] != ',' {
			return i, true
		}
		k := skipSpace(b, j+1)
		if k >= len(b) || (b[k] != '-' && b[k]-'0' > 9) {
			return i, true // not a number: the main loop reads it
		}
		var ok bool
		if i, ok = scanNumber(b, k); !ok {
			return i, false
		}
	}
}

// objectKey reads `"key" :` at i and returns where the value starts;
// with text, the key must be valid UTF-8.
func objectKey(b []byte, i int, text bool) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return i, false
	}
	i, _, ok := scanString(b, i, text)
	if !ok {
		return i, false
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return i, false
	}
	return skipSpace(b, i+1), true
}

func hasLiteral(b []byte, i int, lit string) bool {
	return len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit
}

// ones and highs hold each byte's lowest and highest bit; shortString is
// how far scanString looks word by word before calling IndexByte.
const (
	ones, highs = 0x0101010101010101, 0x8080808080808080
	shortString = 32
)

// scanString checks the string starting at b[i] == '"' and returns the
// index after its closing quote, and whether it holds an escape; with
// text, it must be valid UTF-8 as well. The quotes and backslashes are
// found with bytes.IndexByte (vector instructions on amd64 and arm64),
// and the spans between them are checked for control characters (and,
// with text, UTF-8: textByte) 32 bytes at a time. (One SWAR pass looking
// for all four kinds of byte at once was tried: it ran 1.3-1.6 times
// slower than the two vector searches and the check together.)
func scanString(b []byte, i int, text bool) (end int, escaped, ok bool) {
	i++
	var high uint64 // with text, a byte's top bit ends the word-wise read
	if text {
		high = highs
	}
	// Keys and short values end within a few words: those are read
	// eight bytes at a time without a call.
	for end := min(i+shortString, len(b)); i+8 <= end; i += 8 {
		w := binary.LittleEndian.Uint64(b[i : i+8])
		q, bs := w^(ones*'"'), w^(ones*'\\')
		// Each term's lowest mark is exact: (x - ones) &^ x marks zero
		// bytes of x, (w - ones*0x20) &^ w bytes below 0x20.
		if m := ((q-ones)&^q | (bs-ones)&^bs | (w-ones*0x20)&^w | w&high) & highs; m != 0 {
			i += bits.TrailingZeros64(m) / 8
			if b[i] == '"' {
				return i + 1, false, true
			}
			break
		}
	}
	quote := -1 // the first '"' at or after i once looked for
	for {
		if quote < i {
			q := bytes.IndexByte(b[i:], '"')
			if q < 0 {
				return len(b), escaped, false
			}
			quote = i + q
		}
		span := b[i:quote]
		esc := bytes.IndexByte(span, '\\')
		if esc >= 0 {
			span = span[:esc]
		}
		j := -1
		if text {
			j = textByte(span)
		} else {
			j = controlByte(span)
		}
		if j >= 0 {
			return i + j, escaped, false
		}
		if esc < 0 {
			return quote + 1, escaped, true
		}
		escaped = true
		i += esc + 1 // the escaped character
		if i >= len(b) {
			return i, escaped, false
		}
		switch b[i] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		case 'u':
			if len(b)-i <= 4 {
				return i, escaped, false
			}
			for _, h := range b[i+1 : i+5] {
				if !isHex(h) {
					return i, escaped, false
				}
			}
			i += 4
		default:
			return i, escaped, false
		}
		i++
	}
}

// textByte returns the index of a byte of s that is a control character
// or part of invalid UTF-8, or -1 when there is none (the index of the
// first such byte when it is ASCII; some index otherwise). ASCII text is
// read once, 32 bytes at a time; from its first non-ASCII byte on, s is
// read twice, by utf8.Valid and controlByte.
func textByte(s []byte) int {
	i := 0
	for ; i+32 <= len(s); i += 32 {
		w := (*[32]byte)(s[i : i+32])
		a, b := binary.LittleEndian.Uint64(w[0:]), binary.LittleEndian.Uint64(w[8:])
		c, d := binary.LittleEndian.Uint64(w[16:]), binary.LittleEndian.Uint64(w[24:])
		// (w - ones*0x20) | w has a byte's top bit set for a byte below
		// 0x20 or from 0x80.
		if ((a-ones*0x20)|a|(b-ones*0x20)|b|(c-ones*0x20)|c|(d-ones*0x20)|d)&highs != 0 {
			break
		}
	}
	for ; i < len(s) && s[i] >= 0x20 && s[i] < utf8.RuneSelf; i++ {
	}
	if i == len(s) {
		return -1
	}
	if s[i] < 0x20 {
		return i
	}
	if !utf8.Valid(s[i:]) {
		return i
	}
	if j := controlByte(s[i:]); j >= 0 {
		return i + j
	}
	return -1
}

// controlByte returns the index of the first byte of s below 0x20 (a
// control character, which a JSON string may not hold unescaped), or -1.
func controlByte(s []byte) int {
	// (w - ones*0x20) &^ w marks the bytes below 0x20; the lowest mark is
	// exact (borrows may add marks above it, never below).
	i := 0
	for ; i+32 <= len(s); i += 32 {
		w := (*[32]byte)(s[i : i+32])
		a, b := binary.LittleEndian.Uint64(w[0:]), binary.LittleEndian.Uint64(w[8:])
		c, d := binary.LittleEndian.Uint64(w[16:]), binary.LittleEndian.Uint64(w[24:])
		if ((a-ones*0x20)&^a|(b-ones*0x20)&^b|(c-ones*0x20)&^c|(d-ones*0x20)&^d)&highs != 0 {
			break
		}
	}
	for ; i+8 <= len(s); i += 8 {
		w := binary.LittleEndian.Uint64(s[i : i+8])
		if m := (w - ones*0x20) &^ w & highs; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(s); i++ {
		if s[i] < 0x20 {
			return i
		}
	}
	return -1
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// scanNumber checks the number starting at b[i] and returns the index
// after it: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(b []byte, i int) (int, bool) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return i, false
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		i = skipDigits(b, i+1)
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		j := skipDigits(b, i+1)
		if j == i+1 {
			return j, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return j, false
		}
		i = j
	}
	return i, true
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}
