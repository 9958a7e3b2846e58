package router

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"sync"
	"unsafe"
)

// The request log: one structured "request" line per client request, with
// what an operator asks about a request afterwards (who served it, how
// long it took, what it cost in tokens) and nothing a client sent as
// content: no prompt, no completion, no key secret.

// requestIDLen is the length of a generated x-request-id: the router's
// random 12-hex prefix and a 16-hex sequence number.
const requestIDLen = 28

// requestID returns the client's x-request-id when it is a sane token
// (1–128 visible ASCII bytes), or writes a new one into buf. The generated
// id aliases buf, which lives in the request's attempt and is never
// written again, so producing it allocates nothing.
func (s *Server) requestID(hdr string, buf *[requestIDLen]byte) string {
	if validRequestID(hdr) {
		return hdr
	}
	copy(buf[:], s.idPrefix[:])
	var seq [8]byte
	n := s.idSeq.Add(1)
	for i := range seq {
		seq[7-i] = byte(n >> (8 * i))
	}
	hex.Encode(buf[len(s.idPrefix):], seq[:])
	return unsafe.String(&buf[0], len(buf))
}

func validRequestID(v string) bool {
	if len(v) == 0 || len(v) > 128 {
		return false
	}
	for i := range len(v) {
		if v[i] <= ' ' || v[i] > '~' {
			return false
		}
	}
	return true
}

// tapSize is how much of a response's end the usage tap keeps: the usage
// object and the last finish reasons sit in the final events.
const tapSize = 8 << 10

// usageTap keeps the last tapSize bytes relayed to the client, to read
// the upstream's usage and finish reasons from when the response ends.
type usageTap struct {
	ring [tapSize]byte
	n    int64 // bytes written in all
	// usage is what was read from the ring at the end of the last relay:
	// kept here, not in the request's attempt, which every request has
	// and every open stream holds.
	usage usage
}

var taps = sync.Pool{New: func() any { return new(usageTap) }}

func (t *usageTap) write(p []byte) {
	if len(p) > tapSize {
		t.n += int64(len(p) - tapSize)
		p = p[len(p)-tapSize:]
	}
	for len(p) > 0 {
		c := copy(t.ring[t.n%tapSize:], p)
		p = p[c:]
		t.n += int64(c)
	}
}

// tail returns the kept bytes in order.
func (t *usageTap) tail() []byte {
	if t.n <= tapSize {
		return t.ring[:t.n]
	}
	i := t.n % tapSize
	return append(append(make([]byte, 0, tapSize), t.ring[i:]...), t.ring[:i]...)
}

// usage is what the upstream reported about a response's tokens.
type usage struct {
	reported           bool // a usage object was found
	prompt, completion int
	cached             int
	cachedReported     bool
	finish             []string
}

// parseUsage reads the last usage object and the finish reasons from the
// end of a JSON body or an SSE stream (usage arrives in the final event
// when the client asked for stream_options.include_usage).
func parseUsage(tail []byte) usage {
	var u usage
	for rest := tail; ; {
		i := bytes.LastIndex(rest, []byte(`"usage"`))
		if i < 0 {
			break
		}
		if obj := objectAfter(rest[i+len(`"usage"`):]); obj != nil {
			var v struct {
				PromptTokens        int `json:"prompt_tokens"`
				CompletionTokens    int `json:"completion_tokens"`
				PromptTokensDetails *struct {
					CachedTokens *int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			}
			if json.Unmarshal(obj, &v) == nil {
				u.reported, u.prompt, u.completion = true, v.PromptTokens, v.CompletionTokens
				if d := v.PromptTokensDetails; d != nil && d.CachedTokens != nil {
					u.cached, u.cachedReported = *d.CachedTokens, true
				}
				break
			}
		}
		rest = rest[:i]
	}
	for rest := tail; ; {
		i := bytes.Index(rest, []byte(`"finish_reason"`))
		if i < 0 {
			break
		}
		rest = bytes.TrimLeft(rest[i+len(`"finish_reason"`):], " \t")
		if len(rest) == 0 || rest[0] != ':' {
			continue
		}
		rest = bytes.TrimLeft(rest[1:], " \t")
		if len(rest) == 0 || rest[0] != '"' {
			continue // null: not finished in this event
		}
		end := bytes.IndexByte(rest[1:], '"')
		if end < 0 {
			break
		}
		reason := string(rest[1 : 1+end])
		if !containsString(u.finish, reason) {
			u.finish = append(u.finish, reason)
		}
		rest = rest[1+end:]
	}
	return u
}

// objectAfter returns the JSON object following `: ` in b, or nil when
// the value is not an object (null) or is cut off.
func objectAfter(b []byte) []byte {
	b = bytes.TrimLeft(b, " \t")
	if len(b) == 0 || b[0] != ':' {
		return nil
	}
	b = bytes.TrimLeft(b[1:], " \t")
	if len(b) == 0 || b[0] != '{' {
		return nil
	}
	depth, inStr, esc := 0, false, false
	for i, c := range b {
		switch {
		case esc:
			esc = false
		case inStr:
			esc = c == '\\'
			inStr = c != '"'
		case c == '"':
			inStr = true
		case c == '{':
			depth++
		case c == '}':
			depth--
			if depth == 0 {
				return b[:i+1]
			}
		}
	}
	return nil
}

func containsString(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// wantsLog reports whether this request's line is written whatever its
// status (sampled in), deciding once at the start so the usage tap runs
// only for requests that will report it.
func (s *Server) wantsLog(ctx context.Context, ratio float64) bool {
	if ratio <= 0 || !s.log.Enabled(ctx, slog.LevelInfo) {
		return false
	}
	return ratio >= 1 || s.rand.Float64() < ratio
}

// logRequest writes the request's line.
func (a *attempt) logRequest(code int, latencyMs float64) {
	o := &a.obs
	attrs := make([]slog.Attr, 0, 24)
	attrs = append(attrs,
		slog.String("request_id", o.id),
		slog.String("key", a.keyName()),
		slog.String("model", a.req.model),
		slog.String("route", a.label),
		slog.String("target", o.target),
		slog.Int("attempts", o.attempts),
		slog.Int("status", code),
		slog.Bool("stream", a.req.stream),
		slog.Float64("latency_ms", latencyMs),
	)
	if !o.firstAt.IsZero() {
		attrs = append(attrs, slog.Float64("ttft_ms", ms(o.firstAt.Sub(a.start))))
	}
	if u := o.usage; u != nil && u.reported {
		attrs = append(attrs, slog.Int("prompt_tokens", u.prompt), slog.Int("completion_tokens", u.completion))
		if u.cachedReported {
			attrs = append(attrs, slog.Int("cached_tokens", u.cached))
		}
	}
	if o.usage != nil && len(o.usage.finish) > 0 {
		attrs = append(attrs, slog.Any("finish_reasons", o.usage.finish))
	}
	attrs = append(attrs, slog.Int64("bytes_in", o.bytesIn), slog.Int64("bytes_out", o.bytesOut))
	if o.span != nil && o.span.SpanContext().IsValid() {
		attrs = append(attrs, slog.String("trace_id", o.span.SpanContext().TraceID().String()))
	}
	a.s.log.LogAttrs(a.r.Context(), slog.LevelInfo, "request", attrs...)
}
