package router

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// splice is the state of one streaming request on a route that resumes
// broken streams (resume.go): what the client has been sent so far, so a
// continuation from another engine can be joined onto it as one stream.
//
// A splice belongs to its attempt's goroutine; nothing in it is shared.
type splice struct {
	chat bool
	orig []byte // the client's body, before any continuation

	begun bool // the status line and headers went to the client
	ttft  bool // the first event went to the client

	// id, created and model are the raw JSON values of the first chunk
	// the client got; nil until then. Every later segment's chunks carry
	// them instead of their own.
	id, created, model []byte

	text   strings.Builder // choice 0's text relayed so far
	ids    []int64         // generated token ids relayed so far
	idsOK  bool            // every text chunk so far carried its token ids
	tokens int             // completion tokens relayed so far, all segments
	prompt int             // the original prompt's tokens when an engine said (-1: not known)

	// rewrite is set while relaying a continuation: its chunks are
	// rewritten to continue the first segment's stream.
	rewrite bool
	base    int // tokens carried into the current segment

	toolCall  bool // a tool call delta was relayed
	reasoning bool // a reasoning delta was relayed
	finished  bool // a finish_reason was relayed

	resumes  int    // continuations started
	from, to string // providers of the last resume, for its log line
	// broke says why the segment just relayed ended before [DONE] ("":
	// it did not, or the client left); try hands such a stream to resume.
	broke string
}

func newSplice(chat bool, body []byte) *splice {
	return &splice{chat: chat, orig: body, idsOK: true, prompt: -1}
}

