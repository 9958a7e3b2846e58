package router

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/rolter/rolter/strategies"
)

// tokenBody is a completions request whose prompt is n token ids.
func tokenBody(n int) []byte {
	b := []byte(`{"model":"llama","prompt":[`)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(i*7919%128000), 10)
	}
	return append(b, `],"max_tokens":8}`...)
}

// BenchmarkLongPrompt is the router's reading of a long token-id prompt:
// validation, the model's span, the ids and their block keys, from the
// body (json) or from the x-rolter-vllm-token-ids header (header). MB/s
// is of the body (or header) bytes.
func BenchmarkLongPrompt(b *testing.B) {
	for _, n := range []int{8 << 10, 32 << 10, 128 << 10} {
		body := tokenBody(n)
		b.Run(fmt.Sprintf("json/%dk", n>>10), func(b *testing.B) {
			var rc strategies.RouteContext
			hdr := http.Header{}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				req, err := parseRequest(body)
				if err != nil {
					b.Fatal(err)
				}
				if err := fillFromRequest(&rc, hdr, &req, "", allOfThePrompt); err != nil {
					b.Fatal(err)
				}
				if len(rc.TokenIDs) != n || len(rc.BlockKeys) != n/blockSize {
					b.Fatalf("%d ids, %d keys", len(rc.TokenIDs), len(rc.BlockKeys))
				}
			}
		})
		ids := string(body[strings.IndexByte(string(body), '[')+1 : strings.IndexByte(string(body), ']')])
		small := []byte(`{"model":"llama","prompt":"hi","max_tokens":8}`)
		b.Run(fmt.Sprintf("header/%dk", n>>10), func(b *testing.B) {
			var rc strategies.RouteContext
			hdr := http.Header{"X-Rolter-Vllm-Token-Ids": {ids}}
			b.SetBytes(int64(len(ids)))
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				if err := fillRouteContext(&rc, hdr, small, true, "llama", ""); err != nil {
					b.Fatal(err)
				}
				if len(rc.TokenIDs) != n {
					b.Fatalf("%d ids", len(rc.TokenIDs))
				}
			}
		})
	}
}

// chatWordsBody is a chat request whose one user message is n words
// ("word0 word1 …", as `rolter bench overhead --prompt-words` sends).
func chatWordsBody(n int) []byte {
	b := []byte(`{"model":"llama","messages":[{"role":"user","content":"`)
	for i := range n {
		b = append(b, "word"...)
		b = strconv.AppendUint(b, uint64(i), 10)
		b = append(b, ' ')
	}
	return append(b, `"}],"max_tokens":8}`...)
}

// BenchmarkLongChat is the router's reading of a chat with one long user
// message: validation, the model's span, the bounded prompt text and, for
// consistent_hash, the digest of the whole conversation (cache_aware
// routes on the text alone: the -nodigest cases). MB/s is of the body.
func BenchmarkLongChat(b *testing.B) {
	for _, words := range []int{10_000, 100_000} {
		body := chatWordsBody(words)
		for _, digest := range []bool{true, false} {
			name := fmt.Sprintf("%dk-words", words/1000)
			if !digest {
				name += "-nodigest"
			}
			b.Run(name, func(b *testing.B) {
				var rc strategies.RouteContext
				hdr := http.Header{}
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				defer reportCPU(b)()
				for b.Loop() {
					req, err := parseRequest(body)
					if err != nil {
						b.Fatal(err)
					}
					if err := fillFromRequest(&rc, hdr, &req, "", promptReads{digest: digest, text: true}); err != nil {
						b.Fatal(err)
					}
					if rc.PromptLen != len(body)-len(`{"model":"llama","messages":[{"role":"user","content":""}],"max_tokens":8}`) {
						b.Fatalf("prompt of %d bytes", rc.PromptLen)
					}
				}
			})
		}
	}
}

// BenchmarkLongPromptRequest is a whole request with a 100k-token-id
// prompt through a precise_cache_aware route, in process (an in-memory
// upstream): everything the router does for it but the sockets.
func BenchmarkLongPromptRequest(b *testing.B) {
	benchWholeRequest(b, "precise_cache_aware", "/v1/completions", string(tokenBody(100_000)))
}

// BenchmarkLongChatRequest is a whole request with a 100k-word chat
// through a cache_aware route, in process, as BenchmarkLongPromptRequest.
func BenchmarkLongChatRequest(b *testing.B) {
	benchWholeRequest(b, "cache_aware", "/v1/chat/completions", string(chatWordsBody(100_000)))
}

// BenchmarkLongPromptFastRequest is BenchmarkLongPromptRequest on the
// fasthttp front's handler: each iteration puts the body in the request's
// buffer (as fasthttp's server reads it off the connection) and serves it.
func BenchmarkLongPromptFastRequest(b *testing.B) {
	benchFastRequest(b, "precise_cache_aware", "/v1/completions", tokenBody(100_000))
}

// BenchmarkLongChatFastRequest is BenchmarkLongChatRequest on the fasthttp
// front's handler, as BenchmarkLongPromptFastRequest.
func BenchmarkLongChatFastRequest(b *testing.B) {
	benchFastRequest(b, "cache_aware", "/v1/chat/completions", chatWordsBody(100_000))
}

// benchFastRequest is benchWholeRequest through serveFast.
func benchFastRequest(b *testing.B, strategy, path string, body []byte) {
	cfg := strings.Replace(benchConfig, "[[routes]]\nmodel = \"llama\"\n", "[[routes]]\nmodel = \"llama\"\nstrategy = \""+strategy+"\"\n", 1)
	s := benchServerFrom(b, memEngine{}, cfg)
	var ctx fasthttp.RequestCtx
	ctx.Init(&fasthttp.Request{}, nil, nil)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		ctx.Request.Reset()
		ctx.Response.Reset()
		ctx.Request.Header.SetMethod(http.MethodPost)
		ctx.Request.SetRequestURI(path)
		ctx.Request.Header.SetContentType("application/json")
		ctx.Request.SetBody(body)
		s.serveFast(&ctx)
		if code := ctx.Response.StatusCode(); code != 200 {
			b.Fatalf("status %d: %s", code, ctx.Response.Body())
		}
	}
}

// benchWholeRequest sends body to path through a route of strategy, in
// process, once per iteration, and fails on any answer but 200.
func benchWholeRequest(b *testing.B, strategy, path, body string) {
	cfg := strings.Replace(benchConfig, "[[routes]]\nmodel = \"llama\"\n", "[[routes]]\nmodel = \"llama\"\nstrategy = \""+strategy+"\"\n", 1)
	s := benchServerFrom(b, memEngine{}, cfg)
	h := s.Handler()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

// reportCPU adds the process's CPU time per operation (user + system, GC
// included) to b's results as cpu-µs/op: on a shared machine wall-clock
// ns/op counts the time other processes held the CPU, this does not.
// Call as `defer reportCPU(b)()` before the loop. Where the system has no
// reading of it (processCPU), the metric is left out.
func reportCPU(b *testing.B) func() {
	start, ok := processCPU()
	return func() {
		end, _ := processCPU()
		if ok && b.N > 0 {
			b.ReportMetric(float64(end-start)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
		}
	}
}
