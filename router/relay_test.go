package router

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// scriptedEngine is a loopback engine that answers a request with parts,
// each in one write of its own, and waits before each part after the
// first for a value on the gate beside it: how an engine's bytes arrive
// at the router is the test's to say.
type scriptedEngine struct {
	url   string
	parts []string
	gates []chan struct{} // gates[i] opens parts[i] (nil: none)
}

func newScriptedEngine(t *testing.T, parts ...string) *scriptedEngine {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &scriptedEngine{url: "http://" + ln.Addr().String(), parts: parts, gates: make([]chan struct{}, len(parts))}
	for i := 1; i < len(parts); i++ {
		e.gates[i] = make(chan struct{})
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go e.serve(c, done)
		}
	}()
	return e
}

func (e *scriptedEngine) serve(c net.Conn, done <-chan struct{}) {
	defer c.Close()
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, req.Body)
	for i, p := range e.parts {
		if g := e.gates[i]; g != nil {
			select {
			case <-g:
			case <-done:
				return
			}
		}
		if _, err := io.WriteString(c, p); err != nil {
			return
		}
	}
}

// open lets part i go out.
func (e *scriptedEngine) open(i int) { close(e.gates[i]) }

// chunk is s as one chunk of chunked transfer coding.
func chunk(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }

const sseHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

// streamClient is a client reading a streamed answer event by event, each
// read bounded so that a byte the router holds back fails the test
// instead of hanging it.
type streamClient struct {
	t    *testing.T
	conn net.Conn
	resp *http.Response
	body *bufio.Reader
}

func openStream(t *testing.T, f *served) *streamClient {
	t.Helper()
	c := f.dial(t)
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	if _, err := fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		t.Fatal(err)
	}
	sc := &streamClient{t: t, conn: c}
	sc.deadline()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the stream's head did not reach the client: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc.resp, sc.body = resp, bufio.NewReader(resp.Body)
	return sc
}

func (sc *streamClient) deadline() { _ = sc.conn.SetReadDeadline(time.Now().Add(10 * time.Second)) }

// event reads the next event whole (up to its blank line).
func (sc *streamClient) event(what string) string {
	sc.t.Helper()
	sc.deadline()
	var ev strings.Builder
	for {
		line, err := sc.body.ReadString('\n')
		ev.WriteString(line)
		if err != nil {
			sc.t.Fatalf("%s: read %q, then %v", what, ev.String(), err)
		}
		if line == "\n" {
			return ev.String()
		}
	}
}

// end reads the answer to its end, which must come next, well framed.
func (sc *streamClient) end() {
	sc.t.Helper()
	sc.deadline()
	rest, err := io.ReadAll(sc.body)
	if err != nil || len(rest) > 0 {
		sc.t.Fatalf("after the last event: %q, %v (want the answer's end)", rest, err)
	}
}

// How an engine's bytes arrive must not change what the client gets or
// when: a head the engine sent alone reaches the client before any event
// exists, a lone event reaches it before the next one exists, events that
// arrive together (in one upstream read) reach it whole and in order, and
// when the last events and the body's end arrive together the answer ends
// with them. Each later part is held back by a gate the test opens only
// after the client had what came before it, so a byte the router kept
// waiting for more would fail the read. Both fronts.
func TestStreamEventsReachTheClientAsTheyArrive(t *testing.T) {
	for _, fr := range fronts {
		t.Run(fr.name, func(t *testing.T) {
			for _, c := range []struct {
				name  string
				parts []string
				// events[i] are the events the client must have once
				// part i is out; the last part ends the answer.
				events [][]string
			}{
				{
					name: "head alone, then one event, then two with the end",
					parts: []string{sseHead,
						chunk("data: 1\n\n"),
						chunk("data: 2\n\n") + chunk("data: 3\n\n") + "0\r\n\r\n"},
					events: [][]string{nil, {"data: 1\n\n"}, {"data: 2\n\n", "data: 3\n\n"}},
				},
				{
					name: "first event with the head, two in one chunk, the end alone",
					parts: []string{sseHead + chunk("data: 1\n\n"),
						chunk("data: 2\n\ndata: 3\n\n"),
						"0\r\n\r\n"},
					events: [][]string{{"data: 1\n\n"}, {"data: 2\n\n", "data: 3\n\n"}, nil},
				},
				{
					name:   "the head with only a chunk's size line, then its data and the end",
					parts:  []string{sseHead + "9\r\n", "data: 1\n\n\r\n0\r\n\r\n"},
					events: [][]string{nil, {"data: 1\n\n"}},
				},
				{
					name: "an event split over two writes, the rest with the end",
					parts: []string{sseHead + chunk("data: 1\n\n"),
						"12\r\ndata: a lon",
						"g one\n\n\r\n" + chunk("data: [DONE]\n\n") + "0\r\n\r\n"},
					events: [][]string{{"data: 1\n\n"}, nil, {"data: a long one\n\n", "data: [DONE]\n\n"}},
				},
			} {
				t.Run(c.name, func(t *testing.T) {
					eng := newScriptedEngine(t, c.parts...)
					f := fr.serveFront(t, providers("a", eng.url)+route("round_robin"), nil, nil, nil)
					sc := openStream(t, f)
					for i := range c.parts {
						if i > 0 {
							eng.open(i)
						}
						for _, want := range c.events[i] {
							if got := sc.event(fmt.Sprintf("part %d", i)); got != want {
								t.Fatalf("part %d: event %q, want %q", i, got, want)
							}
						}
					}
					sc.end()
				})
			}
		})
	}
}
