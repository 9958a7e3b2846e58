package router

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"unicode/utf8"
)

// request is what the router reads from a client body: the addressed model,
// whether a stream was asked for, and where the top-level "model" value sits
// so that each attempt can splice in its target's upstream model without
// re-encoding the rest of the body. A top-level "prompt" given as plain
// token ids is read while the body is validated (promptIDs, the value's
// span at promptAt:promptEnd), so extraction does not read it again.
type request struct {
	body       []byte
	model      string
	stream     bool
	modelStart int // byte span of the top-level "model" value
	modelEnd   int

	promptIDs           []uint32
	promptAt, promptEnd int

	// known are the long values validation found the extent of, so
	// extraction steps over them without reading them again: storage in
	// the body's buffer (bodyBuf.parse), not in the request, which every
	// open stream holds; nil when nothing kept them. They are read once,
	// by extract, which lets go of them.
	known *knownSpans
	// keys is storage for the block keys of the request's token ids
	// (bodyBuf.parse); nil: they are allocated.
	keys []uint64
}

// longSpan is the length from which a string's extent is noted in
// knownSpans: below it, reading the string again costs less than
// looking it up.
const longSpan = 256

// knownSpans notes up to len(spans) values of a body by their byte
// extent, in the order met: long strings (and whether they hold an
// escape) and a token-id prompt. Past that many, the rest are read again.
type knownSpans struct {
	n     int
	spans [8]knownSpan
}

type knownSpan struct {
	at, end int // b[at] is the value's first byte, b[end-1] its last
	esc     bool
}

func (k *knownSpans) add(at, end int, esc bool) {
	if k.n < len(k.spans) {
		k.spans[k.n] = knownSpan{at: at, end: end, esc: esc}
		k.n++
	}
}

// parseRequest validates body (UTF-8, one JSON object with a string
// "model") and locates the model value, in one pass over the bytes.
// Errors wrap ErrBadRequest.
func parseRequest(body []byte) (request, error) {
	var known knownSpans
	return parseRequestInto(body, nil, &known)
}

// parseRequestInto is parseRequest reading a token-id prompt onto ids
// (empty, with room: it grows if the prompt needs more), or into storage
// of its own when ids is nil, and noting long values in known (reset
// first; the request does not keep it: the caller may, as request.known).
func parseRequestInto(body []byte, ids []uint32, known *knownSpans) (request, error) {
	r := request{body: body, modelStart: -1}
	*known = knownSpans{}
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		if err := unreadable(body); err != nil || !validJSON(body) {
			return request{}, cmp.Or(err, errNotJSON)
		}
		return request{}, fmt.Errorf("%w: body must be a JSON object", ErrBadRequest)
	}
	// The object is read checking its strings for UTF-8 as well (every
	// byte outside a string is ASCII, or the grammar refuses it): once
	// it is read, the body is valid UTF-8. When it is not read, which
	// of the two it is not is told apart afterwards.
	invalid := func() (request, error) { return request{}, cmp.Or(unreadable(body), errNotJSON) }
	var modelErr error // reported once the body is known to be valid JSON
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		i++
	} else {
		for {
			if i >= len(body) || body[i] != '"' {
				return invalid()
			}
			ks := i
			var ok bool
			if i, _, ok = scanString(body, i, true); !ok {
				return invalid()
			}
			key := body[ks:i]
			i = skipSpace(body, i)
			if i >= len(body) || body[i] != ':' {
				return invalid()
			}
			vs := skipSpace(body, i+1)
			read := false
			if vs < len(body) && body[vs] == '[' && keyIs(key, "prompt") {
				dst := ids
				if r.promptIDs != nil {
					dst = nil // a second "prompt": the first's ids stay whole
				}
				var ids []uint32
				if ids, i, read = readTokenIDs(dst, body, vs); read {
					r.promptIDs, r.promptAt, r.promptEnd = ids, vs, i
					known.add(vs, i, false)
				}
			}
			if !read {
				if i, ok = validValue(body, vs, 1, known); !ok {
					return invalid()
				}
			}
			switch {
			case keyIs(key, "model"):
				switch body[vs] {
				case '"':
					r.model = string(unquoted(body[vs:i]))
				case 'n': // null leaves an earlier "model" as the decoder does
				default:
					modelErr = fmt.Errorf("%w: \"model\" must be a string", ErrBadRequest)
				}
				r.modelStart, r.modelEnd = vs, i
			case keyIs(key, "stream"):
				r.stream = bytes.Equal(body[vs:i], []byte("true"))
			}
			i = skipSpace(body, i)
			if i < len(body) && body[i] == ',' {
				i = skipSpace(body, i+1)
				continue
			}
			if i < len(body) && body[i] == '}' {
				i++
				break
			}
			return invalid()
		}
	}
	if skipSpace(body, i) != len(body) {
		return invalid()
	}
	if modelErr != nil {
		return request{}, modelErr
	}
	if r.modelStart < 0 || r.model == "" {
		return request{}, fmt.Errorf("%w: \"model\" is required", ErrBadRequest)
	}
	return r, nil
}

// errNotJSON refuses a body that is UTF-8 but not JSON.
var errNotJSON = fmt.Errorf("%w: body is not valid JSON", ErrBadRequest)

// unreadable is the error for a body that is not UTF-8, nil for one that is.
func unreadable(body []byte) error {
	if !utf8.Valid(body) {
		return fmt.Errorf("%w: body is not valid UTF-8", ErrBadRequest)
	}
	return nil
}

// withModel returns the body with the top-level model replaced by model.
func (r *request) withModel(model string) []byte {
	if model == r.model {
		return r.body
	}
	var out bytes.Buffer
	_, _ = r.bodyFor(model, nil).WriteTo(&out)
	return out.Bytes()
}

