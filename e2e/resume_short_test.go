package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestShortResumeStreams is scenario 17, small: 3 instant
// sims, one killing half its streams after 5 tokens, 60 openai-go
// streams on a resume_streams route.
func TestShortResumeStreams(t *testing.T) {
	const maxTokens = 12
	providers, targets, logs := resumeFleet(t, 3, "--fault-die-rate", "0.5", "--fault-die-after-tokens", "5")
	r := standalone(t, providers+fmt.Sprintf("[retry]\nbudget = 1.0\n\n[[routes]]\nmodel = \"chat\"\nresume_streams = true\ntargets = [%s]\n", targets))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := ResumeRun(ctx, r.API, "chat", "short", 60, 4, maxTokens)
	gens, err := ReadGenerations(logs...)
	if err != nil {
		t.Fatal(err)
	}
	chk := CheckSplices(run.Streams, gens, maxTokens)
	t.Logf("60 streams: %d errors, %d whole, %d resumed", run.Errors, chk.Whole, chk.Resumed)
	if run.Errors != 0 {
		t.Errorf("%d client-visible errors: %q", run.Errors, run.FirstErrors)
	}
	for _, p := range chk.Problems {
		t.Error(p)
	}
	if chk.Resumed == 0 || chk.Whole+chk.Resumed != 60 {
		t.Errorf("%d whole + %d resumed of 60", chk.Whole, chk.Resumed)
	}
}

// TestShortResumeTextCompletions resumes streamed text completions with a
// string prompt on `rolter sim` processes: the continuation's prompt is
// the original text followed by what the dying engine sent.
func TestShortResumeTextCompletions(t *testing.T) {
	const n, maxTokens = 30, 10
	providers, targets, logs := resumeFleet(t, 2, "--fault-die-rate", "1", "--fault-die-after-tokens", "4")
	r := standalone(t, providers+fmt.Sprintf("[retry]\nbudget = 1.0\n\n[breaker]\nfailures = 1000\n\n[[routes]]\nmodel = \"text\"\nresume_streams = true\ntargets = [%s]\n", targets))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	texts := map[string]string{}
	for i := range n {
		id := fmt.Sprintf("text-%d", i)
		body := fmt.Sprintf(`{"model":"text","stream":true,"max_tokens":%d,"prompt":"Once upon a time %d"}`, maxTokens, i)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.API+"/v1/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var text strings.Builder
		done := false
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			d, ok := strings.CutPrefix(sc.Text(), "data: ")
			switch {
			case !ok:
			case d == "[DONE]":
				done = true
			default:
				var c struct {
					Choices []struct{ Text string }
					Error   json.RawMessage
				}
				if err := json.Unmarshal([]byte(d), &c); err != nil || len(c.Error) > 0 {
					t.Fatalf("%s: event %q", id, d)
				}
				for _, ch := range c.Choices {
					text.WriteString(ch.Text)
				}
			}
		}
		resp.Body.Close()
		if !done {
			t.Fatalf("%s: no [DONE]", id)
		}
		texts[id] = text.String()
	}
	gens, err := ReadGenerations(logs...)
	if err != nil {
		t.Fatal(err)
	}
	resumed := 0
	for id, text := range texts {
		lines := gens[id]
		var want strings.Builder
		for _, g := range lines {
			want.WriteString(g.Text)
		}
		if text != want.String() {
			t.Errorf("%s: client text %q, engines sent %q", id, text, want.String())
		}
		if len(lines) == 2 {
			resumed++
			if lines[1].PromptTokens != lines[0].PromptTokens+lines[0].Tokens {
				t.Errorf("%s: continuation prompt %d tokens, want %d + %d", id, lines[1].PromptTokens, lines[0].PromptTokens, lines[0].Tokens)
			}
		}
	}
	t.Logf("%d text completion streams, %d resumed", n, resumed)
	if resumed == 0 {
		t.Error("no stream was resumed")
	}
}

// loggedSim starts an instant `rolter sim` writing its generation log
// (--generation-log) with the given fault flags; it returns the engine's
// URL and the log's path.
func loggedSim(t *testing.T, name string, faults ...string) (url, log string) {
	t.Helper()
	dir := t.TempDir()
	log = filepath.Join(dir, name+".generations")
	url, _ = StartSimArgs(t, SharedRolter(t, false), "sim-"+name, dir, append([]string{"--instant", "--generation-log", log}, faults...)...)
	return url, log
}

// resumeFleet starts n logged sims e0..en-1, e0 with the dying flags; it
// returns their [[providers]] entries, the route's target list and the
// generation logs.
func resumeFleet(t *testing.T, n int, dying ...string) (providers, targets string, logs []string) {
	t.Helper()
	var b strings.Builder
	var ts []string
	for i := range n {
		var faults []string
		if i == 0 {
			faults = dying
		}
		name := fmt.Sprintf("e%d", i)
		url, log := loggedSim(t, name, faults...)
		logs = append(logs, log)
		fmt.Fprintf(&b, "[[providers]]\nname = %q\napi_base = %q\n\n", name, url)
		ts = append(ts, fmt.Sprintf("{ provider = %q, model = %q }", name, SimModel))
	}
	return b.String(), strings.Join(ts, ", "), logs
}
