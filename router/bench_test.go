package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/strategies"
)

// memEngine is an in-memory upstream: it answers every request with a
// canned completion (or SSE stream) without touching the network.
type memEngine struct{ sse bool }

var (
	cannedJSON = []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
	cannedSSE  = []byte("data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\n\ndata: [DONE]\n\n")
)

func (m memEngine) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	r.Body.Close()
	body, ct := cannedJSON, "application/json"
	if m.sse {
		body, ct = cannedSSE, "text/event-stream"
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {ct}},
		Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Request: r}, nil
}

const benchConfig = `
[[providers]]
name = "a"
api_base = "http://127.0.0.1:1"
[[providers]]
name = "b"
api_base = "http://127.0.0.1:2"
[[routes]]
model = "llama"
targets = [{provider = "a", model = "meta/llama-8b"}, {provider = "b", model = "meta/llama-8b"}]
[health]
enabled = false
`

const benchBody = `{"model":"llama","stream":%s,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Write a haiku about load balancers and warm caches."}]}`

func benchServer(b *testing.B, rt http.RoundTripper, extra string) *Server {
	return benchServerFrom(b, rt, benchConfig+extra)
}

func benchServerFrom(b *testing.B, rt http.RoundTripper, toml string) *Server {
	cfg, err := config.Parse("rolter.toml", []byte(toml), func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	s := New(Options{Transport: rt, Rand: strategies.NewRand(1)})
	if err := s.Apply(cfg); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkRequestPath measures the router's whole request path in
// process: auth, body read and validation, resolve, RouteContext, pick,
// model rewrite, proxying through an in-memory upstream and relaying the
// answer, metrics included.
//
// sse_resume is sse on a route with resume_streams: the stream is relayed
// event by event through a splice (nothing breaks, so nothing resumes).
func BenchmarkRequestPath(b *testing.B) {
	for _, v := range []struct {
		name  string
		sse   bool
		extra string
	}{{"json", false, ""}, {"sse", true, ""}, {"sse_resume", true, "[retry]\nresume_streams = true\n"}} {
		stream, name, flag := v.sse, v.name, "false"
		if stream {
			flag = "true"
		}
		b.Run(name, func(b *testing.B) {
			s := benchServer(b, memEngine{sse: stream}, v.extra)
			serveBenchBody(b, s.Handler(), strings.Replace(benchBody, "%s", flag, 1))
		})
	}
}

// BenchmarkRequestPathHTTP is the same path over real loopback HTTP on
// both sides: client → router → httptest upstream.
func BenchmarkRequestPathHTTP(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(cannedJSON)
	}))
	defer up.Close()
	cfg, err := config.Parse("rolter.toml", []byte(strings.ReplaceAll(strings.ReplaceAll(benchConfig,
		"http://127.0.0.1:1", up.URL), "http://127.0.0.1:2", up.URL)), func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	s := New(Options{Rand: strategies.NewRand(1)})
	if err := s.Apply(cfg); err != nil {
		b.Fatal(err)
	}
	api := httptest.NewServer(s.Handler())
	defer api.Close()
	client := api.Client()
	body := strings.Replace(benchBody, "%s", "false", 1)
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Post(api.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// BenchmarkExtractPrompt compares the single-pass scanner with the
// encoding/json reading it replaced, on a multi-turn chat with an image
// part and a tool call (the shapes the router digests).
func BenchmarkExtractPrompt(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"model":"llama","stream":true,"messages":[{"role":"system","content":"You are a helpful assistant.\nAnswer briefly."}`)
	for i := range 8 {
		fmt.Fprintf(&sb, `,{"role":"user","content":[{"type":"text","text":"Question %d: %s"},{"type":"image_url","image_url":{"url":"https://example.com/%d.png"}}]}`,
			i, strings.Repeat("how do warm caches help? ", 20), i)
		fmt.Fprintf(&sb, `,{"role":"assistant","content":null,"tool_calls":[{"id":"c%d","type":"function","function":{"name":"lookup","arguments":"{\"q\":%d}"}}]}`, i, i)
		fmt.Fprintf(&sb, `,{"role":"tool","tool_call_id":"c%d","content":"result %d"}`, i, i)
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	if !json.Valid(body) {
		b.Fatal("benchmark body is not valid JSON")
	}
	b.Run("scanner", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			extractValidated(body, true)
		}
	})
	b.Run("decoder", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			x := extractor{d: newDigest()}
			x.decode(body)
			_ = string(x.prompt)
		}
	})
}

// serveBenchBody posts body to h once per benchmark iteration, failing on
// any answer but 200.
func serveBenchBody(b *testing.B, h http.Handler, body string) {
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}
