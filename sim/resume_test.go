package sim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rolter/rolter/sim/tokenizer"
)

// lockedBuffer is a generation log the test reads while handlers write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines(t *testing.T) []Generation {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Generation
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		if line == "" {
			continue
		}
		var g Generation
		if err := json.Unmarshal([]byte(line), &g); err != nil {
			t.Fatalf("generation log line %q: %v", line, err)
		}
		out = append(out, g)
	}
	return out
}

func TestContinueFinalMessageContinuesInsteadOfAnswering(t *testing.T) {
	_, url := startSim(t, nil, nil)
	user := map[string]any{"role": "user", "content": "tell me"}
	usage := func(body map[string]any) int {
		t.Helper()
		resp, b := post(t, url+"/v1/chat/completions", body)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		var c struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			}
		}
		_ = json.Unmarshal(b, &c)
		return c.Usage.PromptTokens
	}
	partial := tokenizer.Text(3, 4)
	answer := usage(map[string]any{"messages": []any{user}, "max_tokens": 2})
	continued := usage(map[string]any{"messages": []any{user, map[string]any{"role": "assistant", "content": partial}},
		"continue_final_message": true, "add_generation_prompt": false, "max_tokens": 2})
	if continued != answer+4 {
		t.Errorf("continued prompt is %d tokens, want the answer's prompt %d + the 4 partial tokens", continued, answer)
	}
	replied := usage(map[string]any{"messages": []any{user, map[string]any{"role": "assistant", "content": partial}}, "max_tokens": 2})
	if replied == continued {
		t.Error("without continue_final_message the assistant message must be closed and answered")
	}
	resp, b := post(t, url+"/v1/chat/completions", map[string]any{"messages": []any{user},
		"continue_final_message": true, "add_generation_prompt": true})
	if resp.StatusCode != 400 || !strings.Contains(string(b), "continue_final_message") {
		t.Errorf("both switches on: %d %s, want 400 like vLLM", resp.StatusCode, b)
	}
}

func TestDieAfterTokensAndTheGenerationLog(t *testing.T) {
	var log lockedBuffer
	s, url := startSim(t, func(c *Config) { c.Faults.DieRate, c.Faults.DieAfterTokens = 1, 5 }, nil)
	s.LogGenerations(&log)
	b, _ := json.Marshal(map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}, "max_tokens": 20, "stream": true})
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set("X-Request-Id", "req-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	events := sse(t, resp.Body)
	resp.Body.Close()
	if len(events) != 5 || slices.Contains(events, "[DONE]") {
		t.Fatalf("%d events %q: want exactly 5 tokens, then the connection dies", len(events), events)
	}
	var text strings.Builder
	for _, e := range events {
		var c struct {
			Choices []struct{ Delta struct{ Content string } }
		}
		_ = json.Unmarshal([]byte(e), &c)
		text.WriteString(c.Choices[0].Delta.Content)
	}
	gens := log.lines(t)
	if len(gens) != 1 {
		t.Fatalf("generation log %+v", gens)
	}
	g := gens[0]
	if g.RequestID != "req-1" || g.Outcome != "died" || g.Tokens != 5 || g.Text != text.String() {
		t.Errorf("logged %+v; the client got %q", g, text.String())
	}
	s.setFaults(Faults{})
	cont, _ := json.Marshal(map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"},
		map[string]any{"role": "assistant", "content": g.Text}}, "continue_final_message": true, "add_generation_prompt": false, "max_tokens": 3})
	req, _ = http.NewRequest(http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(cont))
	req.Header.Set("X-Request-Id", "req-1")
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if gens = log.lines(t); len(gens) != 2 || !gens[1].Continued || gens[1].ContinuedText != g.Text ||
		gens[1].PromptTokens != g.PromptTokens+5 || gens[1].Outcome != "done" {
		t.Errorf("continuation logged %+v after %+v", gens[len(gens)-1], g)
	}
	if resp, body := post(t, url+"/sim/faults", map[string]any{"die_after_tokens": -1}); resp.StatusCode != 400 {
		t.Errorf("negative die_after_tokens: %d %s", resp.StatusCode, body)
	}
}
