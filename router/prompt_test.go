package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rolter/rolter/kvblock"
	"github.com/rolter/rolter/strategies"
)

func chatBody(messages string) []byte {
	return []byte(`{"model":"m","messages":` + messages + `}`)
}

func TestPromptExtraction(t *testing.T) {
	cases := []struct {
		name   string
		body   []byte
		prompt string
	}{
		{"plain text", chatBody(`[{"role":"system","content":"be brief"},{"role":"user","content":"hello"}]`), "be brief\nhello"},
		{"text parts and an image", chatBody(`[{"role":"user","content":[{"type":"text","text":"what is"},{"type":"image_url","image_url":{"url":"https://x/cat.png"}},{"type":"text","text":"this?"}]}]`), "what is\nthis?"},
		{"tool call and result", chatBody(`[{"role":"user","content":"weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},{"role":"tool","tool_call_id":"call_1","content":"rain"}]`), "weather?\nrain"},
		{"completions string", []byte(`{"model":"m","prompt":"once upon"}`), "once upon"},
		{"completions list", []byte(`{"model":"m","prompt":["a","b"]}`), "a\nb"},
		{"embeddings input", []byte(`{"model":"m","input":"embed me"}`), "embed me"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := extractPrompt(tc.body)
			if p.prompt != tc.prompt || p.n != len(tc.prompt) {
				t.Fatalf("prompt %q (len %d), want %q", p.prompt, p.n, tc.prompt)
			}
			if p.digest == 0 {
				t.Fatal("zero digest")
			}
			if again := extractPrompt(tc.body); again.digest != p.digest {
				t.Fatal("digest is not stable")
			}
		})
	}
}

// Conversations with the same text but different images, tool calls or
// tool results must not share a digest (consistent_hash keys on it).
func TestPromptDigestCoversIdentity(t *testing.T) {
	variants := map[string][]byte{
		"base":            chatBody(`[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"https://x/a.png"}}]}]`),
		"other image":     chatBody(`[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"https://x/b.png"}}]}]`),
		"no image":        chatBody(`[{"role":"user","content":[{"type":"text","text":"hi"}]}]`),
		"tool call":       chatBody(`[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{}"}}]}]`),
		"other call id":   chatBody(`[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c2","function":{"name":"f","arguments":"{}"}}]}]`),
		"other tool name": chatBody(`[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"g","arguments":"{}"}}]}]`),
		"other args":      chatBody(`[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{\"a\":1}"}}]}]`),
		"tool result":     chatBody(`[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"c1","content":"42"}]`),
		"other result id": chatBody(`[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"c9","content":"42"}]`),
		"other result":    chatBody(`[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"c1","content":"43"}]`),
		"split text":      chatBody(`[{"role":"user","content":"h"},{"role":"user","content":"i"}]`),
	}
	seen := map[uint64]string{}
	for name, body := range variants {
		d := extractPrompt(body).digest
		if prev, dup := seen[d]; dup {
			t.Errorf("%q and %q share digest %x", name, prev, d)
		}
		seen[d] = name
	}
}

func TestPromptBoundedTo32KiB(t *testing.T) {
	// 40 KiB of text whose 32 KiB cut falls inside a 3-byte rune.
	long := strings.Repeat("a", strategies.MaxPromptBytes-1) + strings.Repeat("€", 3000)
	msgs, _ := json.Marshal([]map[string]string{{"role": "user", "content": long}})
	body := chatBody(string(msgs))
	p := extractPrompt(body)
	if len(p.prompt) > strategies.MaxPromptBytes || !utf8.ValidString(p.prompt) {
		t.Fatalf("prompt is %d bytes, valid UTF-8 %v", len(p.prompt), utf8.ValidString(p.prompt))
	}
	if len(p.prompt) != strategies.MaxPromptBytes-1 {
		t.Fatalf("prompt cut at %d, want the last whole rune before 32 KiB", len(p.prompt))
	}
	if p.n != len(long) {
		t.Fatalf("PromptLen %d, want the whole conversation's %d", p.n, len(long))
	}
	// The digest covers text past the bound.
	msgs2, _ := json.Marshal([]map[string]string{{"role": "user", "content": long + "!"}})
	if extractPrompt(chatBody(string(msgs2))).digest == p.digest {
		t.Fatal("digest ignores text past the 32 KiB bound")
	}
}

func TestUnreadableBodyDigestsRawBody(t *testing.T) {
	a := extractPrompt([]byte(`{"model":"m","messages":"not a list"}`))
	b := extractPrompt([]byte(`{"model":"m","messages":"not a list!"}`))
	if a.prompt != "" || a.digest == b.digest {
		t.Fatalf("raw-body fallback: %+v %+v", a, b)
	}
}

