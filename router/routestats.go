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
	if t.series == nil {
		a.s.routeStats.Record(a.res.pool.key, t.provider.name, t.label, at)
		return
	}
	// The pair's handle is kept on the target: no lookup per attempt.
	h := t.series.stats.Load()
	if h != nil && h.Add(at) {
		return
	}
	// The target's first attempt, or the ring forgot the pair (idle).
	if h = a.s.routeStats.Handle(a.res.pool.key, t.provider.name, t.label); h == nil {
		return // the ring is full and counted the attempt as dropped
	}
	t.series.stats.Store(h)
	h.Add(at)
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
	p, c := lastKeys(b)
	prompt, okP := numberAt(b, p)
	cached, okC := numberAt(b, c)
	return prompt, cached, okP && okC && prompt > 0 && cached <= prompt
}

// lastKeys returns where the last "prompt_tokens" and the last
// "cached_tokens" member names start in b (-1: none; a quoted name inside
// a JSON string has its quotes escaped, so it cannot match there). It is
// one backward pass that stops once it has both: the usage sits at the
// end of what the tail keeps. Both names have their only k ten bytes in,
// the rarest of their letters in a response, so the pass looks for k.
func lastKeys(b []byte) (prompt, cached int) {
	const promptKey, cachedKey, kAt = `"prompt_tokens"`, `"cached_tokens"`, 10
	prompt, cached = -1, -1
	for i := len(b); prompt < 0 || cached < 0; {
		if i = bytes.LastIndexByte(b[:i], 'k'); i < 0 {
			break
		}
		at := i - kAt
		if at < 0 || at+len(promptKey) > len(b) {
			continue
		}
		switch name := string(b[at : at+len(promptKey)]); {
		case prompt < 0 && name == promptKey:
			prompt = at
		case cached < 0 && name == cachedKey:
			cached = at
		}
	}
	return prompt, cached
}

// numberAt reads the unsigned integer value of the member whose quoted
// 15-byte name starts at at (-1: no such member).
func numberAt(b []byte, at int) (uint64, bool) {
	if at < 0 {
		return 0, false
	}
	b = b[at+len(`"prompt_tokens"`):]
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
