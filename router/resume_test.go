package router

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/rolter/rolter/internal/testwait"
)

// Script steps that are not events: die aborts the engine's connection;
// a script of unavailable answers 503; one of hang sends nothing until the
// router gives up.
const (
	die         = "DIE"
	unavailable = "HTTP 503"
	hang        = "HANG"
)

// play writes events as SSE, flushing each; die aborts the connection.
func play(w http.ResponseWriter, events ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, e := range events {
		if e == die {
			panic(http.ErrAbortHandler)
		}
		fmt.Fprintf(w, "data: %s\n\n", e)
		w.(http.Flusher).Flush()
	}
}

// scripted is a set of engines answering streams in call order: the n-th
// upstream request, whichever engine gets it, plays scripts[n].
type scripted struct {
	calls   atomic.Int64
	scripts [][]string
	engines []*fakeEngine
}

func newScripted(t *testing.T, n int, scripts ...[]string) *scripted {
	s := &scripted{scripts: scripts}
	for range n {
		s.engines = append(s.engines, newEngine(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
			i := int(s.calls.Add(1)) - 1
			if i >= len(s.scripts) {
				http.Error(w, `{"error":{"message":"unscripted call"}}`, http.StatusTeapot)
				return
			}
			switch script := s.scripts[i]; {
			case len(script) > 0 && script[0] == unavailable:
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, `{"error":{"message":"overloaded","type":"server_error","code":"unavailable"}}`)
			case len(script) > 0 && script[0] == hang:
				<-r.Context().Done()
			default:
				play(w, script...)
			}
		}))
	}
	return s
}

// bodies returns every upstream request body in arrival order.
func (s *scripted) bodies() []map[string]any {
	var out []map[string]any
	for _, e := range s.engines {
		e.mu.Lock()
		out = append(out, e.bodies...)
		e.mu.Unlock()
	}
	return out
}

// toml is a route "m" over the engines with resume_streams on.
func (s *scripted) toml(extra string) string {
	var kv, targets []string
	for i, e := range s.engines {
		name := fmt.Sprintf("e%d", i)
		kv = append(kv, name, e.URL)
		targets = append(targets, fmt.Sprintf("{provider = %q}", name))
	}
	return providers(kv...) + "[[routes]]\nmodel = \"m\"\nresume_streams = true\ntargets = [" +
		strings.Join(targets, ", ") + "]\n" + extra
}