func TestRouteContextTokenIDs(t *testing.T) {
	ids := make([]string, 40)
	want := make([]uint32, 40)
	for i := range ids {
		ids[i] = string(rune('0' + i%10))
		want[i] = uint32(i % 10)
	}
	cases := []struct {
		name    string
		header  string
		body    string
		adapter string
		tokens  []uint32
		err     bool
	}{
		{"header", strings.Join(ids, ","), `{"model":"m","messages":[]}`, "", want, false},
		{"header with spaces", " 1, 2 ,3", `{"model":"m","messages":[]}`, "", []uint32{1, 2, 3}, false},
		{"completions ids", "", `{"model":"m","prompt":[5,6,7]}`, "", []uint32{5, 6, 7}, false},
		{"completions batch", "", `{"model":"m","prompt":[[8,9],[1]]}`, "", []uint32{8, 9}, false},
		{"adapter keys", strings.Join(ids, ","), `{"model":"m","messages":[]}`, "lora-a", want, false},
		{"malformed", "1,x,3", `{"model":"m"}`, "", nil, true},
		{"negative", "-1", `{"model":"m"}`, "", nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hdr := http.Header{}
			hdr.Set(headerSession, "sess-1")
			if tc.header != "" {
				hdr.Set(headerTokenIDs, tc.header)
			}
			var rc strategies.RouteContext
			err := buildRouteContext(&rc, hdr, []byte(tc.body), "m", tc.adapter)
			if tc.err {
				if !errors.Is(err, ErrBadRequest) {
					t.Fatalf("err %v, want ErrBadRequest", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rc.SessionKey != "sess-1" || rc.Adapter != tc.adapter || rc.PromptTokens != len(tc.tokens) {
				t.Fatalf("rc %+v", rc)
			}
			if len(rc.TokenIDs) != len(tc.tokens) {
				t.Fatalf("token ids %v, want %v", rc.TokenIDs, tc.tokens)
			}
			wantKeys := kvblock.Keys(nil, tc.tokens, kvblock.DefaultBlockSize, kvblock.Extra(tc.adapter, ""))
			if len(rc.BlockKeys) != len(tc.tokens)/16 || len(rc.BlockKeys) != len(wantKeys) {
				t.Fatalf("block keys %d, want %d", len(rc.BlockKeys), len(wantKeys))
			}
			for i := range wantKeys {
				if rc.BlockKeys[i] != wantKeys[i] {
					t.Fatalf("block key %d differs", i)
				}
			}
		})
	}
	t.Run("header rejected at the edge", func(t *testing.T) {
		eng := newEngine(t, okChat)
		h := newHarness(t, providers("a", eng.URL)+"[[routes]]\nmodel = \"m\"\ntargets = [{provider = \"a\"}]\n", nil)
		code, _, body := h.chat("m", headerTokenIDs, "1,two")
		if code != 400 || errorCode(t, body) != "invalid_request" {
			t.Fatalf("%d %s", code, body)
		}
	})
	t.Run("prompt tokens estimated from text", func(t *testing.T) {
		var rc strategies.RouteContext
		if err := buildRouteContext(&rc, http.Header{}, []byte(`{"model":"m","prompt":"`+strings.Repeat("x", 400)+`"}`), "m", ""); err != nil {
			t.Fatal(err)
		}
		if rc.PromptTokens != 100 || rc.TokenIDs != nil || rc.BlockKeys != nil {
			t.Fatalf("%+v", rc)
		}
	})
}

func TestModelRewriteKeepsTheRestOfTheBody(t *testing.T) {
	body := []byte(`{ "stream" : true , "model" : "llama", "stream_options":{"include_usage":true},"messages":[{"role":"user","content":"model"}]}`)
	r, err := parseRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	if r.model != "llama" || !r.stream {
		t.Fatalf("%+v", r)
	}
	got := string(r.withModel(`meta/"8b"`))
	want := `{ "stream" : true , "model" : "meta/\"8b\"", "stream_options":{"include_usage":true},"messages":[{"role":"user","content":"model"}]}`
	if got != want {
		t.Fatalf("rewritten body\n%s\nwant\n%s", got, want)
	}
}

// A long message or a long token-id prompt enters the digest as a sum of
// its bytes: changing any one byte or id, wherever it sits, or moving a
// byte from one message to the next, still changes the digest, and the
// same content gives the same digest from the body and from the decoder.
func TestLongFieldDigestSeesEveryByte(t *testing.T) {
	text := []byte(strings.Repeat("the quick brown fox ", 4000))
	chat := func(a, b []byte) []byte {
		msgs, _ := json.Marshal([]map[string]string{{"role": "user", "content": string(a)}, {"role": "user", "content": string(b)}})
		return chatBody(string(msgs))
	}
	base := extractPrompt(chat(text, []byte("tail of the second message, long enough")))
	seen := map[uint64]string{base.digest: "base"}
	for _, at := range []int{0, 1, longField - 1, longField, 4096, len(text) / 2, len(text) - 1} {
		edited := bytes.Clone(text)
		edited[at] ^= 1
		name := fmt.Sprintf("byte %d", at)
		d := extractPrompt(chat(edited, []byte("tail of the second message, long enough"))).digest
		if prev, dup := seen[d]; dup {
			t.Errorf("%s and %s share digest %x", name, prev, d)
		}
		seen[d] = name
	}
	moved := extractPrompt(chat(text[:len(text)-1], append(text[len(text)-1:len(text):len(text)], "tail of the second message, long enough"...))).digest
	if _, dup := seen[moved]; dup {
		t.Error("moving a byte between messages kept the digest")
	}

	ids := make([]uint32, 5000)
	for i := range ids {
		ids[i] = uint32(i * 7919 % 128000)
	}
	prompt := func(ids []uint32) []byte {
		return []byte(`{"model":"m","prompt":` + string(idsText(ids, "")) + `}`)
	}
	idSeen := map[uint64]int{extractPrompt(prompt(ids)).digest: -1}
	for _, at := range []int{0, 7, 8, 2500, len(ids) - 1} {
		edited := slices.Clone(ids)
		edited[at]++
		d := extractPrompt(prompt(edited)).digest
		if prev, dup := idSeen[d]; dup {
			t.Errorf("ids edited at %d and %d share digest %x", at, prev, d)
		}
		idSeen[d] = at
	}
	// The decoder's reading (spaces send the ids to it) digests the same.
	spaced := []byte(`{"model":"m","prompt":` + string(idsText(ids, " ")) + `}`)
	var x extractor
	x.d = newDigest()
	x.decode(spaced)
	if got := extractPrompt(prompt(ids)).digest; x.d.sum() != got {
		t.Fatalf("decoder digest %x, scanner %x", x.d.sum(), got)
	}
}
