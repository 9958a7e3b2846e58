package router

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http/httputil"
	"strings"
	"testing"
	"time"
)

// pieces is a connection that returns its bytes in the given sizes, one
// size per Read (the rest at once when they run out).
type pieces struct {
	b     []byte
	sizes []int
}

func (p *pieces) Read(b []byte) (int, error) {
	if len(p.b) == 0 {
		return 0, io.EOF
	}
	k := len(p.b)
	if len(p.sizes) > 0 {
		k, p.sizes = max(1, min(p.sizes[0], k)), p.sizes[1:]
	}
	k = copy(b, p.b[:k])
	p.b = p.b[k:]
	return k, nil
}

// readAll reads u to its end from conn with a buffer of size n.
func readAll(u *upstreamBody, conn io.Reader, n int) ([]byte, error) {
	var out []byte
	buf := make([]byte, n)
	for range 1 << 20 {
		m, err := u.read(conn, buf)
		out = append(out, buf[:m]...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
	return out, errors.New("no progress")
}

// stdlibChunked decodes b with net/http's chunked reader; rest is what
// follows the last chunk's size line (its trailer and anything after).
func stdlibChunked(b []byte) (data, rest []byte, err error) {
	br := bufio.NewReader(bytes.NewReader(b))
	data, err = io.ReadAll(httputil.NewChunkedReader(br))
	rest, _ = io.ReadAll(br)
	return data, rest, err
}

// The engine's chunked framing comes off as net/http would take it, in
// whatever pieces the network delivers it and whatever the buffer's size.
func TestChunkedBodyDecodesWhatNetHTTPDecodes(t *testing.T) {
	for _, c := range []struct {
		name, wire string
		ok         bool
		over       bool
	}{
		{"two events", "18\r\ndata: {\"a\":1}\n\ndata: x\n\n\r\n0\r\n\r\n", true, false},
		{"upper-case hex and a leading zero", "0A\r\n0123456789\r\n0\r\n\r\n", true, false},
		{"an extension", "5;name=value\r\nhello\r\n0;last\r\n\r\n", true, false},
		{"white space after the size", "5 \t\r\nhello\r\n0\r\n\r\n", true, false},
		{"a trailer", "5\r\nhello\r\n0\r\nX-Usage: 1\r\nX-More: 2\r\n\r\n", true, false},
		{"bytes after the end", "5\r\nhello\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n", true, true},
		{"many one-byte chunks", strings.Repeat("1\r\nx\r\n", 300) + "0\r\n\r\n", true, false},
		{"a bare LF after the size", "5\nhello\r\n0\r\n\r\n", false, false},
		{"a CR inside an extension", "5;a\rb\r\nhello\r\n0\r\n\r\n", false, false},
		{"white space before an extension", "5 ;a\r\nhello\r\n0\r\n\r\n", false, false},
		{"no size", "\r\nhello\r\n0\r\n\r\n", false, false},
		{"a size of 17 digits", "00000000000000005\r\nhello\r\n0\r\n\r\n", false, false},
		{"data not ended by CRLF", "5\r\nhelloX\r\n0\r\n\r\n", false, false},
		{"cut in the data", "5\r\nhel", false, false},
		{"cut before the last chunk", "5\r\nhello\r\n", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			want, rest, serr := stdlibChunked([]byte(c.wire))
			if (serr == nil) != c.ok {
				t.Fatalf("net/http's reader: %v; the case expects ok=%v", serr, c.ok)
			}
			for _, split := range []int{1, 2, 3, 7, 1 << 20} {
				for _, bufSize := range []int{1, 5, 64, 4096} {
					sizes := make([]int, len(c.wire))
					for i := range sizes {
						sizes[i] = split
					}
					u := upstreamBody{kind: bodyChunked}
					got, err := readAll(&u, &pieces{b: []byte(c.wire), sizes: sizes}, bufSize)
					if !c.ok {
						if err == nil {
							t.Fatalf("pieces of %d, buffer %d: read %q without an error, net/http's reader refuses it (%v)", split, bufSize, got, serr)
						}
						continue
					}
					if err != nil || !bytes.Equal(got, want) {
						t.Fatalf("pieces of %d, buffer %d: got %q, %v; want %q (trailer %q)", split, bufSize, got, err, want, rest)
					}
					// Bytes after the end are seen when they come with it.
					if split == 1<<20 && bufSize == 4096 && u.over != c.over {
						t.Fatalf("pieces of %d, buffer %d: bytes after the end = %v, want %v", split, bufSize, u.over, c.over)
					}
				}
			}
		})
	}
}

// What came in with the header is read first; a sized body stops at its
// length and reports a short one.
func TestUpstreamBodyPendingAndSized(t *testing.T) {
	u := upstreamBody{kind: bodySized, left: 11, pending: []byte("hello")}
	got, err := readAll(&u, strings.NewReader(" worldEXTRA"), 3)
	if err != nil || string(got) != "hello world" {
		t.Fatalf("got %q, %v; want %q", got, err, "hello world")
	}
	u = upstreamBody{kind: bodySized, left: 11}
	if _, err := readAll(&u, strings.NewReader("short"), 64); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a body cut short read with %v, want io.ErrUnexpectedEOF", err)
	}
	u = upstreamBody{kind: bodyChunked, pending: []byte("3\r\nabc\r\n0\r")}
	got, err = readAll(&u, strings.NewReader("\n\r\n"), 64)
	if err != nil || string(got) != "abc" || u.over {
		t.Fatalf("chunked over pending and the connection: got %q, %v (over %v)", got, err, u.over)
	}
	u = upstreamBody{kind: bodyToEOF}
	got, err = readAll(&u, strings.NewReader("until the end"), 4)
	if err != nil || string(got) != "until the end" {
		t.Fatalf("to EOF: got %q, %v", got, err)
	}
}

