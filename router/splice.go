package router

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

	begun  bool // the status line and headers went to the client
	status int  // the status the client got
	ttft   bool // the first event went to the client

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

// chunkView is what the splice reads of one streamed chunk; its byte
// slices alias the chunk.
type chunkView struct {
	isErr  bool
	errMsg []byte
	text   []byte // choice 0's delta.content (chat) or text (completions)
	ids    []byte // choice 0's raw token_ids array; nil when absent
	finish bool   // some choice has a finish_reason
	// toolCall and reasoning: some choice's delta carries tool_calls or
	// reasoning text.
	toolCall, reasoning bool
	usage               bool // a usage object is present
	prompt, completion  int
}

// readChunk fills c from data, a valid JSON chunk, without decoding it
// into Go values (this runs for every token of a resumable stream).
func readChunk(data []byte, c *chunkView) {
	eachMember(data, func(key, val []byte) {
		switch string(unquoted(key)) {
		case "error":
			if !isNullRaw(val) {
				c.isErr = true
				switch val[0] {
				case '{':
					eachMember(val, func(k, v []byte) {
						if string(unquoted(k)) == "message" && v[0] == '"' {
							c.errMsg = unquoted(v)
						}
					})
				case '"':
					c.errMsg = unquoted(val)
				}
			}
		case "object":
			if string(val) == `"error"` {
				c.isErr = true
			}
		case "message": // vLLM's older error shape: {"object":"error","message":…}
			if c.errMsg == nil && val[0] == '"' {
				c.errMsg = unquoted(val)
			}
		case "choices":
			if val[0] == '[' {
				n := 0
				eachElem(val, func(ch []byte) {
					readChoice(ch, c, n == 0)
					n++
				})
			}
		case "usage":
			if val[0] == '{' {
				c.usage = true
				eachMember(val, func(k, v []byte) {
					switch string(unquoted(k)) {
					case "prompt_tokens":
						c.prompt, _ = atoi(v)
					case "completion_tokens":
						c.completion, _ = atoi(v)
					}
				})
			}
		}
	})
}

func readChoice(ch []byte, c *chunkView, first bool) {
	if len(ch) == 0 || ch[0] != '{' {
		return
	}
	eachMember(ch, func(k, v []byte) {
		switch string(unquoted(k)) {
		case "finish_reason":
			if !isNullRaw(v) {
				c.finish = true
			}
		case "text":
			if first && v[0] == '"' {
				c.text = unquoted(v)
			}
		case "token_ids":
			if first && v[0] == '[' {
				c.ids = v
			}
		case "delta":
			if v[0] != '{' {
				return
			}
			eachMember(v, func(dk, dv []byte) {
				switch string(unquoted(dk)) {
				case "content":
					if first && dv[0] == '"' {
						c.text = unquoted(dv)
					}
				case "tool_calls":
					if !isNullRaw(dv) && string(dv) != "[]" {
						c.toolCall = true
					}
				case "reasoning_content", "reasoning":
					if dv[0] == '"' && len(dv) > 2 {
						c.reasoning = true
					}
				}
			})
		}
	})
}

func isNullRaw(v []byte) bool { return string(v) == "null" }