func (h *harness) resumes(outcome string) float64 {
	h.t.Helper()
	var m dto.Metric
	if err := h.srv.metrics.resumes.WithLabelValues("m", outcome).Write(&m); err != nil {
		h.t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

const (
	roleA  = `{"id":"chatcmpl-A","object":"chat.completion.chunk","created":100,"model":"up-a","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`
	helloA = `{"id":"chatcmpl-A","object":"chat.completion.chunk","created":100,"model":"up-a","choices":[{"index":0,"delta":{"content":" Hello"},"logprobs":null,"finish_reason":null}]}`
	worA   = `{"id":"chatcmpl-A","object":"chat.completion.chunk","created":100,"model":"up-a","choices":[{"index":0,"delta":{"content":" wor"},"logprobs":null,"finish_reason":null}]}`
)

// chunkB is a continuation chunk as a second engine sends it.
func chunkB(delta, finish string) string {
	return `{"id":"chatcmpl-B","object":"chat.completion.chunk","created":200,"model":"up-b","choices":[{"index":0,"delta":` +
		delta + `,"logprobs":null,"finish_reason":` + finish + `}]}`
}

func TestResumedChatStreamIsOneStreamToTheClient(t *testing.T) {
	s := newScripted(t, 2,
		[]string{roleA, helloA, worA, die},
		[]string{
			chunkB(`{"role":"assistant","content":""}`, "null"),
			chunkB(`{"content":"ld"}`, "null"),
			chunkB(`{"content":" again"}`, `"length"`),
			`{"id":"chatcmpl-B","object":"chat.completion.chunk","created":200,"model":"up-b","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}`,
			"[DONE]",
		})
	h := newHarness(t, s.toml(""), nil)
	code, _, body := h.post("/v1/chat/completions",
		`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":10,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"say hello"}]}`)
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	want := "data: " + roleA + "\n\n" +
		"data: " + helloA + "\n\n" +
		"data: " + worA + "\n\n" +
		`data: {"id":"chatcmpl-A","object":"chat.completion.chunk","created":100,"model":"up-a","choices":[{"index":0,"delta":{"content":"ld"},"logprobs":null,"finish_reason":null}]}` + "\n\n" +
		`data: {"id":"chatcmpl-A","object":"chat.completion.chunk","created":100,"model":"up-a","choices":[{"index":0,"delta":{"content":" again"},"logprobs":null,"finish_reason":"length"}]}` + "\n\n" +
		`data: {"id":"chatcmpl-A","object":"chat.completion.chunk","created":100,"model":"up-a","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":4,"total_tokens":11}}` + "\n\n" +
		"data: [DONE]\n\n"
	if body != want {
		t.Errorf("spliced stream:\n%s\nwant:\n%s", body, want)
	}

	bodies := s.bodies()
	if len(bodies) != 2 {
		t.Fatalf("%d upstream requests, want 2", len(bodies))
	}
	cont := bodies[1]
	msgs, _ := cont["messages"].([]any)
	wantMsgs := `[{"content":"be brief","role":"system"},{"content":"say hello","role":"user"},{"content":" Hello wor","role":"assistant"}]`
	if got, _ := json.Marshal(msgs); string(got) != wantMsgs {
		t.Errorf("continuation messages %s, want %s", got, wantMsgs)
	}
	if cont["continue_final_message"] != true || cont["add_generation_prompt"] != false {
		t.Errorf("continuation flags: continue_final_message %v, add_generation_prompt %v", cont["continue_final_message"], cont["add_generation_prompt"])
	}
	if cont["max_tokens"] != float64(8) || cont["stream"] != true {
		t.Errorf("continuation max_tokens %v (want 10 - 2 relayed = 8), stream %v", cont["max_tokens"], cont["stream"])
	}
	if got := h.resumes("resumed"); got != 1 {
		t.Errorf("resumed counted %v times", got)
	}
	if s.engines[0].hits.Load() != 1 || s.engines[1].hits.Load() != 1 {
		t.Errorf("hits %d and %d: the continuation must go to the other engine", s.engines[0].hits.Load(), s.engines[1].hits.Load())
	}
}

func TestEngineErrorEventIsResumedNotRelayed(t *testing.T) {
	s := newScripted(t, 2,
		[]string{roleA, helloA, `{"error":{"message":"engine fell over","type":"InternalServerError","code":500}}`},
		[]string{chunkB(`{"role":"assistant","content":" there"}`, `"stop"`), "[DONE]"})
	h := newHarness(t, s.toml(""), nil)
	_, _, body := h.post("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`)
	if strings.Contains(body, "engine fell over") || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("stream: %s", body)
	}
	events := sseEvents(strings.NewReader(body))
	if len(events) != 4 || strings.Count(body, `"role"`) != 1 || !strings.Contains(events[2], `"delta":{"content":" there"}`) {
		t.Errorf("events %q: want role, Hello, there (role dropped), [DONE]", events)
	}
	if got := s.bodies()[1]["messages"].([]any); len(got) != 2 {
		t.Errorf("continuation messages %v", got)
	}
}

func TestResumedTextCompletionCarriesTheTextOrTokenIDs(t *testing.T) {
	text := func(s string, ids string) string {
		tok := ""
		if ids != "" {
			tok = `,"token_ids":` + ids
		}
		return `{"id":"cmpl-A","object":"text_completion","created":1,"model":"up","choices":[{"index":0,"text":"` + s + `"` + tok + `,"logprobs":null,"finish_reason":null}]}`
	}
	for _, tc := range []struct {
		name, prompt, ids, wantPrompt string
		resumed                       bool
	}{
		{"string prompt", `"Once"`, "", `"Once upon a"`, true},
		{"one-string list", `["Once"]`, "", `["Once upon a"]`, true},
		{"token ids with generated ids", `[5,6]`, "[7]", `[5,6,7,7]`, true},
		{"token ids without generated ids", `[5,6]`, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScripted(t, 2,
				[]string{text(" upon", tc.ids), text(" a", tc.ids), die},
				[]string{`{"id":"cmpl-B","object":"text_completion","created":2,"model":"up","choices":[{"index":0,"text":" time","logprobs":null,"finish_reason":"length"}]}`, "[DONE]"})
			h := newHarness(t, s.toml(""), nil)
			_, _, body := h.post("/v1/completions", `{"model":"m","stream":true,"max_tokens":3,"prompt":`+tc.prompt+`}`)
			bodies := s.bodies()
			if !tc.resumed {
				if len(bodies) != 1 || strings.Contains(body, "[DONE]") || !strings.Contains(body, "upstream_stream_error") {
					t.Fatalf("%d upstream requests, stream %s: want the terminal error", len(bodies), body)
				}
				if h.resumes("not_resumable") != 1 {
					t.Error("not_resumable not counted")
				}
				return
			}
			if len(bodies) != 2 {
				t.Fatalf("%d upstream requests", len(bodies))
			}
			if got, _ := json.Marshal(bodies[1]["prompt"]); string(got) != tc.wantPrompt {
				t.Errorf("continuation prompt %s, want %s", got, tc.wantPrompt)
			}
			if bodies[1]["max_tokens"] != float64(1) {
				t.Errorf("continuation max_tokens %v, want 1", bodies[1]["max_tokens"])
			}
			if _, ok := bodies[1]["continue_final_message"]; ok {
				t.Error("continue_final_message is a chat parameter")
			}
			if !strings.Contains(body, `{"id":"cmpl-A","object":"text_completion","created":1,"model":"up","choices":[{"index":0,"text":" time"`) ||
				!strings.HasSuffix(body, "data: [DONE]\n\n") {
				t.Errorf("stream %s", body)
			}
		})
	}
}

func TestStreamsThatCannotBeContinuedEndWithTheTerminalError(t *testing.T) {
	toolDelta := `{"id":"chatcmpl-A","object":"chat.completion.chunk","created":100,"model":"up-a","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get","arguments":"{\"ci"}}]},"finish_reason":null}]}`
	for _, tc := range []struct {
		name, req string
		first     []string
		outcome   string
		extra     string
	}{
		{"n > 1", `"n":2,`, []string{roleA, helloA, die}, "not_resumable", ""},
		{"logprobs", `"logprobs":true,"top_logprobs":2,`, []string{roleA, helloA, die}, "not_resumable", ""},
		{"json_schema", `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{}}},`, []string{roleA, helloA, die}, "not_resumable", ""},
		{"tool call in progress", `"tools":[{"type":"function","function":{"name":"get"}}],`, []string{roleA, toolDelta, die}, "not_resumable", ""},
		{"max_resumes reached", ``, []string{roleA, helloA, die}, "failed", ""},
		{"retry budget exhausted", ``, []string{roleA, helloA, die}, "failed", "[retry]\nbudget = 0\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The continuation, when one is sent, breaks as well: only
			// one resume is allowed, so the third engine is never asked.
			s := newScripted(t, 3, tc.first, []string{chunkB(`{"content":" there"}`, "null"), die},
				[]string{chunkB(`{"content":"!"}`, `"stop"`), "[DONE]"})
			h := newHarness(t, s.toml(tc.extra), nil)
			if tc.extra != "" {
				for h.srv.budget.Load().spend() {
				} // drain the starting burst
			}
			code, _, body := h.post("/v1/chat/completions", `{"model":"m","stream":true,`+tc.req+`"messages":[{"role":"user","content":"x"}]}`)
			if code != 200 {
				t.Fatalf("status %d", code)
			}
			events := sseEvents(strings.NewReader(body))
			if strings.Contains(body, "[DONE]") || len(events) == 0 || errorCode(t, events[len(events)-1]) != "upstream_stream_error" {
				t.Fatalf("stream %s: want the terminal error event and no [DONE]", body)
			}
			wantCalls := 1
			if tc.name == "max_resumes reached" {
				wantCalls = 2
			}
			if got := len(s.bodies()); got != wantCalls {
				t.Errorf("%d upstream requests, want %d", got, wantCalls)
			}
			if got := h.resumes(tc.outcome); got != 1 {
				t.Errorf("outcome %s counted %v times", tc.outcome, got)
			}
		})
	}
}

