package router

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// decoded is the reference extraction: encoding/json only.
func decoded(body []byte) promptInfo {
	x := extractor{d: newDigest()}
	ids := x.decode(body)
	return promptInfo{prompt: string(x.prompt), n: x.n, digest: x.d.sum(), tokenIDs: ids}
}

// scanned is the scanner's extraction and whether it needed the decoder.
func scanned(body []byte) (promptInfo, bool) {
	x := extractor{d: newDigest()}
	s := scanner{x: &x}
	ids, ok := s.scanConversation(body)
	return promptInfo{prompt: string(x.prompt), n: x.n, digest: x.d.sum(), tokenIDs: ids}, ok
}

func samePrompt(a, b promptInfo) bool {
	return a.prompt == b.prompt && a.n == b.n && a.digest == b.digest && slices.Equal(a.tokenIDs, b.tokenIDs)
}

var scanCases = []struct {
	name, body string
	fast       bool // the scanner reads it without the decoder
}{
	{"chat", `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`, true},
	{"escapes", `{"messages":[{"role":"user","content":"a\nb\t\"q\" \\ \/ \u00e9 \ud83d\ude00 \ud800 x \udc00\ud800\u0041"}]}`, true},
	{"backslash runs", `{"messages":[{"role":"user","content":"x\\\" y \\","name":"\\"},{"role":"a\\\\","content":["\"\\"]}]}`, true},
	{"parts", `{"messages":[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"http://x/i.png","detail":"low"}},{"type":"image_url","image_url":"data:abc"},{"type":"input_audio","input_audio":{"data":"AAA"}},null,"str",7,{"type":"image_url"},{"type":"image_url","image_url":null},{"type":"image_url","image_url":{"url":5}},{"type":"image_url","image_url":[1]}]}]}`, true},
	{"odd parts", `{"messages":[{"role":"user","content":[{"type":"text","text":5},{"Type":"text","text":"case"},{"type":"text","text":"a","text":"b"},{"type":"image_url","image_url":{"URL":"u"}},{"type":"text","t\u0065xt":"esc"}]}]}`, true},
	{"tools", `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}},null,{"id":null,"function":null}]},{"role":"tool","tool_call_id":"c1","content":"42"}]}`, true},
	{"tool call id null", `{"messages":[{"role":null,"tool_call_id":null,"tool_calls":null},null]}`, true},
	{"content kinds", `{"messages":[{"role":"user","content":{"a":1}},{"role":"user","content":12},{"role":"user","content":true},{"role":"user","content":[]}]}`, true},
	{"empty messages", `{"messages":[]}`, true},
	{"null messages", `{"messages":null}`, true},
	{"null prompt", `{"prompt":null}`, true},
	{"no conversation", `{"model":"m","temperature":0.5}`, true},
	{"prompt string", `{"prompt":"once upon"}`, true},
	{"prompt list", `{"prompt":["a",null,"b"]}`, true},
	{"prompt ids", `{"prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}`, true},
	{"prompt batch", `{"prompt":[[1,2],[3]]}`, true},
	{"prompt mixed", `{"prompt":["a",1]}`, true},
	{"prompt number", `{"prompt":5}`, true},
	{"input", `{"input":["x","y"],"prompt":"p","messages":[{"role":"user","content":"m"}]}`, true},
	{"whitespace", " {\n \"messages\" : [ { \"role\" : \"user\" , \"content\" : [ { \"type\" : \"text\" , \"text\" : \"w\" } ] } ] , \"prompt\" : [ \"q\" ] } ", true},
	{"key case", `{"Messages":[{"role":"user","content":"x"}]}`, false},
	{"key escape", `{"m\u0065ssages":[{"role":"user","content":"x"}]}`, false},
	{"key fold", `{"meſſages":[{"role":"user","content":"x"}]}`, false},
	{"duplicate", `{"prompt":"a","prompt":"b"}`, false},
	{"messages not a list", `{"messages":"hi"}`, false},
	{"message not an object", `{"messages":["hi"]}`, false},
	{"role type", `{"messages":[{"role":1,"content":"x"}]}`, false},
	{"tool calls type", `{"messages":[{"role":"a","tool_calls":{}}]}`, false},
	{"function type", `{"messages":[{"role":"a","tool_calls":[{"function":"f"}]}]}`, false},
	{"arguments type", `{"messages":[{"role":"a","tool_calls":[{"function":{"arguments":{}}}]}]}`, false},
	{"tool call not an object", `{"messages":[{"role":"a","tool_calls":[1]}]}`, false},
	{"not an object", `[1,2]`, false},
	{"null body", `null`, false},
}

