package router

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// cannedConnEngine is a loopback engine that answers every request on a
// connection with the same bytes, parsing no more of the request than
// its Content-Length and allocating nothing per request, so a benchmark
// of the upstream client counts the client's allocations alone.
func cannedConnEngine(tb testing.TB, answer []byte) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveRaw(c, answer)
		}
	}()
	return ln.Addr().String()
}

func serveRaw(c net.Conn, answer []byte) {
	defer c.Close()
	br := bufio.NewReader(c)
	prefix := []byte("content-length:")
	for {
		n := 0
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			if len(line) <= 2 {
				break
			}
			if len(line) > len(prefix) && bytes.EqualFold(line[:len(prefix)], prefix) {
				for _, d := range bytes.TrimSpace(line[len(prefix):]) {
					n = n*10 + int(d-'0')
				}
			}
		}
		if _, err := br.Discard(n); err != nil {
			return
		}
		if _, err := c.Write(answer); err != nil {
			return
		}
	}
}

// BenchmarkUpstreamRoundTrip is one attempt through the upstream client
// as proxy.go sends it (a fasthttp request, a 200-byte body, the
// first-byte and request deadlines),
// the answer's body read to its end as the relay reads it (readPooled), over
// one pooled loopback connection: what client.go costs per request, in
// allocations and time.
func BenchmarkUpstreamRoundTrip(b *testing.B) {
	plain, sse := cannedAnswers()
	for _, v := range []struct {
		name, answer string
		size         int
	}{{"json", plain, len(cannedJSON)}, {"sse", sse, len(cannedSSE)}} {
		b.Run(v.name, func(b *testing.B) {
			addr := cannedConnEngine(b, []byte(v.answer))
			u, _ := url.Parse("http://" + addr + "/v1/chat/completions")
			tr := &fastTransport{connectTimeout: func() time.Duration { return time.Second }, connected: func(time.Time) {}}
			defer tr.CloseIdleConnections()
			body := newBodyBuf(256, 1<<20)
			body.b = append(body.b, strings.Repeat("x", 200)...)
			b.ReportAllocs()
			for b.Loop() {
				req := fasthttp.AcquireRequest()
				req.Header.SetMethod(fasthttp.MethodPost)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Request-Id", "r1")
				sb := splicedBody{parts: [3][]byte{body.b}, n: int64(len(body.b))}
				now := time.Now()
				resp, err := tr.send(&outbound{ctx: context.Background(), url: u, req: req, body: &sb,
					firstByte: now.Add(time.Minute), deadline: now.Add(time.Hour)})
				if err != nil {
					b.Fatal(err)
				}
				if resp.StatusCode != 200 || resp.get("Content-Type") == "" {
					b.Fatalf("status %d, header %v", resp.StatusCode, resp.Header)
				}
				rd := resp.Body.(pooledReader)
				got := 0
				for {
					bufp, n, err := rd.readPooled(&eventBufs)
					if bufp != nil {
						eventBufs.Put(bufp)
					}
					got += n
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				resp.close()
				if got != v.size {
					b.Fatalf("read %d body bytes, want %d", got, v.size)
				}
			}
		})
	}
}

// cannedAnswers are a vLLM-like engine's whole HTTP answers to the
// benchmarks' chat, as bytes on the wire: plain, with its Content-Length,
// and streamed, cannedSSE's events each in a chunk of its own.
func cannedAnswers() (plain, sse string) {
	var b strings.Builder
	b.WriteString("HTTP/1.1 200 OK\r\ndate: Tue, 01 Dec 2026 19:00:00 GMT\r\nserver: uvicorn\r\n" +
		"content-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n")
	for _, ev := range strings.SplitAfter(string(cannedSSE), "\n\n") {
		if ev != "" {
			fmt.Fprintf(&b, "%x\r\n%s\r\n", len(ev), ev)
		}
	}
	b.WriteString("0\r\n\r\n")
	plain = fmt.Sprintf("HTTP/1.1 200 OK\r\ndate: Tue, 01 Dec 2026 19:00:00 GMT\r\nserver: uvicorn\r\n"+
		"content-length: %d\r\ncontent-type: application/json\r\nx-request-id: chatcmpl-1\r\n\r\n%s", len(cannedJSON), cannedJSON)
	return plain, b.String()
}