func TestResumeIsOffByDefault(t *testing.T) {
	s := newScripted(t, 2, []string{roleA, helloA, die}, []string{chunkB(`{"content":" there"}`, `"stop"`), "[DONE]"})
	h := newHarness(t, strings.Replace(s.toml(""), "resume_streams = true\n", "", 1), nil)
	_, _, body := h.post("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`)
	if strings.Contains(body, "[DONE]") || !strings.Contains(body, "upstream_stream_error") || len(s.bodies()) != 1 {
		t.Errorf("stream %s with %d upstream requests: want today's terminal error", body, len(s.bodies()))
	}
}

func TestRefusedContinuationEndsTheStreamWithoutBlamingTheEngine(t *testing.T) {
	var calls atomic.Int64
	h := func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		if calls.Add(1) == 1 {
			play(w, roleA, helloA, die)
			return
		}
		http.Error(w, `{"error":{"message":"continue_final_message is not supported"}}`, http.StatusBadRequest)
	}
	a, b := newEngine(t, h), newEngine(t, h)
	hs := newHarness(t, providers("a", a.URL, "b", b.URL)+"[[routes]]\nmodel = \"m\"\nresume_streams = true\ntargets = [{provider = \"a\"}, {provider = \"b\"}]\n", nil)
	_, _, body := hs.post("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`)
	events := sseEvents(strings.NewReader(body))
	if strings.Contains(body, "[DONE]") || errorCode(t, events[len(events)-1]) != "upstream_stream_error" ||
		!strings.Contains(events[len(events)-1], "HTTP 400") {
		t.Fatalf("stream %s: want the terminal error naming the refusal", body)
	}
	refused := "a"
	if a.hits.Load() == 1 {
		refused = "b"
	}
	if got := hs.counter("targets", refused, refused+"/m", "http_400"); got != 1 {
		t.Errorf("the refusing target's attempt counted %v times as http_400", got)
	}
	if got := hs.counter("targets", refused, refused+"/m", "stream_error"); got != 0 {
		t.Errorf("a refused continuation is not a stream error of its engine (counted %v)", got)
	}
}

func TestReadEventKeepsEventsWhole(t *testing.T) {
	long := strings.Repeat("x", 40<<10) // longer than the reader's buffer
	for _, tc := range []struct {
		name, in string
		want     []string
		end      error
	}{
		{"LF", "data: a\n\ndata: b\n\n", []string{"data: a\n\n", "data: b\n\n"}, io.EOF},
		{"CRLF and comments", ": ping\r\n\r\ndata: a\r\n\r\n", []string{": ping\r\n\r\n", "data: a\r\n\r\n"}, io.EOF},
		{"long line", "data: " + long + "\n\n", []string{"data: " + long + "\n\n"}, io.EOF},
		{"stray blank lines", "\n\ndata: a\n\n\n", []string{"data: a\n\n"}, io.EOF},
		{"last event without its blank line", "data: [DONE]\n", []string{"data: [DONE]\n"}, io.EOF},
		{"cut mid-line", "data: a\n\ndata: {\"par", []string{"data: a\n\n"}, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReaderSize(iotest.OneByteReader(strings.NewReader(tc.in)), 16)
			var ev []byte
			var got []string
			var err error
			for {
				if err = readEvent(br, &ev); err != nil {
					break
				}
				got = append(got, string(ev))
			}
			if !slices.Equal(got, tc.want) || err != tc.end {
				t.Errorf("events %q, end %v; want %q, %v", got, err, tc.want, tc.end)
			}
		})
	}
}

