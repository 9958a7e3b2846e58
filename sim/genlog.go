package sim

import (
	"encoding/json"
	"io"
	"sync"

	"github.com/rolter/rolter/sim/tokenizer"
)

// Generation is one line of the generation log: what the engine sent for
// one request and how the generation ended. Tests that resume streams on
// another engine join a client's text to these lines by RequestID.
type Generation struct {
	// RequestID is the request's X-Request-Id header ("" when none).
	RequestID string `json:"request_id"`
	ID        string `json:"id"`
	// Continued: the request asked to continue its final message,
	// whose text ContinuedText is.
	Continued     bool   `json:"continued"`
	ContinuedText string `json:"continued_text,omitempty"`
	PromptTokens  int    `json:"prompt_tokens"`
	// Text is what went to the client: Tokens one-token words.
	Text   string `json:"text"`
	Tokens int    `json:"tokens"`
	// Outcome is "done", "died" (injected fault) or "client_left".
	Outcome string `json:"outcome"`
	// Engine is the engine's own account of a "done" generation, on its
	// clock (virtual time: --speed times the wall clock).
	Engine *EngineTimes `json:"engine,omitempty"`
}

// EngineTimes are one finished request's times on the engine's clock, in
// nanoseconds since the engine started, and its prefix-cache hit.
type EngineTimes struct {
	Arrival      int64 `json:"arrival_ns"`
	FirstToken   int64 `json:"first_token_ns"`
	Finish       int64 `json:"finish_ns"`
	CachedTokens int   `json:"cached_tokens"`
	// Submitted is the wall clock (Unix nanoseconds) when the request
	// reached the engine: with a client's send time it tells how long the
	// HTTP path in between took.
	Submitted int64 `json:"submitted_unix_ns"`
}

// genLog writes Generation lines to w; the zero value writes nothing.
type genLog struct {
	mu sync.Mutex
	w  io.Writer
}

// LogGenerations makes the server write one Generation line per request
// to w (nil: none). Call it before serving.
func (s *Server) LogGenerations(w io.Writer) {
	s.gen.mu.Lock()
	s.gen.w = w
	s.gen.mu.Unlock()
}

// logGeneration records that g sent its first sent tokens and ended so.
func (s *Server) logGeneration(g *generation, sent int, outcome string) {
	s.gen.mu.Lock()
	defer s.gen.mu.Unlock()
	if s.gen.w == nil {
		return
	}
	line := Generation{RequestID: g.requestID, ID: g.id, Continued: g.continued, ContinuedText: g.continuedText, PromptTokens: g.prompt,
		Text: tokenizer.Text(g.seed, sent), Tokens: sent, Outcome: outcome}
	if _, done, c := g.p.snapshot(); done && outcome == "done" {
		line.Engine = &EngineTimes{Arrival: int64(c.Arrival), FirstToken: int64(c.FirstToken), Finish: int64(c.Finish),
			CachedTokens: c.CachedTokens, Submitted: g.p.submitted.UnixNano()}
	}
	b, _ := json.Marshal(line)
	if _, err := s.gen.w.Write(append(b, '\n')); err != nil {
		s.log.Warn("generation log write failed", "err", err)
	}
}