// bodyFor is the upstream body for model: the client's bytes with the
// model value spliced in, read from the client's buffer in place (a long
// prompt is not copied per attempt). quoted is model written as a JSON
// string (quotedJSON) when the caller keeps it, the target's made once
// per snapshot; nil: it is written here.
func (r *request) bodyFor(model string, quoted []byte) *splicedBody {
	sp := new(splicedBody)
	r.spliceInto(sp, model, quoted)
	return sp
}

// spliceInto sets *sp to bodyFor's body.
func (r *request) spliceInto(sp *splicedBody, model string, quoted []byte) {
	if model == r.model {
		*sp = splicedBody{parts: [3][]byte{r.body}, n: int64(len(r.body))}
		return
	}
	q := quoted
	if q == nil {
		q = quotedJSON(model)
	}
	*sp = splicedBody{parts: [3][]byte{r.body[:r.modelStart], q, r.body[r.modelEnd:]}}
	sp.n = int64(len(sp.parts[0]) + len(q) + len(sp.parts[2]))
}

// upstreamBody is the body of an attempt on t, which forwards model. The
// request's first attempt has it in the attempt's own storage (bodyv: a
// parsed body is never empty, so n is 0 only until then); a retry or a
// resume gets one of its own, as an earlier attempt's transport may still
// be reading its body.
func (a *attempt) upstreamBody(t *target, model string) *splicedBody {
	sp := &a.bodyv
	if sp.n != 0 {
		sp = new(splicedBody)
	}
	a.req.spliceInto(sp, model, t.quoted)
	return sp
}

// splicedBody reads three byte slices as one body. A part read to its
// end is dropped (nil), so a body sent whole holds no reference to the
// request's buffer: the first attempt's lives as long as the request
// (attempt.bodyv), which lets go of the buffer at its first byte.
type splicedBody struct {
	parts [3][]byte
	n     int64 // total length
}

// consumed drops the first n bytes of part i.
func (b *splicedBody) consumed(i, n int) {
	if b.parts[i] = b.parts[i][n:]; len(b.parts[i]) == 0 {
		b.parts[i] = nil
	}
}

func (b *splicedBody) Read(p []byte) (int, error) {
	for i := range b.parts {
		if len(b.parts[i]) > 0 {
			n := copy(p, b.parts[i])
			b.consumed(i, n)
			return n, nil
		}
	}
	return 0, io.EOF
}

// WriteTo hands each part to w whole: the transport's buffered writer
// passes a large one straight to the connection.
func (b *splicedBody) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for i := range b.parts {
		if len(b.parts[i]) == 0 {
			continue
		}
		n, err := w.Write(b.parts[i])
		total += int64(n)
		b.consumed(i, n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// plainJSONString reports whether json.Marshal would write s as is between
// quotes: printable ASCII other than the quote, the backslash and the
// characters it escapes for HTML.
// quotedJSON is s as a JSON string, written as json.Marshal writes it.
func quotedJSON(s string) []byte {
	if !plainJSONString(s) {
		q, _ := json.Marshal(s)
		return q
	}
	q := make([]byte, 0, len(s)+2)
	return append(append(append(q, '"'), s...), '"')
}

func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// unquoted decodes a raw JSON string token (valid JSON and UTF-8) as
// encoding/json would; without escapes it aliases raw.
func unquoted(raw []byte) []byte {
	in := raw[1 : len(raw)-1]
	if bytes.IndexByte(in, '\\') < 0 {
		return in
	}
	return unescapeJSON(make([]byte, 0, len(in)), in)
}

// keyIs compares a raw JSON string token with name, unescaping only when
// the token contains an escape.
func keyIs(raw []byte, name string) bool {
	return string(unquoted(raw)) == name
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index just past the JSON value starting at i. b is
// known to be valid JSON.
func skipValue(b []byte, i int) int { return skipNoted(nil, b, i) }

// skipNoted is skipValue stepping over, at any depth and without reading
// them, the values validation noted in s (scanner.knownAt); a nil s, or
// one that noted none, skips as skipValue does.
func skipNoted(s *scanner, b []byte, i int) int {
	noted := s != nil && s.spans.n > 0
	if noted {
		if sp := s.knownAt(b, i); sp != nil {
			return i + sp.end - sp.at
		}
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			// Most bytes of a long value (digits of token ids, text)
			// are not structural: step over them without the switch.
			i = nextStructural(b, i)
			if i == len(b) {
				break
			}
			switch b[i] {
			case '"':
				if noted {
					if sp := s.knownAt(b, i); sp != nil {
						i += sp.end - sp.at
						continue
					}
				}
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default:
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// structural marks the bytes skipValue must look at inside an object or
// an array.
var structural = [256]bool{'"': true, '{': true, '}': true, '[': true, ']': true}

// nextStructural returns the index of the first structural byte at or
// after i (len(b) if none), eight bytes at a time.
func nextStructural(b []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	// has marks the bytes of w equal to c; its lowest mark is exact
	// (borrows may add marks above a true one, never below).
	has := func(w uint64, c byte) uint64 { x := w ^ (ones * uint64(c)); return (x - ones) &^ x & highs }
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		// '[' and ']' are '{' and '}' without bit 5.
		folded := w | ones*0x20
		if m := has(w, '"') | has(folded, '{') | has(folded, '}'); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for i < len(b) && !structural[b[i]] {
		i++
	}
	return i
}

// skipString returns the index just past the JSON string starting at
// b[i] == '"': the first quote not escaped by an odd run of backslashes.
func skipString(b []byte, i int) int {
	for i++; ; {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b)
		}
		q := i + j
		n := 0
		for q-1-n >= i && b[q-1-n] == '\\' {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		i = q + 1
	}
}