func TestABrokenContinuationIsResumedAgainWithinMaxResumes(t *testing.T) {
	s := newScripted(t, 3,
		[]string{roleA, helloA, worA, die},
		[]string{chunkB(`{"role":"assistant","content":""}`, "null"), chunkB(`{"content":"ld"}`, "null"), die},
		[]string{
			chunkB(`{"role":"assistant","content":" again"}`, `"length"`),
			`{"id":"chatcmpl-C","object":"chat.completion.chunk","created":300,"model":"up-c","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}`,
			"[DONE]",
		})
	h := newHarness(t, s.toml("[retry]\nmax_resumes = 2\n"), nil)
	_, _, body := h.post("/v1/chat/completions",
		`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`)
	var text strings.Builder
	ids := map[string]bool{}
	var usage string
	for _, e := range sseEvents(strings.NewReader(body)) {
		if e == "[DONE]" {
			continue
		}
		var c struct {
			ID      string
			Choices []struct{ Delta struct{ Content string } }
			Usage   json.RawMessage
		}
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatalf("event %q: %v", e, err)
		}
		ids[c.ID] = true
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
		}
		if len(c.Usage) > 0 {
			usage = string(c.Usage)
		}
	}
	if text.String() != " Hello world again" || len(ids) != 1 || !ids["chatcmpl-A"] || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Errorf("text %q, ids %v, stream %s", text.String(), ids, body)
	}
	if usage != `{"prompt_tokens":7,"completion_tokens":4,"total_tokens":11}` {
		t.Errorf("usage %s, want the original 7 prompt tokens and 3 + 1 completion tokens", usage)
	}
	bodies := s.bodies()
	if len(bodies) != 3 {
		t.Fatalf("%d upstream requests", len(bodies))
	}
	msgs := bodies[2]["messages"].([]any)
	last, _ := json.Marshal(msgs[len(msgs)-1])
	if len(msgs) != 2 || string(last) != `{"content":" Hello world","role":"assistant"}` || bodies[2]["max_tokens"] != float64(7) {
		t.Errorf("second continuation: messages %v, max_tokens %v", msgs, bodies[2]["max_tokens"])
	}
	if h.resumes("resumed") != 2 {
		t.Errorf("resumed %v times, want 2", h.resumes("resumed"))
	}
}

