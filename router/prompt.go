package router

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/rolter/rolter/kvblock"
	"github.com/rolter/rolter/strategies"
)

// Header names users know (compat.md), and their canonical forms, which
// index an http.Header directly (Header.Get would canonicalise, and
// allocate, on every request).
const (
	headerSession  = "x-session-id"
	headerTokenIDs = "x-rolter-vllm-token-ids"

	canonSession  = "X-Session-Id"
	canonTokenIDs = "X-Rolter-Vllm-Token-Ids"
)

// firstValue is hdr.Get(key) for a canonical key.
func firstValue(hdr http.Header, key string) string {
	if v := hdr[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// bytesPerToken turns a prompt's text length into its estimated token
// count when the caller sent no token ids (RouteContext.PromptTokens, and
// so the prefill work an attempt queues). Calibration: BPE tokenizers of
// the served model families (Llama 3, GPT-4's cl100k/o200k) average close
// to 4 bytes of English text per token; the simulator's stand-in tokenizer
// (sim/tokenizer) gives 5.9 bytes of message text per prompt token on the
// synthetic chat, rag and lora workloads and on the rendered Mooncake
// trace, so against `rolter sim` the estimate runs about 1.45× high. The
// error is a common factor: every text-only request is scaled alike, and
// strategies compare targets' sums, not absolute token counts.
const bytesPerToken = 4

// blockSize is the KV block size the router keys prompts with; it matches
// vLLM's default and the sidecar's.
const blockSize = kvblock.DefaultBlockSize

// maxTokenIDs bounds the ids accepted from a header or a prompt so a caller
// cannot make the router key an unbounded sequence.
const maxTokenIDs = 1 << 20

// conversation is the subset of a chat, completions or embeddings body the
// router reads to route. Unknown fields are ignored.
type conversation struct {
	Messages []chatMessage   `json:"messages"`
	Prompt   json.RawMessage `json:"prompt"`
	Input    json.RawMessage `json:"input"`
}

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []toolCall      `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

type toolCall struct {
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type contentPart struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	ImageURL json.RawMessage `json:"image_url"`
}

// digest is FNV-1a 64 over tagged, length-prefixed fields: stable across
// processes, platforms and releases, and ("ab","c") never collides with
// ("a","bc"). A field of longField bytes or more enters it as the 64-bit
// sum of its bytes (contentSum) rather than byte by byte: a long prompt's
// text is most of its request, and byte-wise FNV over it (one dependent
// multiply per byte) was the router's largest cost on a long chat. A
// digest made off (for a strategy that does not read it, see
// strategies.ReadsPromptDigest) takes no field in and its sum is 0.
type digest struct {
	h   uint64
	off bool
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// longField is the field length from which the digest takes a field's
// contentSum instead of its bytes: below it the two CRC calls cost more
// instructions than FNV's three per byte (callgrind, 52-byte message).
const longField = 512

func newDigest() digest { return digest{h: fnvOffset} }

// sum is the digest's value: 0 when it is off.
func (d *digest) sum() uint64 {
	if d.off {
		return 0
	}
	return d.h
}

func (d *digest) byte1(c byte) { d.h = (d.h ^ uint64(c)) * fnvPrime }

// word adds v's eight bytes, lowest first.
func (d *digest) word(v uint64) {
	for range 8 {
		d.byte1(byte(v))
		v >>= 8
	}
}

func (d *digest) field(tag byte, s string) { d.bytes(tag, stringBytes(s)) }

func (d *digest) bytes(tag byte, b []byte) {
	if d.off {
		return
	}
	n := len(b)
	if n >= longField {
		d.byte1(tag)
		d.byte1(byte(n))
		d.byte1(byte(n >> 8))
		d.byte1(byte(n >> 16))
		d.byte1(byte(n >> 24))
		d.word(contentSum(b))
		return
	}
	d.byte1(tag)
	d.byte1(byte(n))
	d.byte1(byte(n >> 8))
	d.byte1(byte(n >> 16))
	d.byte1(byte(n >> 24))
	for _, c := range b {
		d.byte1(c)
	}
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// contentSum is the CRC-32C of b in the high half and its CRC-32 (IEEE) in
// the low half. Both are defined bit for bit and run in hardware where the
// CPU has it (SSE 4.2 and PCLMULQDQ on amd64, CRC32 on arm64): a
// megabyte costs tens of microseconds. Two different texts share a sum
// only by chance (or by construction: CRCs are not cryptographic), and the
// digest only spreads conversations over targets, so a collision costs
// nothing worse than a shared target.
func contentSum(b []byte) uint64 {
	return uint64(crc32.Checksum(b, castagnoli))<<32 | uint64(crc32.ChecksumIEEE(b))
}

// stringBytes is a read-only view of s's bytes, not a copy: nothing may
// write through it.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// extractor accumulates the conversation: its text bounded to
// MaxPromptBytes, the whole text's length, and the digest of text plus the
// identity of images, tool calls and tool results.
type extractor struct {
	prompt []byte
	n      int
	d      digest
}

func (x *extractor) text(s string) { textOf(x, stringBytes(s)) }

// textOf adds one piece of conversation text.
func textOf(x *extractor, s []byte) {
	if len(s) == 0 {
		return
	}
	if x.n > 0 {
		x.prompt = appendBounded(x.prompt, "\n")
		x.n++
	}
	x.prompt = appendBounded(x.prompt, s)
	x.n += len(s)
	x.d.bytes('T', s)
}

// appendBounded appends s (valid UTF-8) to prompt up to
// strategies.MaxPromptBytes, never ending inside a rune.
func appendBounded[T string | []byte](prompt []byte, s T) []byte {
	room := strategies.MaxPromptBytes - len(prompt)
	if room <= 0 {
		return prompt
	}
	if len(s) > room {
		for room > 0 && !utf8.RuneStart(s[room]) {
			room--
		}
		s = s[:room]
	}
	return append(prompt, s...)
}

// promptInfo is the routing input extracted from one request.
type promptInfo struct {
	prompt   string
	n        int
	digest   uint64
	tokenIDs []uint32
}

// extractPrompt reads body as chat, completions or embeddings. When the
// body has none of messages/prompt/input in a readable shape, the digest is
// the raw body's and the prompt is empty.
func extractPrompt(body []byte) promptInfo {
	return extractValidated(body, utf8.Valid(body) && validJSON(body))
}

// extractions recycles the extractor, scanner and buffers of one
// extraction across requests.
var extractions = sync.Pool{New: func() any {
	e := &extraction{}
	e.s.x = &e.x
	return e
}}

type extraction struct {
	x extractor
	s scanner
}

// extractValidated is extractPrompt for a body already known to be valid
// (or not) UTF-8 JSON: valid bodies are read by the single-pass scanner
// (promptscan.go), which hands the shapes it does not mirror to the
// decoder.
func extractValidated(body []byte, valid bool) promptInfo {
	return extract(body, valid, nil, allOfThePrompt)
}

// extract is extractValidated; a non-nil req is body's parseRequest,
// whose token-id prompt and noted values are taken as read. Without
// reads.digest, the digest is not made (promptInfo.digest is 0); without
// reads.text, the text is measured but not copied out (prompt is "").
func extract(body []byte, valid bool, req *request, reads promptReads) promptInfo {
	e := extractions.Get().(*extraction)
	defer extractions.Put(e)
	e.s.known, e.s.knownIDs, e.s.body, e.s.spans = nil, nil, body, knownSpans{}
	if req != nil {
		if req.known != nil {
			// Read once: the buffer holding them may serve another
			// request before this one ends.
			e.s.spans, req.known = *req.known, nil
		}
		if req.promptIDs != nil {
			e.s.known, e.s.knownIDs = body[req.promptAt:req.promptEnd], req.promptIDs
		}
	}
	x := &e.x
	d := newDigest()
	d.off = !reads.digest
	*x = extractor{prompt: x.prompt[:0], d: d}
	var ids []uint32
	ok := false
	if valid {
		ids, ok = e.s.scanConversation(body)
	}
	if !ok {
		*x = extractor{prompt: x.prompt[:0], d: d}
		ids = x.decode(body)
	}
	e.s.known, e.s.knownIDs, e.s.body = nil, nil, nil
	p := promptInfo{n: x.n, digest: x.d.sum(), tokenIDs: ids}
	if reads.text {
		p.prompt = string(x.prompt)
	}
	if cap(e.s.scratch) > 64<<10 {
		e.s.scratch = nil // do not keep one huge message's buffer
	}
	return p
}

// decode is the reference reading of body: encoding/json into
// conversation.
func (x *extractor) decode(body []byte) []uint32 {
	var c conversation
	if json.Unmarshal(body, &c) != nil || (c.Messages == nil && len(c.Prompt) == 0 && len(c.Input) == 0) {
		x.d.bytes('B', body)
		return nil
	}
	for i := range c.Messages {
		x.message(&c.Messages[i])
	}
	ids := x.promptField(c.Prompt)
	x.promptField(c.Input)
	return ids
}

func (x *extractor) message(m *chatMessage) {
	x.d.field('R', m.Role)
	if m.ToolCallID != "" {
		x.d.field('r', m.ToolCallID)
	}
	x.content(m.Content)
	for _, tc := range m.ToolCalls {
		x.d.field('c', tc.ID)
		x.d.field('n', tc.Function.Name)
		x.d.field('a', tc.Function.Arguments)
	}
}

func (x *extractor) content(raw json.RawMessage) {
	if len(raw) == 0 || raw[0] == 'n' {
		return
	}
	var s string
	if raw[0] == '"' {
		if json.Unmarshal(raw, &s) == nil {
			x.text(s)
		}
		return
	}
	var parts []json.RawMessage
	if json.Unmarshal(raw, &parts) != nil {
		x.d.bytes('X', raw)
		return
	}
	for _, pr := range parts {
		x.part(pr)
	}
}

// part reads one content part: text, an image's URL, or for audio, files
// and future part types their whole JSON as their identity.
func (x *extractor) part(pr []byte) {
	var p contentPart
	if json.Unmarshal(pr, &p) != nil {
		x.d.bytes('X', pr)
		return
	}
	switch {
	case p.Type == "text":
		x.text(p.Text)
	case p.Type == "image_url" && len(p.ImageURL) > 0:
		var img struct {
			URL string `json:"url"`
		}
		if p.ImageURL[0] == '"' {
			_ = json.Unmarshal(p.ImageURL, &img.URL)
		} else {
			_ = json.Unmarshal(p.ImageURL, &img)
		}
		x.d.field('I', img.URL)
	default:
		x.d.bytes('X', pr)
	}
}

// promptField reads a completions prompt or embeddings input: a string, a
// list of strings, a list of token ids or a list of such lists. It returns
// the token ids of the first prompt when given as ids.
func (x *extractor) promptField(raw json.RawMessage) []uint32 {
	if len(raw) == 0 || raw[0] == 'n' {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		x.text(s)
		return nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		for _, v := range ss {
			x.text(v)
		}
		return nil
	}
	var ids []uint32
	if json.Unmarshal(raw, &ids) == nil {
		ids = capIDs(ids)
		x.d.ids('K', ids)
		return ids
	}
	var batch [][]uint32
	if json.Unmarshal(raw, &batch) == nil && len(batch) > 0 {
		x.d.bytes('K', raw)
		return capIDs(batch[0])
	}
	x.d.bytes('X', raw)
	return nil
}

func capIDs(ids []uint32) []uint32 {
	if len(ids) > maxTokenIDs {
		return ids[:maxTokenIDs]
	}
	return ids
}

// parseTokenIDs reads the x-rolter-vllm-token-ids header: comma-separated
// unsigned integers. Errors wrap ErrBadRequest.
func parseTokenIDs(h string) ([]uint32, error) {
	h = strings.TrimSpace(h)
	if h == "" {
		return nil, nil
	}
	if ids, ok := scanTokenIDHeader(h); ok {
		return ids, nil
	}
	return splitTokenIDs(h)
}

// splitTokenIDs is the reference reading of a trimmed, non-empty
// x-rolter-vllm-token-ids value (scanTokenIDHeader is the fast one).
func splitTokenIDs(h string) ([]uint32, error) {
	ids := make([]uint32, 0, strings.Count(h, ",")+1)
	for f := range strings.SplitSeq(h, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 32)
		if err != nil {
			return nil, errTokenIDs(f)
		}
		if len(ids) == maxTokenIDs {
			return nil, fmt.Errorf("%w: %s carries more than %d ids", ErrBadRequest, headerTokenIDs, maxTokenIDs)
		}
		ids = append(ids, uint32(v))
	}
	return ids, nil
}

// buildRouteContext fills rc for a request addressed as model. adapter is
// set on passthrough group routes only.
func buildRouteContext(rc *strategies.RouteContext, hdr http.Header, body []byte, model, adapter string) error {
	return fillRouteContext(rc, hdr, body, utf8.Valid(body) && validJSON(body), model, adapter)
}

// fillRouteContext is buildRouteContext for a body whose validity as UTF-8
// JSON is known (parseRequest checked it).
func fillRouteContext(rc *strategies.RouteContext, hdr http.Header, body []byte, valid bool, model, adapter string) error {
	return fill(rc, firstValue(hdr, canonTokenIDs), firstValue(hdr, canonSession), body, valid, nil, model, adapter, allOfThePrompt)
}

// promptReads is what a pool's strategy reads of a request's prompt
// beyond its length and token ids: PromptDigest (digest) and Prompt
// (text). What it does not read is left zero.
type promptReads struct{ digest, text bool }

// allOfThePrompt is every part of the RouteContext filled.
var allOfThePrompt = promptReads{digest: true, text: true}

// readsFor is what of the prompt fillFromValues fills for p: a mesh
// learner (learn) shares and recalls prefixes of the text, whatever the
// pool's strategy.
func readsFor(p *pool, learn bool) promptReads {
	r := p.reads
	r.text = r.text || learn
	return r
}

// fillFromRequest is fillFromValues reading the two headers from hdr.
func fillFromRequest(rc *strategies.RouteContext, hdr http.Header, req *request, adapter string, reads promptReads) error {
	return fillFromValues(rc, firstValue(hdr, canonTokenIDs), firstValue(hdr, canonSession), req, adapter, reads)
}

// fillFromValues is fillRouteContext for a body parseRequest read (and
// so validated) as req, given the two headers it reads:
// x-rolter-vllm-token-ids and x-session-id. reads says what the pool's
// strategy reads (readsFor): without digest PromptDigest is left 0,
// without text Prompt is left empty (the text is still measured for
// PromptLen and PromptTokens).
func fillFromValues(rc *strategies.RouteContext, tokenIDs, session string, req *request, adapter string, reads promptReads) error {
	return fill(rc, tokenIDs, session, req.body, true, req, req.model, adapter, reads)
}

func fill(rc *strategies.RouteContext, tokenIDs, session string, body []byte, valid bool, req *request, model, adapter string, reads promptReads) error {
	ids, err := parseTokenIDs(tokenIDs)
	if err != nil {
		return err
	}
	p := extract(body, valid, req, reads)
	if ids == nil {
		ids = p.tokenIDs
	}
	*rc = strategies.RouteContext{
		Model:        model,
		SessionKey:   session,
		Prompt:       p.prompt,
		PromptLen:    p.n,
		PromptDigest: p.digest,
		TokenIDs:     ids,
		Adapter:      adapter,
	}
	if len(ids) > 0 {
		rc.PromptTokens = len(ids)
		var keys []uint64
		if req != nil && cap(req.keys) >= len(ids)/blockSize {
			keys = req.keys[:0]
		} else {
			keys = make([]uint64, 0, len(ids)/blockSize)
		}
		rc.BlockKeys = kvblock.Keys(keys, ids, blockSize, kvblock.Extra(adapter, ""))
		if p.n == 0 {
			// No text to match: prefix affinity keys the ids instead.
			if reads.text {
				rc.Prompt = strategies.TokenPrompt(ids)
			}
			rc.PromptLen = strategies.TokenKeyBytes * len(ids)
		}
	} else {
		rc.PromptTokens = (p.n + bytesPerToken - 1) / bytesPerToken
	}
	return nil
}
