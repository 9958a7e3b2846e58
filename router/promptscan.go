package router

import (
	"bytes"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// The single-pass prompt scanner. extractPrompt's reference semantics are
// those of encoding/json decoding the body into conversation (prompt.go);
// decoding through reflection costs more than the rest of the router's
// request handling together, so bodies are first read by walking the bytes
// once, without building any value. The scanner mirrors the decoder exactly
// for the shapes clients send; wherever it would have to reproduce one of
// the decoder's corner cases (keys matched case-insensitively or written
// with escapes, repeated keys, a value of the wrong type) it gives up and
// the decoder reads the body instead, so the result never depends on which
// of the two read it (TestScanMatchesDecoder, FuzzScanMatchesDecoder).

// fieldIndex says which of names key (a raw JSON string token) is: its
// index, -1 for none, or -2 when only the decoder can tell (an escaped or
// non-ASCII key, or one equal to a name but for letter case).
func fieldIndex(key []byte, names []string) int {
	k := key[1 : len(key)-1]
	for i, n := range names {
		if string(k) == n {
			return i
		}
	}
	for _, c := range k {
		if c == '\\' || c >= utf8.RuneSelf {
			return -2
		}
	}
	// k is ASCII here, and so are the names: a case-folded match has
	// their length.
	for _, n := range names {
		if len(n) == len(k) && bytes.EqualFold(k, []byte(n)) {
			return -2
		}
	}
	return -1
}

// members calls fn with the index among names and the raw value of every
// member of the JSON object obj (valid JSON, starting with '{'). It
// reports false when fn does, when a key needs the decoder, or when a
// named key appears twice.
func (s *scanner) members(obj []byte, names []string, fn func(field int, val []byte) bool) bool {
	var seen uint32
	i := 1
	for {
		i = skipSpace(obj, i)
		if obj[i] == '}' {
			return true
		}
		if obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
		ks := i
		i = skipString(obj, i)
		f := fieldIndex(obj[ks:i], names)
		i = skipSpace(obj, i)
		i = skipSpace(obj, i+1) // ':'
		vs := i
		i = s.skipValue(obj, i)
		switch {
		case f == -2:
			return false
		case f >= 0:
			if seen&(1<<f) != 0 {
				return false
			}
			seen |= 1 << f
			if !fn(f, obj[vs:i]) {
				return false
			}
		}
	}
}

// elements calls fn with every element of the JSON array arr (valid JSON,
// starting with '['); it stops and reports false when fn does.
func (s *scanner) elements(arr []byte, fn func(el []byte) bool) bool {
	i := 1
	for {
		i = skipSpace(arr, i)
		if arr[i] == ']' {
			return true
		}
		if arr[i] == ',' {
			i = skipSpace(arr, i+1)
		}
		st := i
		i = s.skipValue(arr, i)
		if !fn(arr[st:i]) {
			return false
		}
	}
}

// knownAt returns the span validation noted for the value starting at
// b[i] (b is the body or a part of it), or nil.
func (s *scanner) knownAt(b []byte, i int) *knownSpan {
	if s.spans.n == 0 {
		return nil
	}
	p := &b[i]
	for k := range s.spans.n {
		if sp := &s.spans.spans[k]; &s.body[sp.at] == p {
			return sp
		}
	}
	return nil
}

// skipValue is skipValue (body.go) stepping over the values validation
// noted, at any depth, without reading them.
func (s *scanner) skipValue(b []byte, i int) int { return skipNoted(s, b, i) }

// isStringOrNull reports whether a raw JSON value decodes into a Go string
// without error.
func isStringOrNull(v []byte) bool { return v[0] == '"' || v[0] == 'n' }

// scanner holds the scratch space of one extraction.
type scanner struct {
	x       *extractor
	scratch []byte
	// known is a span of the body whose token ids parseRequest read
	// already (knownIDs); nil: none.
	known    []byte
	knownIDs []uint32
	// body and spans are the body being read and the values parseRequest
	// noted in it.
	body  []byte
	spans knownSpans
}

// str decodes a raw JSON string or null as encoding/json would into a Go
// string. The result aliases raw or the scratch buffer: use it before the
// next call.
func (s *scanner) str(raw []byte) []byte {
	if len(raw) == 0 || raw[0] != '"' {
		return nil
	}
	in := raw[1 : len(raw)-1]
	if sp := s.knownAt(raw, 0); sp != nil && !sp.esc || bytes.IndexByte(in, '\\') < 0 {
		return in
	}
	s.scratch = unescapeJSON(s.scratch[:0], in)
	return s.scratch
}

// unescapeJSON appends the decoded content of a valid JSON string (without
// its quotes, valid UTF-8) to dst, replacing unpaired surrogates with
// U+FFFD as encoding/json does.
func unescapeJSON(dst, in []byte) []byte {
	for i := 0; i < len(in); {
		j := bytes.IndexByte(in[i:], '\\')
		if j < 0 {
			return append(dst, in[i:]...)
		}
		dst = append(dst, in[i:i+j]...)
		i += j + 1
		switch c := in[i]; c {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(in[i+1:])
			i += 5
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if i+6 <= len(in) && in[i] == '\\' && in[i+1] == 'u' {
					r2 = hex4(in[i+2:])
				}
				if dec := utf16.DecodeRune(r, r2); dec != unicode.ReplacementChar {
					dst = utf8.AppendRune(dst, dec)
					i += 6
					continue
				}
				r = unicode.ReplacementChar
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // '"', '\\', '/'
			dst = append(dst, c)
		}
		i++
	}
	return dst
}

// hex4 reads the four hex digits of a \u escape (valid JSON).
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		default:
			c = c - 'A' + 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

var (
	topFields      = []string{"messages", "prompt", "input"}
	messageFields  = []string{"role", "content", "tool_calls", "tool_call_id"}
	toolCallFields = []string{"id", "function"}
	functionFields = []string{"name", "arguments"}
	partFields     = []string{"type", "text", "image_url"}
	imageFields    = []string{"url"}
)

// scanConversation extracts body, which must be valid UTF-8 and valid
// JSON, into x and returns the prompt's token ids. ok is false when the
// decoder must read the body instead; x is then partly written.
func (s *scanner) scanConversation(body []byte) (ids []uint32, ok bool) {
	i := skipSpace(body, 0)
	if body[i] != '{' {
		return nil, false
	}
	var msgs, prompt, input []byte
	if !s.members(body[i:], topFields, func(f int, v []byte) bool {
		switch f {
		case 0:
			if v[0] == 'n' {
				return true
			}
			msgs = v
			return v[0] == '['
		case 1:
			prompt = v
		case 2:
			input = v
		}
		return true
	}) {
		return nil, false
	}
	x := s.x
	if msgs == nil && prompt == nil && input == nil {
		x.d.bytes('B', body)
		return nil, true
	}
	if msgs != nil && !s.elements(msgs, s.message) {
		return nil, false
	}
	ids = s.promptField(prompt)
	s.promptField(input)
	return ids, true
}

// message hashes one element of "messages" like extractor.message.
func (s *scanner) message(m []byte) bool {
	var role, callID, content, calls []byte
	switch m[0] {
	case 'n':
	case '{':
		if !s.members(m, messageFields, func(f int, v []byte) bool {
			switch f {
			case 0:
				role = v
				return isStringOrNull(v)
			case 1:
				content = v
			case 2:
				calls = v
				return v[0] == '[' || v[0] == 'n'
			case 3:
				callID = v
				return isStringOrNull(v)
			}
			return true
		}) {
			return false
		}
	default:
		return false
	}
	x := s.x
	x.d.bytes('R', s.str(role))
	if id := s.str(callID); len(id) > 0 {
		x.d.bytes('r', id)
	}
	s.content(content)
	if len(calls) == 0 || calls[0] == 'n' {
		return true
	}
	return s.elements(calls, s.toolCall)
}

// toolCall hashes one tool call's id, function name and arguments.
func (s *scanner) toolCall(c []byte) bool {
	var id, fn, name, args []byte
	switch c[0] {
	case 'n':
	case '{':
		if !s.members(c, toolCallFields, func(f int, v []byte) bool {
			if f == 0 {
				id = v
				return isStringOrNull(v)
			}
			fn = v
			return v[0] == '{' || v[0] == 'n'
		}) {
			return false
		}
	default:
		return false
	}
	if len(fn) > 0 && fn[0] == '{' && !s.members(fn, functionFields, func(f int, v []byte) bool {
		if f == 0 {
			name = v
		} else {
			args = v
		}
		return isStringOrNull(v)
	}) {
		return false
	}
	x := s.x
	x.d.bytes('c', s.str(id))
	x.d.bytes('n', s.str(name))
	x.d.bytes('a', s.str(args))
	return true
}

// content reads a message's content like extractor.content: a string, a
// list of parts, or anything else hashed whole.
func (s *scanner) content(raw []byte) {
	switch {
	case len(raw) == 0 || raw[0] == 'n':
	case raw[0] == '"':
		textOf(s.x, s.str(raw))
	case raw[0] == '[':
		s.elements(raw, func(p []byte) bool { s.part(p); return true })
	default:
		s.x.d.bytes('X', raw)
	}
}

// part reads one content part like extractor.content does; a part whose
// shape needs the decoder is handed to extractor.part.
func (s *scanner) part(p []byte) {
	x := s.x
	if p[0] != '{' {
		// null decodes to an empty part, anything else fails to: either
		// way the part's JSON is its identity.
		x.d.bytes('X', p)
		return
	}
	var typ, text, image []byte
	if !s.members(p, partFields, func(f int, v []byte) bool {
		switch f {
		case 0:
			typ = v
		case 1:
			text = v
		case 2:
			image = v
			return true
		}
		return isStringOrNull(v)
	}) {
		x.part(p)
		return
	}
	switch t := s.str(typ); {
	case string(t) == "text":
		textOf(x, s.str(text))
	case string(t) == "image_url" && len(image) > 0:
		var url []byte
		switch image[0] {
		case '"':
			url = image
		case '{':
			if !s.members(image, imageFields, func(_ int, v []byte) bool { url = v; return true }) {
				x.part(p)
				return
			}
		}
		x.d.bytes('I', s.str(url))
	default:
		x.d.bytes('X', p)
	}
}

// promptField reads a completions prompt or embeddings input like
// extractor.promptField; token ids and mixed lists go to it.
func (s *scanner) promptField(raw []byte) []uint32 {
	switch {
	case len(raw) == 0 || raw[0] == 'n':
		return nil
	case raw[0] == '"':
		textOf(s.x, s.str(raw))
		return nil
	case raw[0] == '[' && s.elements(raw, isStringOrNull):
		s.elements(raw, func(v []byte) bool { textOf(s.x, s.str(v)); return true })
		return nil
	}
	if len(s.known) > 0 && len(raw) == len(s.known) && &raw[0] == &s.known[0] {
		s.x.d.ids('K', s.knownIDs)
		return capIDs(s.knownIDs)
	}
	if ids, ok := appendTokenIDs(nil, raw); ok {
		s.x.d.ids('K', ids)
		return ids
	}
	return s.x.promptField(raw)
}