// A stream that fails over before its first byte (an engine answering
// 503, or one silent past first_byte) and then breaks after it on the
// engine that took over is resumed on a third: TestShortFirstTokenFailover's
// broken stream would have been whole on a resuming route.
func TestStreamFailedOverThenBrokenIsResumed(t *testing.T) {
	for _, first := range []string{unavailable, hang} {
		t.Run(first, func(t *testing.T) {
			s := newScripted(t, 3,
				[]string{first},
				[]string{roleA, helloA, die},
				[]string{chunkB(`{"role":"assistant","content":""}`, "null"), chunkB(`{"content":" world"}`, `"length"`), "[DONE]"})
			h := newHarness(t, s.toml("[timeouts]\nfirst_byte = \"100ms\"\n"), nil)
			code, _, body := h.post("/v1/chat/completions", `{"model":"m","stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
			var text strings.Builder
			for _, e := range sseEvents(strings.NewReader(body)) {
				var c struct {
					ID      string
					Error   json.RawMessage
					Choices []struct{ Delta struct{ Content string } }
				}
				if e == "[DONE]" {
					continue
				}
				if err := json.Unmarshal([]byte(e), &c); err != nil || c.Error != nil || c.ID != "chatcmpl-A" {
					t.Errorf("event %q (%v): want chunks of the first stream only", e, err)
				}
				for _, ch := range c.Choices {
					text.WriteString(ch.Delta.Content)
				}
			}
			if code != http.StatusOK || text.String() != " Hello world" || !strings.HasSuffix(body, "data: [DONE]\n\n") {
				t.Errorf("status %d, text %q, stream:\n%s", code, text.String(), body)
			}
			if got := s.calls.Load(); got != 3 {
				t.Errorf("%d upstream attempts, want 3 (the failover, the broken stream, its continuation)", got)
			}
			if h.resumes("resumed") != 1 {
				t.Errorf("resumed %v times, want 1", h.resumes("resumed"))
			}
		})
	}
}

func TestReadChunkAgreesWithTheDecoder(t *testing.T) {
	for _, raw := range []string{
		roleA, helloA,
		`{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"a \"quoted\"\nline \u00e9\ud83d\ude00"},"finish_reason":null}],"usage":null}`,
		`{"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}}`,
		`{"id":"x","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":0}}`,
		`{"id":"x","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}`,
		`{"id":"x","choices":[{"index":0,"delta":{"tool_calls":[]}}]}`,
		`{"id":"x","choices":[{"index":0,"delta":{"reasoning_content":"hmm"}}]}`,
		`{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":" the","token_ids":[791],"logprobs":null,"finish_reason":null}]}`,
		`{"id":"x","choices":[{"index":0,"delta":{"content":"first"}},{"index":1,"delta":{"content":"second"},"finish_reason":"length"}]}`,
		`{"error":{"message":"engine \"died\"","type":"InternalServerError","code":500}}`,
		`{"object":"error","message":"old shape","type":"BadRequestError","param":null,"code":400}`,
		`  { "id" : "spaced" , "choices" : [ { "delta" : { "content" : " x" } } ] }  `,
	} {
		var want struct {
			Object  string          `json:"object"`
			Error   json.RawMessage `json:"error"`
			Message string          `json:"message"`
			Choices []struct {
				Text  *string `json:"text"`
				Delta *struct {
					Content          *string         `json:"content"`
					ToolCalls        json.RawMessage `json:"tool_calls"`
					ReasoningContent *string         `json:"reasoning_content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
				TokenIDs     []int64 `json:"token_ids"`
			} `json:"choices"`
			Usage *usageCounts `json:"usage"`
		}
		if err := json.Unmarshal([]byte(raw), &want); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		var c chunkView
		readChunk([]byte(raw), &c)
		wantText, wantFinish, wantTool, wantReason := "", false, false, false
		var wantIDs []int64
		for i, ch := range want.Choices {
			wantFinish = wantFinish || ch.FinishReason != nil
			if ch.Delta != nil {
				wantTool = wantTool || (len(ch.Delta.ToolCalls) > 0 && string(ch.Delta.ToolCalls) != "[]")
				wantReason = wantReason || (ch.Delta.ReasoningContent != nil && *ch.Delta.ReasoningContent != "")
			}
			if i == 0 {
				if ch.Delta != nil && ch.Delta.Content != nil {
					wantText = *ch.Delta.Content
				} else if ch.Text != nil {
					wantText = *ch.Text
				}
				wantIDs = ch.TokenIDs
			}
		}
		gotIDs, _ := appendIDs(nil, c.ids)
		wantErr := len(want.Error) > 0 || want.Object == "error"
		if string(c.text) != wantText || c.finish != wantFinish || c.toolCall != wantTool || c.reasoning != wantReason ||
			c.isErr != wantErr || (c.usage != (want.Usage != nil)) || !slices.Equal(gotIDs, wantIDs) {
			t.Errorf("%s:\nscanner: %+v (text %q)\ndecoder: text %q finish %v tool %v reasoning %v error %v usage %v ids %v",
				raw, c, c.text, wantText, wantFinish, wantTool, wantReason, wantErr, want.Usage != nil, wantIDs)
		}
		if want.Usage != nil && (c.prompt != want.Usage.PromptTokens || c.completion != want.Usage.CompletionTokens) {
			t.Errorf("%s: usage %d/%d, want %+v", raw, c.prompt, c.completion, *want.Usage)
		}
		if wantErr {
			msg := want.Message
			var e struct{ Message string }
			if json.Unmarshal(want.Error, &e) == nil && e.Message != "" {
				msg = e.Message
			}
			if string(c.errMsg) != msg {
				t.Errorf("%s: error message %q, want %q", raw, c.errMsg, msg)
			}
		}
	}
}

func TestSilentEngineIsCutOffAfterResumeIdleAndResumed(t *testing.T) {
	var calls atomic.Int64
	cut := make(chan struct{})
	h := func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		if calls.Add(1) == 1 {
			play(w, roleA, helloA)
			<-r.Context().Done() // the engine stalls until the router gives up on it
			close(cut)
			return
		}
		play(w, chunkB(`{"role":"assistant","content":" there"}`, `"stop"`), "[DONE]")
	}
	a, b := newEngine(t, h), newEngine(t, h)
	hs := newHarness(t, providers("a", a.URL, "b", b.URL)+
		"[retry]\nresume_idle = \"50ms\"\n\n[[routes]]\nmodel = \"m\"\nresume_streams = true\ntargets = [{provider = \"a\"}, {provider = \"b\"}]\n", nil)
	_, _, body := hs.post("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`)
	if !strings.HasSuffix(body, "data: [DONE]\n\n") || !strings.Contains(body, `"delta":{"content":" there"}`) {
		t.Fatalf("stream %s: want the stalled stream continued", body)
	}
	select {
	case <-cut:
	case <-time.After(5 * time.Second):
		t.Fatal("the stalled engine's request was never cancelled")
	}
	if hs.resumes("resumed") != 1 {
		t.Errorf("resumed %v", hs.resumes("resumed"))
	}
}

// FuzzSpliceEvent feeds arbitrary events through the splice, first and
// continuation alike: no panic, and every rewritten continuation chunk is
// valid JSON with the first chunk's id and no role.
func FuzzSpliceEvent(f *testing.F) {
	for _, s := range []string{roleA, helloA, chunkB(`{"role":"assistant","content":"x"}`, `"stop"`), "[DONE]",
		`{"error":{"message":"x","code":500}}`, `{"object":"error","message":"y"}`,
		`{"id":"c","choices":[{"text":"a","token_ids":[1,2]}],"usage":{"prompt_tokens":3,"completion_tokens":1.5}}`,
		`{"id":"c","choices":[{"delta":{"role":"assistant","tool_calls":[{"index":0}]}}],"usage":{"prompt_tokens":9}}`} {
		f.Add([]byte("data: "+s+"\n\n"), false)
		f.Add([]byte("data: "+s+"\n\n"), true)
	}
	f.Fuzz(func(t *testing.T, ev []byte, rewrite bool) {
		sp := newSplice(true, nil)
		if rewrite {
			sp.id, sp.created, sp.model, sp.rewrite, sp.base = []byte(`"first"`), []byte(`1`), []byte(`"m"`), true, 2
		}
		out, done, broke := sp.event(ev)
		if !rewrite || out == nil || done || broke != "" {
			return
		}
		d := eventData(out)
		if !json.Valid(d) {
			t.Fatalf("rewrote %q into invalid JSON %q", ev, d)
		}
		var c struct {
			ID      json.RawMessage
			Choices []struct {
				Delta map[string]json.RawMessage
			}
		}
		if json.Unmarshal(d, &c) == nil {
			if len(c.ID) > 0 && string(c.ID) != `"first"` {
				t.Errorf("rewritten id %s", c.ID)
			}
			for _, ch := range c.Choices {
				if _, ok := ch.Delta["role"]; ok {
					t.Errorf("role kept in %s", d)
				}
			}
		}
	})
}

func TestOnlyStreamsAreResumed(t *testing.T) {
	var calls atomic.Int64
	h := func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "1000")
		fmt.Fprint(w, `{"id":"c1","choices":[`)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	a, b := newEngine(t, h), newEngine(t, h)
	hs := newHarness(t, providers("a", a.URL, "b", b.URL)+
		"[[routes]]\nmodel = \"m\"\nresume_streams = true\ntargets = [{provider = \"a\"}, {provider = \"b\"}]\n", nil)
	for _, path := range []string{"/v1/chat/completions", "/v1/embeddings"} {
		calls.Store(0)
		resp, err := hs.api.Client().Post(hs.api.URL+path, "application/json", strings.NewReader(`{"model":"m","input":"x","messages":[]}`))
		if err == nil {
			defer resp.Body.Close()
			_, err = io.ReadAll(resp.Body)
		}
		if err == nil {
			t.Errorf("%s: a truncated non-streaming body reached the client as if it were whole", path)
		}
		if calls.Load() != 1 {
			t.Errorf("%s: %d upstream requests; a non-streaming answer is never resumed", path, calls.Load())
		}
	}
	if hs.resumes("not_resumable")+hs.resumes("failed")+hs.resumes("resumed") != 0 {
		t.Error("non-streaming breaks were counted as stream resumes")
	}
}

func TestResumableStreamReleasesItsQueuedPrefillAtTheFirstEvent(t *testing.T) {
	first := make(chan struct{})
	finish := make(chan struct{})
	eng := newEngine(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		<-first
		play(w, roleA)
		select {
		case <-finish:
			play(w, "[DONE]")
		case <-r.Context().Done():
		}
	})
	h := newHarness(t, providers("a", eng.URL)+`
[[routes]]
model = "m"
strategy = "precise_cache_aware"
resume_streams = true
targets = [{provider = "a"}]
`, nil)
	// Registered after the harness, so it runs first: a failing check
	// must not leave the engine's handler holding the servers open.
	var once sync.Once
	end := func() { once.Do(func() { close(finish) }) }
	t.Cleanup(end)
	queued := func() uint64 { return h.srv.QueuedPrefill()["a/m"] }
	done := make(chan string, 1)
	go func() {
		_, _, body := h.post("/v1/chat/completions",
			`{"model":"m","stream":true,"messages":[{"role":"user","content":`+quote(strings.Repeat("abcd", 100))+`}]}`)
		done <- body
	}()
	testwait.For(t, 5*time.Second, "the pick queues the prompt's prefill", func() bool { return queued() == 100 })
	close(first)
	testwait.For(t, 5*time.Second, "the first event takes it off while the stream is open", func() bool { return queued() == 0 })
	end()
	if body := <-done; !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Errorf("stream %s", body)
	}
}