// chunk is the part of a streamed chunk the splice reads.
type chunk struct {
	Object  string          `json:"object"`
	Error   json.RawMessage `json:"error"`
	Message string          `json:"message"`
	Choices []struct {
		Text  *string `json:"text"`
		Delta *struct {
			Content          *string         `json:"content"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
			ReasoningContent *string         `json:"reasoning_content"`
			Reasoning        *string         `json:"reasoning"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
		TokenIDs     []int64 `json:"token_ids"`
	} `json:"choices"`
	Usage *usageCounts `json:"usage"`
}

type usageCounts struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// relaySpliced is relay for a request with a splice: the upstream event
// stream is read event by event, so a break never leaves half an event
// with the client, and a continuation's events are rewritten to extend
// the stream the client already holds. On a break it sets sp.broke and
// writes nothing final: try hands the stream to resume (resume.go), which
// continues or ends it.
func (a *attempt) relaySpliced(resp *http.Response, begin time.Time) (status int, ok bool, outcome string) {
	sp := a.sp
	s := a.s
	sp.broke = ""
	sse := isEventStream(resp.Header.Get("Content-Type"))
	if !sp.begun && !sse {
		a.sp = nil // not a stream after all: relay it as it is
		return a.relay(resp, begin)
	}
	rc := a.ctl
	if rc == nil {
		rc = http.NewResponseController(a.w)
	}
	if !sp.begun {
		h := a.w.Header()
		copyHeader(h, resp.Header)
		h.Del("Content-Length")
		h.Set("Cache-Control", "no-cache")
		a.w.WriteHeader(resp.StatusCode)
		_ = rc.Flush()
		sp.begun = true
	} else {
		if !sse || resp.StatusCode != http.StatusOK {
			// The engine refused the continuation (say, a 400 for
			// continue_final_message): no fault of its health.
			sp.broke = "continuation refused (HTTP " + strconv.Itoa(resp.StatusCode) + ")"
			return http.StatusOK, false, "http_" + strconv.Itoa(resp.StatusCode)
		}
		s.metrics.resumes.WithLabelValues(a.res.pool.key, "resumed").Inc()
		s.log.Info("stream resumed on another engine", "model", a.req.model, "from", sp.from, "to", sp.to,
			"tokens_carried", sp.tokens, "resume", sp.resumes)
	}
	sp.rewrite = sp.id != nil
	sp.base = sp.tokens

	br := bufio.NewReaderSize(resp.Body, 16<<10)
	var ev []byte
	for {
		err := readEvent(br, &ev)
		if err != nil {
			if a.r.Context().Err() != nil {
				return statusClientClosed, false, "canceled"
			}
			if err == io.EOF {
				err = errors.New("stream ended without [DONE]")
			}
			sp.broke = err.Error()
			s.log.Warn("upstream stream broke after the first byte", "model", a.req.model, "err", err)
			return http.StatusOK, false, "stream_error"
		}
		out, done, brk := sp.event(ev)
		if brk != "" {
			sp.broke = brk
			s.log.Warn("upstream stream broke after the first byte", "model", a.req.model, "err", brk)
			return http.StatusOK, false, "stream_error"
		}
		if out != nil {
			if !sp.ttft {
				sp.ttft = true
				s.metrics.requestTTFT(a.res.pool).Observe(ms(s.clock.Now().Sub(a.start)))
			}
			if _, werr := a.w.Write(out); werr != nil {
				return statusClientClosed, false, "canceled"
			}
			if ferr := rc.Flush(); ferr != nil {
				return statusClientClosed, false, "canceled"
			}
		}
		if done {
			return http.StatusOK, true, "success"
		}
	}
}

// readEvent reads one SSE event (its lines up to and including the blank
// line that ends it) into *ev. A stream that ends between events returns
// io.EOF; one cut in the middle of a line, io.ErrUnexpectedEOF.
func readEvent(br *bufio.Reader, ev *[]byte) error {
	*ev = (*ev)[:0]
	midLine := false
	for {
		line, err := br.ReadSlice('\n')
		*ev = append(*ev, line...)
		if err == bufio.ErrBufferFull {
			midLine = true
			continue
		}
		empty := len(bytes.TrimSpace(*ev)) == 0
		if err == io.EOF {
			switch {
			case empty:
				return io.EOF
			case bytes.HasSuffix(*ev, []byte("\n")):
				return nil // the last event, without its blank line
			}
			return io.ErrUnexpectedEOF
		}
		if err != nil {
			return err
		}
		blank := !midLine && len(bytes.TrimRight(line, "\r\n")) == 0
		midLine = false
		if blank {
			if empty {
				*ev = (*ev)[:0] // a stray blank line between events
				continue
			}
			return nil
		}
	}
}

// eventData returns the data field of an SSE event: its data lines joined
// by "\n" (nil when it has none).
func eventData(ev []byte) []byte {
	var data []byte
	n := 0
	for len(ev) > 0 {
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		line = bytes.TrimRight(line, "\r")
		v, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		v, _ = bytes.CutPrefix(v, []byte(" "))
		if n > 0 {
			data = append(data, '\n')
		}
		data = append(data, v...)
		n++
	}
	return data
}

// event reads one upstream event and returns what to send the client (nil:
// nothing), whether the stream is complete, and why it broke ("" when it
// did not: an engine's error event is a break, never relayed).
func (sp *splice) event(ev []byte) (out []byte, done bool, broke string) {
	data := eventData(ev)
	if data == nil {
		if sp.rewrite {
			return nil, false, "" // comments and keep-alives of a continuation
		}
		return ev, false, ""
	}
	if string(bytes.TrimSpace(data)) == "[DONE]" {
		if sp.rewrite {
			return []byte("data: [DONE]\n\n"), true, ""
		}
		return ev, true, ""
	}
	var c chunk
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, false, "engine sent an event that is not JSON"
	}
	if (len(c.Error) > 0 && string(c.Error) != "null") || c.Object == "error" {
		msg := c.Message
		var e apiErrorBody
		if json.Unmarshal(c.Error, &e) == nil && e.Message != "" {
			msg = e.Message
		}
		return nil, false, "engine error event: " + msg
	}
	first := sp.id == nil
	if first {
		sp.id, sp.created, sp.model = topValue(data, "id"), topValue(data, "created"), topValue(data, "model")
		if sp.id == nil {
			sp.id = []byte(`""`)
		}
	}
	useful := c.Usage != nil
	for i, ch := range c.Choices {
		if ch.FinishReason != nil {
			sp.finished = true
			useful = true
		}
		var text string
		if ch.Delta != nil {
			if ch.Delta.Content != nil {
				text = *ch.Delta.Content
			}
			if len(ch.Delta.ToolCalls) > 0 && string(ch.Delta.ToolCalls) != "null" {
				sp.toolCall, useful = true, true
			}
			if ch.Delta.ReasoningContent != nil && *ch.Delta.ReasoningContent != "" ||
				ch.Delta.Reasoning != nil && *ch.Delta.Reasoning != "" {
				sp.reasoning, useful = true, true
			}
		} else if ch.Text != nil {
			text = *ch.Text
		}
		if i != 0 || text == "" {
			continue
		}
		useful = true
		sp.text.WriteString(text)
		sp.tokens++
		if len(ch.TokenIDs) > 0 {
			sp.ids = append(sp.ids, ch.TokenIDs...)
		} else {
			sp.idsOK = false
		}
	}
	if c.Usage != nil {
		// Engines that report usage as they go (vLLM's
		// continuous_usage_stats) give the exact counts.
		sp.tokens = sp.base + c.Usage.CompletionTokens
		if !sp.rewrite && sp.prompt < 0 {
			sp.prompt = c.Usage.PromptTokens
		}
	}
	if !sp.rewrite {
		return ev, false, ""
	}
	if !useful {
		return nil, false, "" // the continuation's role preamble
	}
	b := make([]byte, 0, len(data)+len(sp.id)+32)
	b = append(b, "data: "...)
	b = sp.rewriteChunk(b, data)
	return append(b, '\n', '\n'), false, ""
}