// atoi reads a non-negative JSON integer.
func atoi(v []byte) (int, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// appendIDs appends the ids of the raw JSON array raw to ids; ok is false
// when an element is not a non-negative integer.
func appendIDs(ids []int64, raw []byte) (out []int64, ok bool) {
	ok = true
	eachElem(raw, func(e []byte) {
		n, good := atoi(e)
		ok = ok && good
		ids = append(ids, int64(n))
	})
	return ids, ok
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
//
// The first segment's head went out before (deliver's head, which also
// drops the splice of an answer that is not an event stream).
func (a *attempt) relaySpliced(resp *reply) (status int, ok bool, outcome string) {
	sp := a.sp
	sp.broke = ""
	if !a.spliceStart(resp, isEventStream(resp.get("Content-Type"))) {
		// The engine refused the continuation (say, a 400 for
		// continue_final_message): no fault of its health.
		sp.broke = "continuation refused (HTTP " + strconv.Itoa(resp.StatusCode) + ")"
		return sp.status, false, "http_" + strconv.Itoa(resp.StatusCode)
	}
	return a.relayEvents(resp)
}

// spliceStart notes a segment's start: for a continuation (sp.resumes >
// 0) that the engine answered with a stream; false: the engine refused
// the continuation.
func (a *attempt) spliceStart(resp *reply, sse bool) bool {
	sp, s := a.sp, a.s
	if sp.resumes > 0 {
		if !sse || resp.StatusCode != http.StatusOK {
			return false
		}
		s.metrics.resumes.WithLabelValues(a.res.pool.key, "resumed").Inc()
		a.obs.relaying = true // this attempt's relay stage and usage tap (trace.go)
		s.log.Info("stream resumed on another engine", "model", a.req.model, "from", sp.from, "to", sp.to,
			"tokens_carried", sp.tokens, "resume", sp.resumes)
	}
	sp.rewrite = sp.id != nil
	sp.base = sp.tokens
	return true
}

// relayEvents relays a segment's events, the loop relaySpliced waits in
// for as long as the stream is open (kept apart so its frame is small).
func (a *attempt) relayEvents(resp *reply) (status int, ok bool, outcome string) {
	sp, s := a.sp, a.s
	// The event reader and the event's buffer are held from the start of
	// an event to its flush: between events, with nothing buffered, the
	// stream waits for the engine holding neither (as relay does).
	var r eventReader
	defer r.hand()
	wait, _ := resp.Body.(readableWaiter)
	// [retry] resume_idle: an engine silent for that long is cut off
	// (closing the body ends the blocked read) and counts as broken.
	idle := a.sn.cfg.Retry.ResumeIdle.Duration
	var stalled atomic.Bool
	var idleTimer *time.Timer
	if idle > 0 {
		idleTimer = time.AfterFunc(idle, func() { stalled.Store(true); resp.Body.Close() })
		defer idleTimer.Stop()
	}
	first := true
	for {
		if wait != nil && r.br != nil && r.br.Buffered() == 0 {
			r.hand()
		}
		if r.br == nil {
			if wait != nil {
				wait.waitReadable()
			}
			r.take(resp.Body)
		}
		err := readEvent(r.br, &r.ev)
		if first && err == nil {
			first = false
			a.releasePrefill() // this segment's engine has prefilled its prompt
			a.firstByte = s.clock.Now()
		}
		if err != nil {
			if a.r.Context().Err() != nil {
				return statusClientClosed, false, "canceled"
			}
			return a.segmentBroke(err, stalled.Load(), idle)
		}
		if idleTimer != nil && !idleTimer.Reset(idle) {
			return a.segmentBroke(nil, true, idle)
		}
		out, done, brk := sp.event(r.ev)
		if brk != "" {
			sp.broke = brk
			s.log.Warn("upstream stream broke after the first byte", "model", a.req.model, "err", brk)
			return sp.status, false, "stream_error"
		}
		if out != nil {
			if !sp.ttft {
				sp.ttft = true
				now := s.clock.Now()
				s.metrics.requestTTFT(a.res.pool).Observe(ms(now.Sub(a.start)))
				a.firstToken(now)
			}
			if _, werr := a.w.Write(out); werr != nil {
				return statusClientClosed, false, "canceled"
			}
			a.tail.write(out) // the route stats read the usage from it
			a.relayed(out)
			if ferr := a.w.flush(); ferr != nil {
				return statusClientClosed, false, "canceled"
			}
			a.times.flush(s.stages, a.res.pool) // the stream's first event is out
		}
		if done {
			return sp.status, true, "success"
		}
	}
}

// segmentBroke ends a segment whose upstream read failed (err nil: the
// idle timer fired between events) or went silent for idle.
func (a *attempt) segmentBroke(err error, stalled bool, idle time.Duration) (status int, ok bool, outcome string) {
	sp := a.sp
	switch {
	case stalled:
		err = fmt.Errorf("no data from the engine for %v", idle)
	case err == io.EOF:
		err = errors.New("stream ended without [DONE]")
	}
	sp.broke = err.Error()
	a.s.log.Warn("upstream stream broke after the first byte", "model", a.req.model, "err", err)
	return sp.status, false, "stream_error"
}

// eventReader is relayEvents' reader and event buffer while it holds them.
type eventReader struct {
	br  *bufio.Reader
	evp *[]byte
	ev  []byte
}

// take gets a reader over body and an event buffer from their pools.
func (r *eventReader) take(body io.Reader) {
	r.br = eventReaders.Get().(*bufio.Reader)
	r.br.Reset(body)
	r.evp = eventBufs.Get().(*[]byte)
	r.ev = (*r.evp)[:0]
}

// hand gives them back (nothing may be buffered that is still wanted).
func (r *eventReader) hand() {
	if r.br != nil {
		r.br.Reset(nil)
		eventReaders.Put(r.br)
		eventBufs.Put(r.evp)
		*r = eventReader{}
	}
}

// eventReaders recycles the readers relaySpliced frames events with.
var eventReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 16<<10) }}

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
	if v, ok := bytes.CutPrefix(ev, []byte("data:")); ok {
		// The usual event: one data line.
		if i := bytes.IndexByte(v, '\n'); i >= 0 && len(bytes.TrimSpace(v[i:])) == 0 {
			v, _ = bytes.CutPrefix(bytes.TrimRight(v[:i], "\r"), []byte(" "))
			return v
		}
	}
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
	if !validJSON(data) {
		return nil, false, "engine sent an event that is not JSON"
	}
	var c chunkView
	readChunk(data, &c)
	if c.isErr {
		return nil, false, "engine error event: " + string(c.errMsg)
	}
	if sp.id == nil {
		sp.id, sp.created, sp.model = topValue(data, "id"), topValue(data, "created"), topValue(data, "model")
		if sp.id == nil {
			sp.id = []byte(`""`)
		}
	}
	sp.finished = sp.finished || c.finish
	sp.toolCall = sp.toolCall || c.toolCall
	sp.reasoning = sp.reasoning || c.reasoning
	useful := c.usage || c.finish || c.toolCall || c.reasoning
	if len(c.text) > 0 {
		useful = true
		sp.text.Write(c.text)
		sp.tokens++
		ok := c.ids != nil
		if ok {
			sp.ids, ok = appendIDs(sp.ids, c.ids)
		}
		sp.idsOK = sp.idsOK && ok
	}
	if c.usage {
		// Engines that report usage as they go (vLLM's
		// continuous_usage_stats) give the exact counts.
		sp.tokens = sp.base + c.completion
		if !sp.rewrite && sp.prompt < 0 {
			sp.prompt = c.prompt
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
	return editObject(dst, raw, func(dst, key, val []byte) ([]byte, bool) {
		switch string(key) {
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
					return editObject(dst, choice, func(dst, key, val []byte) ([]byte, bool) {
						if string(key) == "delta" && len(val) > 0 && val[0] == '{' {
							return editObject(dst, val, func(dst, key, val []byte) ([]byte, bool) {
								if string(key) == "role" {
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
	return editObject(dst, raw, func(dst, key, val []byte) ([]byte, bool) {
		switch string(key) {
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
func editObject(dst, raw []byte, edit func(dst, key, val []byte) ([]byte, bool)) []byte {
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
		dst, keep = edit(dst, unquoted(key), val)
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
	n := 0
	eachElem(raw, func(e []byte) {
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = edit(dst, e)
		n++
	})
	return append(dst, ']')
}

// eachElem calls fn with every element of the JSON array at the start of
// raw (valid JSON).
func eachElem(raw []byte, fn func(elem []byte)) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '[' {
		return
	}
	i = skipSpace(raw, i+1)
	for i < len(raw) && raw[i] != ']' {
		if raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
		s := i
		i = skipValue(raw, i)
		fn(raw[s:i])
		i = skipSpace(raw, i)
	}
}
