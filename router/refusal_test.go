package router

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/certs/certstest"
	"github.com/rolter/rolter/internal/testwait"
)

// A header over max_header_bytes gets the OpenAI error on either front,
// over TLS too, and on a keep-alive connection's later request; an
// engine's own 431 still reaches the client as the engine wrote it.
func TestHeaderOverTheLimitGetsTheOpenAIError(t *testing.T) {
	const limits = "\n[limits]\nmax_header_bytes = 4096\n"
	padded := "X-Padding: " + strings.Repeat("p", 16<<10) + "\r\n"
	request := func(extra string) string {
		return "POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n" + extra +
			"Content-Length: " + fmt.Sprint(len(chatHi)) + "\r\n\r\n" + chatHi
	}
	// read reads one answer off br: its status, content type and body.
	read := func(t *testing.T, br *bufio.Reader) (int, string, string) {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("the answer's body: %v", err)
		}
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	want431 := func(t *testing.T, code int, ct, body string) {
		t.Helper()
		if code != http.StatusRequestHeaderFieldsTooLarge || ct != "application/json" ||
			errorCode(t, body) != "request_header_too_large" {
			t.Fatalf("%d %q %s: want 431 request_header_too_large", code, ct, body)
		}
	}
	for _, fr := range fronts {
		t.Run(fr.name+"/the second request of a connection", func(t *testing.T) {
			eng := newEngine(t, okChat)
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin")+limits, nil, nil, nil)
			c, err := net.Dial("tcp", strings.TrimPrefix(f.base, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			if _, err := io.WriteString(c, request("")); err != nil {
				t.Fatal(err)
			}
			if code, _, body := read(t, br); code != http.StatusOK {
				t.Fatalf("first request: %d %s", code, body)
			}
			if _, err := io.WriteString(c, request(padded)); err != nil {
				t.Fatal(err)
			}
			code, ct, body := read(t, br)
			want431(t, code, ct, body)
		})
		t.Run(fr.name+"/TLS", func(t *testing.T) {
			ca := certstest.NewCA(t, "front")
			leaf := ca.Valid(t, "router")
			cert, err := tls.LoadX509KeyPair(leaf.Cert, leaf.Key)
			if err != nil {
				t.Fatal(err)
			}
			eng := newEngine(t, okChat)
			client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin")+limits, nil, func(ln net.Listener) net.Listener {
				return tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})
			}, client)
			code, h, body := f.post(t.Context(), chatHi, "X-Padding", strings.Repeat("p", 16<<10))
			want431(t, code, h.Get("Content-Type"), body)
			if code, _, body := f.post(t.Context(), chatHi); code != http.StatusOK {
				t.Fatalf("a request under the limit over TLS: %d %s", code, body)
			}
		})
		t.Run(fr.name+"/an engine's own 431", func(t *testing.T) {
			eng := newEngine(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
				http.Error(w, "431 Request Header Fields Too Large", http.StatusRequestHeaderFieldsTooLarge)
			})
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin")+limits, nil, nil, nil)
			code, h, body := f.post(t.Context(), chatHi)
			if code != http.StatusRequestHeaderFieldsTooLarge || body != "431 Request Header Fields Too Large\n" ||
				h.Get("Content-Type") != "text/plain; charset=utf-8" {
				t.Fatalf("%d %q %q: want the engine's answer as it wrote it", code, h.Get("Content-Type"), body)
			}
		})
	}
}

// A malformed request gets the OpenAI error on either front.
// secretKey is an API key a malformed request carries.
const secretKey = "sk-never-echo-this-key"

func TestAMalformedRequestGetsTheOpenAIError(t *testing.T) {
	for _, fr := range fronts {
		for _, tc := range []struct{ name, request string }{
			{"a header line without a colon", "POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nAuthorization: Bearer " + secretKey + "\r\nno colon here\r\n\r\n"},
			{"no Host", "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"},
			{"a bad request line", "POST\r\n\r\n"},
		} {
			t.Run(fr.name+"/"+tc.name, func(t *testing.T) {
				eng := newEngine(t, okChat)
				var logs syncBuffer
				f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin"),
					func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) }, nil, nil)
				resp, b := exchange(t, f.dial(t), tc.request)
				if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/json" ||
					errorCode(t, string(b)) != "invalid_request" {
					t.Fatalf("%d %q %s: want 400 invalid_request", resp.StatusCode, resp.Header.Get("Content-Type"), b)
				}
				// The request's own bytes, its API key with them, are
				// neither echoed nor logged; fasthttp's server logs the
				// refused connection once it closed it.
				if strings.Contains(string(b), secretKey) {
					t.Errorf("the answer echoes the request's Authorization header: %s", b)
				}
				if fr.kind == frontFast && strings.Contains(tc.request, secretKey) {
					testwait.For(t, 5*time.Second, "the refused connection logged", func() bool {
						return strings.Contains(logs.String(), "error when serving connection")
					})
				}
				if strings.Contains(logs.String(), secretKey) {
					t.Errorf("the log holds the request's Authorization header: %s", logs.String())
				}
			})
		}
	}
}

// A client that stalls its body past read_body gets 408 request_timeout
// and its connection closed, on either front.
func TestAStalledBodyGetsRequestTimeout(t *testing.T) {
	for _, fr := range fronts {
		t.Run(fr.name, func(t *testing.T) {
			eng := newEngine(t, okChat)
			f := fr.serveFront(t, providers("a", eng.URL)+route("round_robin")+"\n[timeouts]\nread_body = \"200ms\"\n", nil, nil, nil)
			c, err := net.Dial("tcp", strings.TrimPrefix(f.base, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Length: 100\r\n\r\n{"); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout || errorCode(t, string(b)) != "request_timeout" {
				t.Fatalf("%d %s: want 408 request_timeout", resp.StatusCode, b)
			}
			if _, err := br.ReadByte(); err != io.EOF {
				t.Fatalf("after the answer: %v, want the connection closed", err)
			}
			if n := eng.hits.Load(); n != 0 {
				t.Fatalf("the engine got %d requests", n)
			}
		})
	}
}