// rewriteChunk appends a continuation's chunk rewritten to belong to the
// client's stream: the first chunk's id, created and model; no role in any
// delta; usage counting the whole answer against the original prompt.
func (sp *splice) rewriteChunk(dst, raw []byte) []byte {
	return editObject(dst, raw, func(dst []byte, key string, val []byte) ([]byte, bool) {
		switch key {
		case "id":
			return append(dst, sp.id...), true
		case "created":
			if sp.created != nil {
				return append(dst, sp.created...), true
			}
		case "model":
			if sp.model != nil {
				return append(dst, sp.model...), true
			}
		case "usage":
			if len(val) > 0 && val[0] == '{' {
				return sp.usage(dst, val), true
			}
		case "choices":
			if len(val) > 0 && val[0] == '[' {
				return editArray(dst, val, func(dst, choice []byte) []byte {
					return editObject(dst, choice, func(dst []byte, key string, val []byte) ([]byte, bool) {
						if key == "delta" && len(val) > 0 && val[0] == '{' {
							return editObject(dst, val, func(dst []byte, key string, val []byte) ([]byte, bool) {
								if key == "role" {
									return dst, false
								}
								return append(dst, val...), true
							}), true
						}
						return append(dst, val...), true
					})
				}), true
			}
		}
		return append(dst, val...), true
	})
}

// usage appends a continuation's usage object with the whole answer's
// counts: prompt tokens of the original request (the continuation's prompt
// carried the tokens relayed before it), completion tokens summed over the
// segments.
func (sp *splice) usage(dst, raw []byte) []byte {
	var u usageCounts
	if json.Unmarshal(raw, &u) != nil {
		return append(dst, raw...)
	}
	prompt := sp.prompt
	if prompt < 0 {
		prompt = max(u.PromptTokens-sp.base, 0)
	}
	completion := sp.base + u.CompletionTokens
	return editObject(dst, raw, func(dst []byte, key string, val []byte) ([]byte, bool) {
		switch key {
		case "prompt_tokens":
			return strconv.AppendInt(dst, int64(prompt), 10), true
		case "completion_tokens":
			return strconv.AppendInt(dst, int64(completion), 10), true
		case "total_tokens":
			return strconv.AppendInt(dst, int64(prompt+completion), 10), true
		}
		return append(dst, val...), true
	})
}

// topValue returns the raw value of a top-level member of the JSON object
// raw (valid JSON), nil when absent.
func topValue(raw []byte, name string) []byte {
	var out []byte
	eachMember(raw, func(key, val []byte) {
		if keyIs(key, name) {
			out = append([]byte(nil), val...)
		}
	})
	return out
}

// eachMember calls fn with the raw key token and value of every member of
// the JSON object at the start of raw (valid JSON).
func eachMember(raw []byte, fn func(key, val []byte)) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return
	}
	i++
	for {
		i = skipSpace(raw, i)
		if i >= len(raw) || raw[i] == '}' {
			return
		}
		if raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
		ks := i
		i = skipValue(raw, i)
		key := raw[ks:i]
		i = skipSpace(raw, i)
		i = skipSpace(raw, i+1) // ':'
		vs := i
		i = skipValue(raw, i)
		fn(key, raw[vs:i])
	}
}

// editObject appends the JSON object raw to dst with each member's value
// written by edit (which appends it, or returns false to drop the member).
func editObject(dst, raw []byte, edit func(dst []byte, key string, val []byte) ([]byte, bool)) []byte {
	dst = append(dst, '{')
	n := 0
	eachMember(raw, func(key, val []byte) {
		mark := len(dst)
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, key...)
		dst = append(dst, ':')
		var keep bool
		dst, keep = edit(dst, string(unquoted(key)), val)
		if !keep {
			dst = dst[:mark]
			return
		}
		n++
	})
	return append(dst, '}')
}

// editArray appends the JSON array raw to dst with each element written by
// edit.
func editArray(dst, raw []byte, edit func(dst, elem []byte) []byte) []byte {
	dst = append(dst, '[')
	i := skipSpace(raw, 1)
	for n := 0; i < len(raw) && raw[i] != ']'; n++ {
		if raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
		s := i
		i = skipValue(raw, i)
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = edit(dst, raw[s:i])
		i = skipSpace(raw, i)
	}
	return append(dst, ']')
}
