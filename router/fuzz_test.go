package router

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rolter/rolter/strategies"
)

// The fuzz targets below run the router's real request-reading code over
// arbitrary client bytes. Their seed corpora live in
// testdata/fuzz/<Target>/ and run as ordinary tests on every `go test`;
// `go test -fuzz FuzzParseRequest ./router/` explores further.

// FuzzParseRequest feeds arbitrary bodies to parseRequest. It must never
// panic, must refuse with ErrBadRequest only, and when it accepts a body
// the model it located must be the one a JSON decoder reads, and splicing
// another model in must leave a valid JSON object addressed to that model
// with every other top-level field untouched.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"chat","messages":[{"role":"user","content":"hi"}]}`,
		`{"stream":true,"model":"a\"b","max_tokens":4}`,
		` { "model" : "m" , "stream" : false } `,
		`{"\u006dodel":"escaped-key"}`,
		`{"model":"x","model":"y"}`,
		`{"model":17}`,
		`{"messages":[]}`,
		`[]`,
		`{"model":"é\u00e9","prompt":[1,2,3]}`,
		`{"model":"m","prompt":[ 0 , 4294967295 ],"prompt":[7]}`,
		`{"model":"m","prompt":[1,02]}`,
		"{\"model\":\"\xff\"}",
		`{"model":"m","x":"` + strings.Repeat("é ", 40) + "\xc3(\"}",
		`{"model":"m","x":"` + strings.Repeat("ab", 40) + "\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := parseRequest(body)
		if want := refusalOf(body); want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Fatalf("answered %v, want %q", err, want)
		}
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error %v does not wrap ErrBadRequest", err)
			}
			if strings.Contains(err.Error(), "not valid JSON") && json.Valid(body) {
				t.Fatalf("refused valid JSON as invalid: %v", err)
			}
			return
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(body, &top); err != nil {
			t.Fatalf("accepted a body that is not a JSON object: %v", err)
		}
		var model string
		if err := json.Unmarshal(top["model"], &model); err != nil || model != r.model || model == "" {
			t.Fatalf("located model %q, a decoder reads %q (%v)", r.model, model, err)
		}
		var span string
		if err := json.Unmarshal(body[r.modelStart:r.modelEnd], &span); err != nil || span != r.model {
			t.Fatalf("model span %q decodes to %q (%v), want %q", body[r.modelStart:r.modelEnd], span, err, r.model)
		}
		if r.promptIDs != nil {
			var ids []uint32
			if err := json.Unmarshal(body[r.promptAt:r.promptEnd], &ids); err != nil || !slices.Equal(ids, r.promptIDs) {
				t.Fatalf("prompt ids %v, a decoder reads %v (%v)", r.promptIDs, ids, err)
			}
		}
		if want := string(top["stream"]) == "true"; r.stream != want {
			t.Fatalf("stream %v, the body says %s", r.stream, top["stream"])
		}
		const other = "upstream/model-\u00e9"
		out := r.withModel(other)
		var spliced map[string]json.RawMessage
		if err := json.Unmarshal(out, &spliced); err != nil {
			t.Fatalf("spliced body is not a JSON object: %v\n%s", err, out)
		}
		var got string
		if err := json.Unmarshal(spliced["model"], &got); err != nil || got != other {
			t.Fatalf("spliced model %q (%v), want %q", got, err, other)
		}
		for k, v := range top {
			if k != "model" && string(spliced[k]) != string(v) {
				t.Fatalf("field %q changed by the splice: %s → %s", k, v, spliced[k])
			}
		}
	})
}

// FuzzExtractPrompt feeds arbitrary bodies and routing headers to
// buildRouteContext (prompt extraction, digest, token ids, block keys). It
// must never panic; its only error is ErrBadRequest; the prompt stays
// valid UTF-8 within strategies.MaxPromptBytes; the result is a pure
// function of its input; block keys cover exactly the full blocks of the
// token ids.
func FuzzExtractPrompt(f *testing.F) {
	seeds := []struct{ body, ids, session string }{
		{`{"model":"m","messages":[{"role":"user","content":"hello"}]}`, "", "s1"},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"http://x/i.png"}}]}]}`, "", ""},
		{`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"42"}]}`, "", ""},
		{`{"model":"m","prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}`, "", ""},
		{`{"model":"m","prompt":["a","b"]}`, "", ""},
		{`{"model":"m","input":"embed me"}`, "", ""},
		{`{"model":"m","prompt":"x"}`, "1, 2,3", ""},
		{`{"model":"m","prompt":"x"}`, "1,-2", ""},
		{`not json at all`, "", ""},
		{"{\"model\":\"m\",\"prompt\":\"\xe2\x82\"}", "", ""},
	}
	for _, s := range seeds {
		f.Add([]byte(s.body), s.ids, s.session)
	}
	f.Fuzz(func(t *testing.T, body []byte, ids, session string) {
		hdr := http.Header{}
		hdr.Set(headerTokenIDs, ids)
		hdr.Set(headerSession, session)
		var rc strategies.RouteContext
		err := buildRouteContext(&rc, hdr, body, "m", "")
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error %v does not wrap ErrBadRequest", err)
			}
			return
		}
		if len(rc.Prompt) > strategies.MaxPromptBytes {
			t.Fatalf("prompt of %d bytes exceeds %d", len(rc.Prompt), strategies.MaxPromptBytes)
		}
		if !utf8.ValidString(rc.Prompt) {
			t.Fatalf("prompt is not valid UTF-8: %q", rc.Prompt)
		}
		if rc.PromptLen < len(rc.Prompt) {
			t.Fatalf("PromptLen %d below the bounded prompt's %d bytes", rc.PromptLen, len(rc.Prompt))
		}
		if len(rc.TokenIDs) > maxTokenIDs {
			t.Fatalf("%d token ids exceed the cap %d", len(rc.TokenIDs), maxTokenIDs)
		}
		if want := len(rc.TokenIDs) / blockSize; len(rc.BlockKeys) != want {
			t.Fatalf("%d block keys for %d token ids, want %d", len(rc.BlockKeys), len(rc.TokenIDs), want)
		}
		if rc.PromptTokens < 0 {
			t.Fatalf("negative PromptTokens %d", rc.PromptTokens)
		}
		var again strategies.RouteContext
		if err := buildRouteContext(&again, hdr, body, "m", ""); err != nil ||
			again.PromptDigest != rc.PromptDigest || again.Prompt != rc.Prompt || again.PromptLen != rc.PromptLen {
			t.Fatalf("not deterministic: digest %x then %x (%v)", rc.PromptDigest, again.PromptDigest, err)
		}
	})
}