// TestScanMatchesDecoder checks that the scanner and the decoder extract
// the same prompt, length, digest and token ids, and that the scanner
// handles the common shapes itself.
func TestScanMatchesDecoder(t *testing.T) {
	long := `{"messages":[{"role":"user","content":"` + strings.Repeat("é", 20000) + `"},{"role":"user","content":"` + strings.Repeat("x", 9000) + `"}]}`
	cases := append(scanCases[:len(scanCases):len(scanCases)], struct {
		name, body string
		fast       bool
	}{"over the bound", long, true})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			if !json.Valid(body) {
				t.Fatalf("test body is not valid JSON: %s", body)
			}
			got, ok := scanned(body)
			if ok != tc.fast {
				t.Fatalf("scanner handled it itself: %v, want %v", ok, tc.fast)
			}
			want := decoded(body)
			if ok && !samePrompt(got, want) {
				t.Fatalf("scanner %+v\ndecoder %+v", got, want)
			}
			if all := extractPrompt(body); !samePrompt(all, want) {
				t.Fatalf("extractPrompt %+v\ndecoder %+v", all, want)
			}
		})
	}
}

// FuzzScanMatchesDecoder: for every valid UTF-8 JSON body the scanner
// either defers to the decoder or agrees with it exactly, on its own and
// after parseRequest noted the body's long values.
func FuzzScanMatchesDecoder(f *testing.F) {
	for _, tc := range scanCases {
		f.Add([]byte(tc.body))
		if body, ok := asRequest(tc.body, strings.Repeat("p", longSpan)); ok {
			f.Add([]byte(body))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !utf8.Valid(body) || !json.Valid(body) {
			return
		}
		if r, err := parseRequest(body); err == nil {
			// The router's own path: the values validation noted are
			// stepped over.
			if got, want := extract(body, true, &r, allOfThePrompt), decoded(body); !samePrompt(got, want) {
				t.Fatalf("body %q\nwith noted spans %+v\ndecoder %+v", body, got, want)
			}
		}
		got, ok := scanned(body)
		if !ok {
			return
		}
		if want := decoded(body); !samePrompt(got, want) {
			t.Fatalf("body %q\nscanner %+v\ndecoder %+v", body, got, want)
		}
	})
}

