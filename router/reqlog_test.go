package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// syncBuffer is a bytes.Buffer the router's goroutines may log into.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what was logged so far.
func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// requestLines returns the decoded "request" lines logged so far.
func (s *syncBuffer) requestLines(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", l)
		}
		if m["msg"] == "request" {
			out = append(out, m)
		}
	}
	return out
}

// streamWithUsage answers with an SSE stream whose final event carries
// the usage, as vLLM does for stream_options.include_usage.
func streamWithUsage(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"finish_reason\":null}],\"usage\":null}\n\n")
	fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"length\"}],\"usage\":null}\n\n")
	fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":2,\"total_tokens\":13,\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\n")
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// A streamed chat gets one request line with the key's name (never its
// secret), the target, the usage from the stream's last event and no
// prompt text.
func TestRequestLogLine(t *testing.T) {
	eng := newEngine(t, streamWithUsage)
	var logs syncBuffer
	h := newHarnessWith(t, providers("a", eng.URL)+`
[[routes]]
model = "m"
targets = [{provider = "a", model = "meta/m"}]
[[keys]]
name = "team-blue"
secret_env = "BLUE_KEY"
[observability]
request_log = true
`, map[string]string{"BLUE_KEY": "sk-very-secret"}, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	code, hdr, body := h.post("/v1/chat/completions",
		`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"the secret plan"}]}`,
		"Authorization", "Bearer sk-very-secret")
	if code != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("status %d: %s", code, body)
	}
	lines := logs.requestLines(t)
	if len(lines) != 1 {
		t.Fatalf("%d request lines, want 1", len(lines))
	}
	l := lines[0]
	for k, want := range map[string]any{
		"request_id": hdr.Get("X-Request-Id"), "key": "team-blue", "model": "m", "route": "m", "target": "a/meta/m",
		"attempts": 1.0, "status": 200.0, "stream": true, "prompt_tokens": 11.0, "completion_tokens": 2.0, "cached_tokens": 8.0,
		"bytes_out": float64(len(body)),
	} {
		if l[k] != want {
			t.Errorf("%s = %v, want %v", k, l[k], want)
		}
	}
	if fr, _ := l["finish_reasons"].([]any); len(fr) != 1 || fr[0] != "length" {
		t.Errorf("finish_reasons = %v", l["finish_reasons"])
	}
	for _, k := range []string{"latency_ms", "ttft_ms", "bytes_in"} {
		if _, ok := l[k]; !ok {
			t.Errorf("%s missing from %v", k, l)
		}
	}
	raw, _ := json.Marshal(l)
	if strings.Contains(string(raw), "sk-very-secret") || strings.Contains(string(raw), "secret plan") {
		t.Errorf("the request line leaks the key or the prompt: %s", raw)
	}
}

// Sampling keeps a fraction of successful requests, but every failed one
// is logged; without request_log = true nothing is.
func TestRequestLogSampling(t *testing.T) {
	eng := newEngine(t, okChat)
	for _, tc := range []struct {
		name, section string
		want          int
	}{
		{"sampled out", "[observability]\nrequest_log = true\nrequest_log_sample_ratio = 0.0\n", 1},
		{"off by default", "", 0},
		{"full", "[observability]\nrequest_log = true\n", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncBuffer
			h := newHarnessWith(t, providers("a", eng.URL)+"[[routes]]\nmodel = \"m\"\ntargets = [{provider = \"a\"}]\n"+tc.section, nil,
				func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
			for range 3 {
				if code, _, _ := h.chat("m"); code != 200 {
					t.Fatalf("status %d", code)
				}
			}
			if code, _, _ := h.chat("nope"); code != 404 {
				t.Fatalf("unknown model: status %d", code)
			}
			if got := len(logs.requestLines(t)); got != tc.want {
				t.Errorf("%d request lines, want %d", got, tc.want)
			}
		})
	}
}

// routing_headers = false hides who served from the client; the request
// id is still returned.
func TestRoutingHeadersHidden(t *testing.T) {
	eng := newEngine(t, okChat)
	h := newHarnessWith(t, providers("a", eng.URL)+"[[routes]]\nmodel = \"m\"\ntargets = [{provider = \"a\"}]\n[observability]\nrouting_headers = false\n",
		nil, func(o *Options) { o.NodeID = "node-a" })
	code, hdr, _ := h.chat("m", "x-request-id", "abc")
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	for _, k := range []string{"X-Rolter-Target", "X-Rolter-Node-Id", "X-Rolter-Attempts"} {
		if v := hdr.Get(k); v != "" {
			t.Errorf("%s = %q with routing_headers = false", k, v)
		}
	}
	if hdr.Get("X-Request-Id") != "abc" {
		t.Errorf("x-request-id %q, want the client's abc", hdr.Get("X-Request-Id"))
	}
	// An error the router makes itself carries the id too; a request id
	// that is not a sane token is replaced.
	code, hdr, _ = h.chat("nope", "x-request-id", "bad id\twith spaces")
	if code != 404 || len(hdr.Get("X-Request-Id")) != requestIDLen {
		t.Errorf("unknown model: %d, x-request-id %q", code, hdr.Get("X-Request-Id"))
	}
}

// Every stage of a proxied request is timed, and the pick is timed per
// strategy.
func TestStageHistograms(t *testing.T) {
	eng := newEngine(t, okChat)
	h := newHarness(t, providers("a", eng.URL)+"[[routes]]\nmodel = \"m\"\nstrategy = \"round_robin\"\ntargets = [{provider = \"a\"}]\n", nil)
	if code, _, _ := h.chat("m"); code != 200 {
		t.Fatalf("status %d", code)
	}
	families, err := h.srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			counts[f.GetName()+"/"+labelValue(m)] = m.GetHistogram().GetSampleCount()
		}
	}
	for _, st := range stageNames {
		if counts["rolter_router_stage_seconds/"+st] == 0 {
			t.Errorf("stage %s not observed (%v)", st, counts)
		}
	}
	if counts["rolter_router_pick_seconds/round_robin"] != 1 {
		t.Errorf("round_robin pick time observed %d times, want 1", counts["rolter_router_pick_seconds/round_robin"])
	}
}

func labelValue(m *dto.Metric) string {
	if len(m.GetLabel()) == 0 {
		return ""
	}
	return m.GetLabel()[0].GetValue()
}

// The usage reader finds the last usage object and the finish reasons in
// a JSON body or a stream tail, and keeps only the tail of long streams.
func TestParseUsage(t *testing.T) {
	u := parseUsage(cannedJSON)
	if !u.reported || u.prompt != 3 || u.completion != 1 || u.cachedReported || len(u.finish) != 1 || u.finish[0] != "stop" {
		t.Errorf("JSON body: %+v", u)
	}
	if u := parseUsage(cannedSSE); u.reported || len(u.finish) != 0 {
		t.Errorf("a stream without usage reports %+v", u)
	}
	var tap usageTap
	filler := bytes.Repeat([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n"), 1000)
	tap.write(filler)
	tap.write([]byte(`data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":1000}}` + "\n\ndata: [DONE]\n\n"))
	if got := tap.tail(); len(got) != tapSize || !bytes.HasSuffix(got, []byte("[DONE]\n\n")) {
		t.Fatalf("tail of %d bytes", len(got))
	}
	if u := parseUsage(tap.tail()); !u.reported || u.prompt != 7 || u.completion != 1000 {
		t.Errorf("long stream: %+v", u)
	}
}
