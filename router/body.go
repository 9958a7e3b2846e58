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
	if !json.Valid(body) {
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
			if err := json.Unmarshal(body[vs:i], &r.model); err != nil {
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
	q, _ := json.Marshal(model)
	out := make([]byte, 0, len(r.body)-(r.modelEnd-r.modelStart)+len(q))
	out = append(out, r.body[:r.modelStart]...)
	out = append(out, q...)
	return append(out, r.body[r.modelEnd:]...)
}

// keyIs compares a raw JSON string token with name, unescaping only when
// the token contains an escape.
func keyIs(raw []byte, name string) bool {
	if bytes.IndexByte(raw, '\\') < 0 {
		return len(raw) == len(name)+2 && string(raw[1:len(raw)-1]) == name
	}
	var s string
	return json.Unmarshal(raw, &s) == nil && s == name
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

func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}
