package router

import (
	"bytes"
	"time"

	"github.com/rolter/rolter/routestats"
)

// RouteStats returns this router's per-route, per-target figures over the
// last hour (routestats.Ring.Report), for the admin API's telemetry push.
func (s *Server) RouteStats() []routestats.Route { return s.routeStats.Report() }

// recordStats adds the attempt that just ended on t to the route stats
// ring: the one hook the request path has into it.
func (a *attempt) recordStats(t *target, success bool, begin, now time.Time) {
	a.attempts++
	// Only the attempt that answers the client relays, so a first byte
	// and a usage tail are always this attempt's.
	at := routestats.Attempt{Retry: a.attempts > 1, OK: success,
		Latency: now.Sub(begin), TTFT: a.firstByte.Sub(begin), FirstByte: !a.firstByte.IsZero(), At: now}
	if prompt, cached, ok := a.tail.tokens(); ok {
		at.PromptTokens, at.CachedTokens = prompt, cached
	}
	a.s.routeStats.Record(a.res.pool.key, t.provider.name, t.label, at)
}

// usageTail keeps the last bytes of a response relayed to the client:
// where an OpenAI-compatible response carries its usage (the last member
// of a completion, the last event of a stream with include_usage). It
// lives in the attempt, so keeping it allocates nothing.
type usageTail struct {
	buf [512]byte
	n   int
}

// write appends p, keeping only the last len(buf) bytes.
func (u *usageTail) write(p []byte) {
	if len(p) >= len(u.buf) {
		u.n = copy(u.buf[:], p[len(p)-len(u.buf):])
		return
	}
	keep := min(u.n, len(u.buf)-len(p))
	copy(u.buf[:keep], u.buf[u.n-keep:u.n])
	u.n = keep + copy(u.buf[keep:], p)
}

// tokens returns the prompt tokens and the cached prompt tokens the
// engine reported (usage.prompt_tokens_details.cached_tokens); ok is false
// unless it reported both.
func (u *usageTail) tokens() (prompt, cached uint64, ok bool) {
	b := u.buf[:u.n]
	prompt, okP := lastNumber(b, `"prompt_tokens"`)
	cached, okC := lastNumber(b, `"cached_tokens"`)
	return prompt, cached, okP && okC && prompt > 0 && cached <= prompt
}

// lastNumber reads the unsigned integer after the last occurrence of key
// (a quoted JSON member name; inside a JSON string its quotes would be
// escaped, so it cannot match there).
func lastNumber(b []byte, key string) (uint64, bool) {
	i := bytes.LastIndex(b, []byte(key))
	if i < 0 {
		return 0, false
	}
	b = b[i+len(key):]
	for len(b) > 0 && (b[0] == ' ' || b[0] == ':' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	var v uint64
	n := 0
	for ; n < len(b) && n < 12 && b[n] >= '0' && b[n] <= '9'; n++ {
		v = v*10 + uint64(b[n]-'0')
	}
	return v, n > 0 && (n == len(b) || b[n] < '0' || b[n] > '9')
}