var validityCases = []string{
	``, ` `, `{}`, `[]`, `{"a":1}`, ` {"a" : [1, 2.5, -0, 1e5, 1E+2, -3.2e-1, true, false, null, "s"]} `,
	`{"a":1,}`, `[1,]`, `[,1]`, `{"a"}`, `{"a":}`, `{:1}`, `{1:1}`, `{"a":1 "b":2}`, `[1 2]`,
	`01`, `-`, `-01`, `1.`, `.5`, `1e`, `1e+`, `+1`, `0x10`, `1.5.2`, `-0.0e-0`,
	`"\u00e9\n\t\"\\\/\b\f\r"`, `"\x"`, `"\u12"`, `"\u12g4"`, "\"a\x01\"", "\"\xff\"", `"abc`, `"\`,
	`tru`, `truee`, `nul`, `falsy`, `true false`, `{} {}`, `[[[]]]`, `[[[]]`, `[]]`, `{]`, `[}`,
	`{"a":{"b":[{"c":null}]}}`, "\t\r\n[1]\n", "[1]\x00",
}

// TestValidJSONMatchesStdlib checks validJSON against json.Valid,
// including the nesting limit.
func TestValidJSONMatchesStdlib(t *testing.T) {
	cases := append(validityCases[:len(validityCases):len(validityCases)],
		strings.Repeat("[", maxJSONDepth)+strings.Repeat("]", maxJSONDepth),
		strings.Repeat("[", maxJSONDepth+1)+strings.Repeat("]", maxJSONDepth+1),
		strings.Repeat(`{"a":`, maxJSONDepth)+"1"+strings.Repeat("}", maxJSONDepth),
		strings.Repeat(`{"a":`, maxJSONDepth+1)+"1"+strings.Repeat("}", maxJSONDepth+1))
	for _, c := range cases {
		if got, want := validJSON([]byte(c)), json.Valid([]byte(c)); got != want {
			name := c
			if len(name) > 40 {
				name = name[:40] + "…"
			}
			t.Errorf("validJSON(%q) = %v, json.Valid says %v", name, got, want)
		}
	}
}

// FuzzValidJSON: validJSON and json.Valid agree on every input.
func FuzzValidJSON(f *testing.F) {
	for _, c := range validityCases {
		f.Add([]byte(c))
	}
	for _, tc := range scanCases {
		f.Add([]byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid says %v", b, got, want)
		}
	})
}

// TestModelSplice checks the model read from a body and the model spliced
// into it against encoding/json.
func TestModelSplice(t *testing.T) {
	for _, m := range []string{`llama`, `meta/llama-8b`, `a"b`, `a\b`, `<tag>&`, "tab\there", `é`, "\u2028", `\ud800`} {
		q, _ := json.Marshal(m)
		body := []byte(`{"model":` + string(q) + `,"model2":"x","messages":[]}`)
		r, err := parseRequest(body)
		if err != nil {
			t.Fatalf("%q: %v", m, err)
		}
		var want struct{ Model string }
		_ = json.Unmarshal(body, &want)
		if r.model != want.Model {
			t.Errorf("parsed model %q, decoder %q", r.model, want.Model)
		}
		out := r.withModel(m + "-up")
		var got map[string]any
		if err := json.Unmarshal(out, &got); err != nil || got["model"] != m+"-up" || got["model2"] != "x" {
			t.Errorf("withModel(%q) = %s (%v)", m+"-up", out, err)
		}
		if wantQ, _ := json.Marshal(m + "-up"); !strings.Contains(string(out), string(wantQ)) {
			t.Errorf("withModel(%q) = %s, want the model written as json.Marshal does: %s", m+"-up", out, wantQ)
		}
	}
	for _, body := range []string{`{"model":"a","model":null}`, `{"m\u006fdel":"esc"}`} {
		r, err := parseRequest([]byte(body))
		var want struct{ Model string }
		_ = json.Unmarshal([]byte(body), &want)
		if err != nil || r.model != want.Model {
			t.Errorf("%s: model %q (%v), decoder %q", body, r.model, err, want.Model)
		}
	}
}

// A string of any length up to past the word-at-a-time prefix and the
// 32-byte control check, with a control character, an escape, a bad
// escape or a quote placed at any position, is valid exactly when
// encoding/json says so.
func TestValidStringEveryPosition(t *testing.T) {
	for n := range 100 {
		for at := range n {
			for _, ins := range []string{"\x01", "\x1f", "\t", `\n`, `\"`, `\u00e9`, `\x`, `\u12`, `"`, "é", "\x7f"} {
				s := strings.Repeat("a", at) + ins + strings.Repeat("b", n-at)
				for _, doc := range []string{`"` + s + `"`, `{"k":"` + s + `","m":1}`, `["` + s + `"]`} {
					if got, want := validJSON([]byte(doc)), json.Valid([]byte(doc)); got != want {
						t.Fatalf("validJSON(%q) = %v, json.Valid %v", doc, got, want)
					}
				}
			}
		}
	}
}

// requested is the router's extraction of a request body: parseRequest
// validates it and notes its long values, and the scanner steps over
// them.
func requested(t *testing.T, body []byte) promptInfo {
	t.Helper()
	r, err := parseRequest(body)
	if err != nil {
		t.Fatalf("parseRequest: %v\n%s", err, body)
	}
	return extract(body, true, &r, allOfThePrompt)
}

// asRequest gives body (a JSON object) a model, and when pad is not
// empty puts pad at the start of every string value, so that each is long
// enough for validation to note it.
func asRequest(body, pad string) (string, bool) {
	if !strings.HasPrefix(body, "{") {
		return "", false
	}
	if pad != "" {
		body = strings.ReplaceAll(body, `":"`, `":"`+pad)
		body = strings.ReplaceAll(body, `["`, `["`+pad)
		body = strings.ReplaceAll(body, `,"`, `,"`+pad) // keys too, after a comma: a key is never noted
	}
	rest := strings.TrimPrefix(body, "{")
	if strings.TrimSpace(rest) != "}" {
		rest = "," + rest
	}
	body = `{"model":"m"` + rest
	return body, json.Valid([]byte(body))
}

// TestNotedSpansMatchDecoder checks the extraction of request bodies whose
// long values validation noted (so the scanner steps over them) against
// the decoder: the same text, length, digest and token ids, for every
// shape the scanner reads and every one it hands to the decoder.
func TestNotedSpansMatchDecoder(t *testing.T) {
	long := strings.Repeat("long text ", 40)
	esc := strings.Repeat(`a\"b\\c\n\u00e9 `, 30)
	cases := map[string]string{
		"content":         `{"model":"m","messages":[{"role":"user","content":"` + long + `"}]}`,
		"escaped content": `{"model":"m","messages":[{"role":"user","content":"` + esc + `"}]}`,
		"both":            `{"model":"m","messages":[{"role":"system","content":"` + esc + `"},{"role":"user","content":"` + long + `"}]}`,
		"nested unknown":  `{"model":"m","metadata":{"k":"` + long + `","l":["` + esc + `",{"m":"` + long + `"}]},"messages":[{"role":"user","content":"` + long + `","name":"` + long + `"}],"tools":[{"description":"` + long + `"}]}`,
		"long key":        `{"model":"m","` + long + `":"` + long + `","messages":[{"role":"user","content":"x"}]}`,
		"many": `{"model":"m","messages":[` + strings.Repeat(`{"role":"user","content":"`+long+`"},{"role":"assistant","content":"`+esc+`"},`, 9) +
			`{"role":"user","content":"end"}]}`,
		"prompt":         `{"model":"m","prompt":"` + long + `","input":["` + esc + `","` + long + `"]}`,
		"ids and text":   `{"model":"m","prompt":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17],"suffix":"` + long + `","input":"` + esc + `"}`,
		"duplicate long": `{"model":"m","prompt":"` + long + `","prompt":"` + esc + `"}`,
		"key case long":  `{"model":"m","Messages":[{"role":"user","content":"` + long + `"}]}`,
		"parts":          `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"` + esc + `"},{"type":"image_url","image_url":{"url":"` + long + `"}},{"type":"input_audio","input_audio":{"data":"` + long + `"}}]}]}`,
		"tools":          `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"` + long + `","function":{"name":"f","arguments":"` + esc + `"}}]},{"role":"tool","tool_call_id":"` + long + `","content":"` + long + `"}]}`,
	}
	for _, tc := range scanCases {
		for _, pad := range []string{"", strings.Repeat("p", longSpan)} {
			if body, ok := asRequest(tc.body, pad); ok {
				cases[fmt.Sprintf("%s, padded %d", tc.name, len(pad))] = body
			}
		}
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			b := []byte(body)
			if !json.Valid(b) {
				t.Fatalf("test body is not valid JSON: %s", b)
			}
			want := decoded(b)
			if got := requested(t, b); !samePrompt(got, want) {
				t.Fatalf("with noted spans %+v\ndecoder %+v", got, want)
			}
		})
	}
}