func FuzzChunkedBody(f *testing.F) {
	for _, s := range []string{"5\r\nhello\r\n0\r\n\r\n", "1;x\r\na\r\n0\r\nT: v\r\n\r\n", "3 \r\nabc\r\n0\r\n\r\nzz", "5\nhello"} {
		f.Add([]byte(s), uint64(1))
	}
	f.Fuzz(func(t *testing.T, wire []byte, seed uint64) {
		rng := rand.New(rand.NewPCG(seed, 0))
		sizes := make([]int, len(wire))
		for i := range sizes {
			sizes[i] = 1 + rng.IntN(8)
		}
		u := upstreamBody{kind: bodyChunked}
		got, err := readAll(&u, &pieces{b: wire, sizes: sizes}, 1+rng.IntN(16))
		want, rest, serr := stdlibChunked(wire)
		if err == nil && (serr != nil || !bytes.Equal(got, want)) {
			t.Fatalf("%q: read %q, net/http's reader %q, %v", wire, got, want, serr)
		}
		// net/http stops at the last chunk's size line; with no trailer the
		// body ends at the CRLF after it.
		if serr == nil && bytes.HasPrefix(rest, []byte("\r\n")) {
			if err != nil || !bytes.Equal(got, want) || (u.over && len(rest) == 2) {
				t.Fatalf("%q: read %q, %v (over %v); net/http's reader %q", wire, got, err, u.over, want)
			}
		}
	})
}

// An open stream waits for its next event without a buffer, and a burst
// the engine sent together comes off in one read.
func TestStreamWaitsForDataWithoutABufferAndReadsABurstAtOnce(t *testing.T) {
	if !canPeek {
		t.Skip("no readability wait on this platform")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	send := make(chan string)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		for s := range send {
			if _, err := io.WriteString(c, s); err != nil {
				return
			}
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &call{conn: conn, body: upstreamBody{kind: bodyChunked}}
	c.watch()
	if c.raw == nil {
		t.Fatal("a TCP connection is not watched")
	}
	burst := "data: 1\n\n"
	wire := "9\r\n" + burst + "\r\n9\r\n" + burst + "\r\n9\r\n" + burst + "\r\n"
	waited := make(chan struct{})
	go func() { c.waitReadable(); close(waited) }()
	send <- wire
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("waitReadable did not return after the engine wrote")
	}
	// Everything the engine wrote is in the socket before Read looks (the
	// wait returned on the first byte; give the rest the same chance).
	p := make([]byte, 4096)
	var got []byte
	for len(got) < 3*len(burst) {
		n, err := c.Read(p)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p[:n]...)
	}
	if string(got) != strings.Repeat(burst, 3) {
		t.Fatalf("read %q", got)
	}
	// The end: the last chunk wakes the wait and reads as io.EOF.
	waited = make(chan struct{})
	go func() { c.waitReadable(); close(waited) }()
	send <- "0\r\n\r\n"
	<-waited
	close(send)
	for {
		n, err := c.Read(p)
		if n != 0 {
			t.Fatalf("read %q after the last event", p[:n])
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !c.eof {
		t.Fatal("the body's end is not noted: the connection would not be reused")
	}
}
