package router

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/strategies"
)

// BenchmarkServe is the production front: Serve on a loopback listener,
// one keep-alive client connection writing the same request bytes each
// time, the engine in memory. What it reports per op is the router's
// own cost of one client request (the client's parse of the answer is
// small and fixed); BenchmarkRequestPath skips the HTTP server this
// measures. The in-memory engine is an Options.Transport, reached through
// the conversion to net/http's types (roundtrip.go) that production does
// not make: BenchmarkServeLoopback is the production path.
func BenchmarkServe(b *testing.B) {
	for _, v := range []struct {
		name string
		sse  bool
	}{{"json", false}, {"sse", true}} {
		b.Run(v.name, func(b *testing.B) {
			cfg, err := config.Parse("rolter.toml", []byte(benchConfig), func(string) string { return "" })
			if err != nil {
				b.Fatal(err)
			}
			s := New(Options{Transport: memEngine{sse: v.sse}, Rand: strategies.NewRand(1)})
			if err := s.Apply(cfg); err != nil {
				b.Fatal(err)
			}
			benchServeLoop(b, s, v.sse)
		})
	}
}

// BenchmarkServeLoopback is BenchmarkServe with the engine on loopback
// too (cannedConnEngine: the same answer bytes every time, nothing
// allocated on its side), so that the upstream client is the router's
// own: the allocations per op are the router's whole data path, API
// server and upstream client, as production runs it. Two targets,
// round_robin.
func BenchmarkServeLoopback(b *testing.B) {
	plain, sse := cannedAnswers()
	for _, v := range []struct {
		name, answer string
		sse          bool
	}{{"json", plain, false}, {"sse", sse, true}} {
		b.Run(v.name, func(b *testing.B) {
			eng := "http://" + cannedConnEngine(b, []byte(v.answer))
			toml := strings.NewReplacer("http://127.0.0.1:1", eng, "http://127.0.0.1:2", eng).Replace(benchConfig)
			cfg, err := config.Parse("rolter.toml", []byte(toml), func(string) string { return "" })
			if err != nil {
				b.Fatal(err)
			}
			s := New(Options{Rand: strategies.NewRand(1)})
			if err := s.Apply(cfg); err != nil {
				b.Fatal(err)
			}
			benchServeLoop(b, s, v.sse)
		})
	}
}

// readAnswer reads one HTTP/1.1 response off br and returns its status,
// allocating nothing: a Content-Length body is skipped, a chunked one
// read to its last chunk.
func readAnswer(br *bufio.Reader) (int, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 12 {
		return 0, fmt.Errorf("short status line %q", line)
	}
	code, _ := strconv.Atoi(string(line[9:12]))
	length, chunked := -1, false
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return code, err
		}
		if len(line) <= 2 {
			break
		}
		name, val, _ := bytes.Cut(bytes.TrimSpace(line), []byte(":"))
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			length, _ = strconv.Atoi(string(bytes.TrimSpace(val)))
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = true
		}
	}
	if !chunked {
		_, err = br.Discard(max(length, 0))
		return code, err
	}
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return code, err
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
		if err != nil {
			return code, err
		}
		if _, err := br.Discard(int(n) + 2); err != nil {
			return code, err
		}
		if n == 0 {
			return code, nil
		}
	}
}

// benchServeLoop serves s on loopback and times one keep-alive client
// sending the benchmark's chat (streamed when sse) and reading each whole
// answer, which must be a 200.
func benchServeLoop(b *testing.B, s *Server, sse bool) {
	api, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, api, nil) }()
	defer func() { stop(); <-served }()

	c, err := net.Dial("tcp", api.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	body := strings.Replace(benchBody, "%s", fmt.Sprint(sse), 1)
	raw := []byte(fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: rolter\r\nContent-Type: application/json\r\n"+
		"Authorization: Bearer none\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	br := bufio.NewReader(c)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(raw); err != nil {
			b.Fatal(err)
		}
		if code, err := readAnswer(br); err != nil || code != 200 {
			b.Fatalf("status %d, err %v", code, err)
		}
	}
}
