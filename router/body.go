package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// request is what the router reads from a client body: the addressed model,
// whether a stream was asked for, and where the top-level "model" value sits
// so that each attempt can splice in its target's upstream model without
// re-encoding the rest of the body.
type request struct {
	body       []byte
	model      string
	stream     bool
	modelStart int // byte span of the top-level "model" value
	modelEnd   int
}

// parseRequest validates body (UTF-8, one JSON object with a string
// "model") and locates the model value. Errors wrap ErrBadRequest.
func parseRequest(body []byte) (request, error) {
	if !utf8.Valid(body) {
		return request{}, fmt.Errorf("%w: body is not valid UTF-8", ErrBadRequest)
	}
	if !validJSON(body) {
		return request{}, fmt.Errorf("%w: body is not valid JSON", ErrBadRequest)
	}
	r := request{body: body, modelStart: -1}
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return request{}, fmt.Errorf("%w: body must be a JSON object", ErrBadRequest)
	}
	i++
	for {
		i = skipSpace(body, i)
		if body[i] == '}' {
			break
		}
		if body[i] == ',' {
			i = skipSpace(body, i+1)
		}
		ks := i
		i = skipValue(body, i)
		key := body[ks:i]
		i = skipSpace(body, i)
		i = skipSpace(body, i+1) // ':'
		vs := i
		i = skipValue(body, i)
		switch {
		case keyIs(key, "model"):
			switch body[vs] {
			case '"':
				r.model = string(unquoted(body[vs:i]))
			case 'n': // null leaves an earlier "model" as the decoder does
			default:
				return request{}, fmt.Errorf("%w: \"model\" must be a string", ErrBadRequest)
			}
			r.modelStart, r.modelEnd = vs, i
		case keyIs(key, "stream"):
			r.stream = bytes.Equal(body[vs:i], []byte("true"))
		}
	}
	if r.modelStart < 0 || r.model == "" {
		return request{}, fmt.Errorf("%w: \"model\" is required", ErrBadRequest)
	}
	return r, nil
}

// withModel returns the body with the top-level model replaced by model.
func (r *request) withModel(model string) []byte {
	if model == r.model {
		return r.body
	}
	n := len(r.body) - (r.modelEnd - r.modelStart)
	var q []byte
	if plainJSONString(model) {
		n += len(model) + 2
	} else {
		q, _ = json.Marshal(model)
		n += len(q)
	}
	out := make([]byte, 0, n)
	out = append(out, r.body[:r.modelStart]...)
	if q == nil {
		out = append(append(append(out, '"'), model...), '"')
	} else {
		out = append(out, q...)
	}
	return append(out, r.body[r.modelEnd:]...)
}

// plainJSONString reports whether json.Marshal would write s as is between
// quotes: printable ASCII other than the quote, the backslash and the
// characters it escapes for HTML.
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
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
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
