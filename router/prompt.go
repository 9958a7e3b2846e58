package router

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/rolter/rolter/kvblock"
	"github.com/rolter/rolter/strategies"
)

// Header names users know (compat.md).
const (
	headerSession  = "x-session-id"
	headerTokenIDs = "x-rolter-vllm-token-ids"
)

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
// processes and releases, and ("ab","c") never collides with ("a","bc").
type digest uint64

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func newDigest() digest { return fnvOffset }

func (d *digest) byte1(c byte) { *d = (*d ^ digest(c)) * fnvPrime }

func (d *digest) field(tag byte, s string) { hashField(d, tag, s) }

func (d *digest) bytes(tag byte, b []byte) { hashField(d, tag, b) }

func hashField[T string | []byte](d *digest, tag byte, s T) {
	d.byte1(tag)
	n := len(s)
	d.byte1(byte(n))
	d.byte1(byte(n >> 8))
	d.byte1(byte(n >> 16))
	d.byte1(byte(n >> 24))
	for i := 0; i < len(s); i++ {
		d.byte1(s[i])
	}
}

// extractor accumulates the conversation: its text bounded to
// MaxPromptBytes, the whole text's length, and the digest of text plus the
// identity of images, tool calls and tool results.
type extractor struct {
	prompt []byte
	n      int
	d      digest
}

func (x *extractor) text(s string) {
	if s == "" {
		return
	}
	if x.n > 0 {
		x.appendPrompt("\n")
		x.n++
	}
	x.appendPrompt(s)
	x.n += len(s)
	x.d.field('T', s)
}

func (x *extractor) appendPrompt(s string) {
	room := strategies.MaxPromptBytes - len(x.prompt)
	if room <= 0 {
		return
	}
	if len(s) > room {
		s = s[:room]
		// Never end the bound prompt inside a rune.
		for len(s) > 0 {
			if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size != 1 {
				break
			}
			s = s[:len(s)-1]
		}
	}
	x.prompt = append(x.prompt, s...)
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
	var c conversation
	x := extractor{d: newDigest()}
	readable := json.Unmarshal(body, &c) == nil && (c.Messages != nil || len(c.Prompt) > 0 || len(c.Input) > 0)
	var ids []uint32
	if readable {
		for i := range c.Messages {
			x.message(&c.Messages[i])
		}
		ids = x.promptField(c.Prompt)
		x.promptField(c.Input)
	} else {
		x.d = newDigest()
		x.d.bytes('B', body)
	}
	return promptInfo{prompt: string(x.prompt), n: x.n, digest: uint64(x.d), tokenIDs: ids}
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
		var p contentPart
		if json.Unmarshal(pr, &p) != nil {
			x.d.bytes('X', pr)
			continue
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
			// audio, files and future part types: their whole JSON is
			// their identity.
			x.d.bytes('X', pr)
		}
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
		x.d.bytes('K', raw)
		return capIDs(ids)
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
	ids := make([]uint32, 0, strings.Count(h, ",")+1)
	for f := range strings.SplitSeq(h, ",") {
		v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%w: %s must be comma-separated token ids, got %q", ErrBadRequest, headerTokenIDs, f)
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
	ids, err := parseTokenIDs(hdr.Get(headerTokenIDs))
	if err != nil {
		return err
	}
	p := extractPrompt(body)
	if ids == nil {
		ids = p.tokenIDs
	}
	*rc = strategies.RouteContext{
		Model:        model,
		SessionKey:   hdr.Get(headerSession),
		Prompt:       p.prompt,
		PromptLen:    p.n,
		PromptDigest: p.digest,
		TokenIDs:     ids,
		Adapter:      adapter,
	}
	if len(ids) > 0 {
		rc.PromptTokens = len(ids)
		rc.BlockKeys = kvblock.Keys(nil, ids, blockSize, kvblock.Extra(adapter, ""))
	} else {
		rc.PromptTokens = (p.n + 3) / 4
	}
	return nil
}
