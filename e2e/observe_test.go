//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/rolter/rolter/internal/testwait"
)

// TestObservabilityOfAStreamedChat runs a real `rolter router
// --standalone --log-format json` in front of a sim engine, with
// [tracing] pointed at an in-process OTLP receiver, and checks what an
// operator sees of one streamed chat: the routing headers, the JSON
// request log line with the usage tokens of the stream, and the trace.
func TestObservabilityOfAStreamedChat(t *testing.T) {
	bin := BuildRolter(t)
	bin.Env = append(bin.Env, "E2E_OBSERVE_KEY=sk-observe-secret")
	dir := t.TempDir()
	engine := StartSim(t, bin, "sim", dir)

	var mu sync.Mutex
	spans := map[string]int{}
	var spanIDs []string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					spans[s.Name]++
					for _, a := range s.Attributes {
						if a.Key == "rolter.request_id" {
							spanIDs = append(spanIDs, a.Value.GetStringValue())
						}
					}
				}
			}
		}
		mu.Unlock()
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	defer recv.Close()

	toml := fmt.Sprintf(`[[providers]]
name = "e0"
api_base = %q

[[routes]]
model = "chat"
targets = [{ provider = "e0", model = %q }]

[[keys]]
name = "observer"
secret_env = "E2E_OBSERVE_KEY"

[observability]
request_log = true

[tracing]
endpoint = %q
`, engine, SimModel, recv.URL)
	cfgPath := filepath.Join(dir, "rolter.toml")
	if err := os.WriteFile(cfgPath, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := FreeAddrs(t, 2)
	proc := Start(t, bin, "router", dir, "router", "--standalone", "--config", cfgPath, "--http", addrs[0],
		"--admin", addrs[1], "--log-format", "json", "--node-id", "observer-router")
	api := "http://" + addrs[0]
	if err := testwait.Poll(30*time.Second, 50*time.Millisecond, func() error {
		code, _, err := Do(context.Background(), http.MethodGet, "http://"+addrs[1]+"/readyz", "", "")
		if err == nil && code != 200 {
			err = fmt.Errorf("readyz %d", code)
		}
		return err
	}); err != nil {
		t.Fatalf("router: %v\n%s", err, proc.Tail(2000))
	}

	body := `{"model":"chat","stream":true,"stream_options":{"include_usage":true},"max_tokens":8,` +
		`"messages":[{"role":"user","content":"tell me the launch codes"}]}`
	req, _ := http.NewRequest(http.MethodPost, api+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk-observe-secret")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "e2e-observe-1")
	resp, err := Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	events := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			events++
		}
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || events < 2 {
		t.Fatalf("status %d, %d events", resp.StatusCode, events)
	}
	for k, want := range map[string]string{
		"X-Request-Id": "e2e-observe-1", "X-Rolter-Target": "e0/" + SimModel,
		"X-Rolter-Node-Id": "observer-router", "X-Rolter-Attempts": "1",
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}

	var line map[string]any
	if err := testwait.Poll(10*time.Second, 50*time.Millisecond, func() error {
		b, err := os.ReadFile(proc.Log)
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(b), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "request" && m["request_id"] == "e2e-observe-1" {
				line = m
				return nil
			}
		}
		return fmt.Errorf("no request line for e2e-observe-1")
	}); err != nil {
		t.Fatalf("%v\n%s", err, proc.Tail(2000))
	}
	for k, want := range map[string]any{"key": "observer", "model": "chat", "route": "chat",
		"target": "e0/" + SimModel, "attempts": 1.0, "status": 200.0, "stream": true} {
		if line[k] != want {
			t.Errorf("request line %s = %v, want %v (%v)", k, line[k], want, line)
		}
	}
	prompt, _ := line["prompt_tokens"].(float64)
	completion, _ := line["completion_tokens"].(float64)
	if prompt <= 0 || completion <= 0 || completion > 8 {
		t.Errorf("usage tokens prompt %v completion %v, want the stream's usage (≤ 8 completion tokens): %v", prompt, completion, line)
	}
	for _, k := range []string{"ttft_ms", "latency_ms", "bytes_in", "bytes_out", "trace_id"} {
		if _, ok := line[k]; !ok {
			t.Errorf("request line lacks %s: %v", k, line)
		}
	}
	raw, _ := os.ReadFile(proc.Log)
	if strings.Contains(string(raw), "sk-observe-secret") || strings.Contains(string(raw), "launch codes") {
		t.Error("the router's log holds the key secret or the prompt")
	}

	// The batch exporter sends within its 5 s schedule.
	if err := testwait.Poll(20*time.Second, 100*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if spans["route"] < 1 || spans["pick"] < 1 || spans["attempt"] < 1 {
			return fmt.Errorf("spans so far %v", spans)
		}
		for _, id := range spanIDs {
			if id == "e2e-observe-1" {
				return nil
			}
		}
		return fmt.Errorf("no route span with the request id (%v)", spanIDs)
	}); err != nil {
		t.Fatal(err)
	}
}
