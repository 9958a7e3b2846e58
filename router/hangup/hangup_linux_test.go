//go:build linux

package hangup

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rolter/rolter/certs/certstest"
)

// What fasthttp's server and net/http look for on an accepted connection
// (fasthttp's keepAliveConn when TCPKeepalive is set; sendfile and splice
// through io.ReaderFrom and io.WriterTo), and what a server may call on a
// TCP connection.
var (
	_ interface {
		SetKeepAlive(bool) error
		SetKeepAlivePeriod(time.Duration) error
		io.Closer
	} = (*Conn)(nil)
	_ io.ReaderFrom = (*Conn)(nil)
	_ io.WriterTo   = (*Conn)(nil)
	_ syscall.Conn  = (*Conn)(nil)
	_ interface {
		CloseWrite() error
		SetReadBuffer(int) error
		SetWriteBuffer(int) error
		SetNoDelay(bool) error
		SetLinger(int) error
	} = (*Conn)(nil)
)

const within = 10 * time.Second

func newWatcher(t *testing.T) *Watcher {
	t.Helper()
	w, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
	return w
}

func listen(t *testing.T, w *Watcher, base context.Context) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return w.Listener(ln, base)
}

// pair dials ln and accepts the connection.
func pair(t *testing.T, ln net.Listener) (client *net.TCPConn, server *Conn) {
	t.Helper()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*Conn)
}

// waitDone waits for ctx to end and returns its cause.
func waitDone(t *testing.T, ctx context.Context, what string) error {
	t.Helper()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(within):
		t.Fatalf("%s: the context did not end within %v", what, within)
		return nil
	}
}

// settle returns once the watcher has handled every event raised before
// it was called: a new connection's client closes, and its context ends.
// epoll hands out ready connections in the order they became ready, and
// one goroutine cancels them in that order, so an event another
// connection raised earlier has been acted on by then. Tests that a
// context is NOT cancelled check it after settle.
func settle(t *testing.T, ln net.Listener) {
	t.Helper()
	c, s := pair(t, ln)
	c.Close()
	waitDone(t, s.Context(), "the settling connection")
	s.Close()
}

// epollSet reads w's epoll set as the kernel lists it in
// /proc/self/fdinfo: each registered descriptor's event mask (the
// wake-up eventfd left out).
func epollSet(t *testing.T, w *Watcher) map[int]uint32 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", strconv.Itoa(w.epfd)))
	if err != nil {
		t.Fatal(err)
	}
	set := map[int]uint32{}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 4 || f[0] != "tfd:" || f[2] != "events:" {
			continue
		}
		fd, err1 := strconv.Atoi(f[1])
		ev, err2 := strconv.ParseUint(f[3], 16, 32)
		if err1 != nil || err2 != nil {
			t.Fatalf("fdinfo line %q", line)
		}
		if fd != w.wakefd {
			set[fd] = uint32(ev)
		}
	}
	return set
}

func registered(t *testing.T, w *Watcher) int {
	t.Helper()
	return len(epollSet(t, w))
}

func TestDepartureEndsTheContext(t *testing.T) {
	w := newWatcher(t)
	ln := listen(t, w, context.Background())
	for _, tc := range []struct {
		name  string
		leave func(*net.TCPConn) error
	}{
		{"FIN", func(c *net.TCPConn) error { return c.Close() }},
		{"RST", func(c *net.TCPConn) error {
			if err := c.SetLinger(0); err != nil {
				return err
			}
			return c.Close()
		}},
		{"half-close", func(c *net.TCPConn) error { return c.CloseWrite() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := pair(t, ln)
			if !s.Watched() {
				t.Fatal("an accepted connection is not watched")
			}
			if err := tc.leave(c); err != nil {
				t.Fatal(err)
			}
			if cause := waitDone(t, s.Context(), tc.name); !errors.Is(cause, ErrDeparted) {
				t.Errorf("cause %v, want ErrDeparted", cause)
			}
			// One event per connection: the departed one stays in the set
			// (until Close) but disarmed, so epoll_wait does not return it
			// again and again while the server finishes with it.
			ev, ok := epollSet(t, w)[fdOf(t, s)]
			if !ok {
				t.Fatal("the departed connection left the epoll set before Close")
			}
			if ev&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				t.Errorf("the departed connection is still armed (events %#x)", ev)
			}
		})
	}
}

// TestNetHTTPEndsTheContextOnHalfClose pins the behaviour the watcher
// matches for a half-closed client: net/http's server ends the request's
// context when its background read meets the EOF.
func TestNetHTTPEndsTheContextOnHalfClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			ended <- r.Context().Err()
		case <-time.After(within):
			ended <- errors.New("the request's context did not end")
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("net/http on a half-closed client: %v", err)
	}
}

func TestTrafficIsNotADeparture(t *testing.T) {
	w := newWatcher(t)
	ln := listen(t, w, context.Background())
	c, s := pair(t, ln)

	// Requests the server reads, then pipelined ones it has not read yet.
	req := "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
	for range 20 {
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(s, make([]byte, len(req))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := io.WriteString(c, strings.Repeat(req, 50)); err != nil {
		t.Fatal(err)
	}
	// A response longer than the socket buffers, written while the client
	// reads it.
	body := make([]byte, 8<<20)
	read := make(chan error, 1)
	go func() {
		_, err := io.CopyN(io.Discard, c, int64(len(body)))
		read <- err
	}()
	if _, err := s.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := <-read; err != nil {
		t.Fatal(err)
	}

	settle(t, ln)
	if err := s.Context().Err(); err != nil {
		t.Fatalf("a client sending requests and reading a response counted as gone: %v", context.Cause(s.Context()))
	}
	c.Close()
	waitDone(t, s.Context(), "the client closing after its traffic")
}

func TestServerCloseEndsTheContextAndUnregisters(t *testing.T) {
	w := newWatcher(t)
	ln := listen(t, w, context.Background())
	_, s := pair(t, ln)
	if n := registered(t, w); n != 1 {
		t.Fatalf("%d connections in the epoll set, want 1", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(s.Context()); !errors.Is(cause, ErrClosed) {
		t.Errorf("after Close the context's cause is %v, want ErrClosed", cause)
	}
	if n := registered(t, w); n != 0 {
		t.Errorf("%d connections in the epoll set after Close, want 0", n)
	}
	if err := s.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("a second Close: %v, want net.ErrClosed", err)
	}
}

func TestBaseContextEndsEveryConnection(t *testing.T) {
	w := newWatcher(t)
	base, cancel := context.WithCancel(context.Background())
	ln := listen(t, w, base)
	_, s := pair(t, ln)
	cancel()
	if err := waitDone(t, s.Context(), "base cancelled"); !errors.Is(err, context.Canceled) {
		t.Errorf("cause %v, want the base's", err)
	}
}

// TestReusedDescriptorKeepsItsContext closes connections whose clients
// have just left and accepts new ones on the same descriptor numbers (the
// kernel hands out the lowest free one): no late event of a closed
// connection may end a new connection's context.
func TestReusedDescriptorKeepsItsContext(t *testing.T) {
	w := newWatcher(t)
	ln := listen(t, w, context.Background())
	const rounds = 200
	kept := make([]*Conn, 0, rounds)
	reused := 0
	for range rounds {
		dc, ds := pair(t, ln)
		gone := fdOf(t, ds)
		dc.Close()
		ds.Close()
		_, s := pair(t, ln)
		if fdOf(t, s) == gone {
			reused++
		}
		kept = append(kept, s)
	}
	if reused < rounds/2 {
		t.Fatalf("only %d of %d new connections reused a closed one's descriptor; the test needs reuse", reused, rounds)
	}
	settle(t, ln)
	for i, s := range kept {
		if s.Context().Err() != nil {
			t.Fatalf("connection %d (client still connected): context ended, cause %v", i, context.Cause(s.Context()))
		}
	}
}

// TestStaleEventIsDropped delivers, by hand, the event a closed
// connection would have raised after its slot was taken again.
func TestStaleEventIsDropped(t *testing.T) {
	w := newWatcher(t)
	ln := listen(t, w, context.Background())
	_, old := pair(t, ln)
	stale := old.reg
	old.Close()
	_, s := pair(t, ln)
	if s.reg.slot != stale.slot || s.reg.gen == stale.gen {
		t.Fatalf("new registration %+v after closing %+v: want the same slot, a new generation", s.reg, stale)
	}
	w.depart(stale.slot, stale.gen)
	if s.Context().Err() != nil {
		t.Fatal("an event of the slot's previous connection ended the new one's context")
	}
	w.depart(s.reg.slot, s.reg.gen)
	if !errors.Is(context.Cause(s.Context()), ErrDeparted) {
		t.Fatal("the slot's own event did not end its context")
	}
}

func TestManyConnections(t *testing.T) {
	w := newWatcher(t)
	ln := listen(t, w, context.Background())
	const n = 300
	clients := make([]*net.TCPConn, n)
	servers := make([]*Conn, n)
	for i := range n {
		clients[i], servers[i] = pair(t, ln)
	}
	if got := registered(t, w); got != n {
		t.Fatalf("%d connections in the epoll set, want %d", got, n)
	}
	order := rand.New(rand.NewPCG(1, 2)).Perm(n)
	// The first half of the clients leave; the others stay.
	for _, i := range order[:n/2] {
		clients[i].Close()
	}
	for _, i := range order[:n/2] {
		if cause := waitDone(t, servers[i].Context(), fmt.Sprintf("connection %d", i)); !errors.Is(cause, ErrDeparted) {
			t.Fatalf("connection %d: cause %v", i, cause)
		}
	}
	settle(t, ln)
	for _, i := range order[n/2:] {
		if servers[i].Context().Err() != nil {
			t.Fatalf("connection %d ended though its client is connected", i)
		}
	}
	for _, s := range servers {
		s.Close()
	}
	if got := registered(t, w); got != 0 {
		t.Fatalf("%d connections left in the epoll set after closing all", got)
	}
}

func TestClosedWatcherLeavesConnectionsUsable(t *testing.T) {
	w, err := New()
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t, w, context.Background())
	c, s := pair(t, ln)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.done:
	default:
		t.Fatal("Close returned with the waiting goroutine still running")
	}
	if _, err := io.WriteString(s, "still here"); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(io.LimitReader(c, 10)).ReadString(0); line != "still here" {
		t.Fatalf("read %q, %v", line, err)
	}
	c2, s2 := pair(t, ln)
	if s2.Watched() {
		t.Error("a connection accepted after Close claims to be watched")
	}
	c2.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(context.Cause(s.Context()), ErrClosed) {
		t.Errorf("cause %v, want ErrClosed", context.Cause(s.Context()))
	}
}

func TestContextFoundThroughTLS(t *testing.T) {
	ca := certstest.NewCA(t, "ca")
	leaf := ca.Valid(t, "api")
	cert, err := tls.LoadX509KeyPair(leaf.Cert, leaf.Key)
	if err != nil {
		t.Fatal(err)
	}
	w := newWatcher(t)
	ln := tls.NewListener(listen(t, w, context.Background()), &tls.Config{Certificates: []tls.Certificate{cert}})
	handshaken := make(chan error, 1)
	var client *tls.Conn
	go func() {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"})
		client = c
		handshaken <- err
	}()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if err := sc.(*tls.Conn).Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-handshaken; err != nil {
		t.Fatal(err)
	}
	ctx, ok := Context(sc)
	if !ok {
		t.Fatal("no departure context under the *tls.Conn")
	}
	client.Close()
	waitDone(t, ctx, "TLS client closing")

	if _, ok := Context(client); ok {
		t.Error("a dialled connection has a departure context")
	}
}

func TestAcceptRefusesNonTCP(t *testing.T) {
	w := newWatcher(t)
	path := filepath.Join(t.TempDir(), "s")
	uln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer uln.Close()
	ln := w.Listener(uln, context.Background())
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := ln.Accept(); err == nil || !strings.Contains(err.Error(), "only TCP") {
		t.Fatalf("Accept of a unix connection: %v", err)
	}
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the refused connection was left open: read %d, %v", n, err)
	}
}

func fdOf(t *testing.T, c *Conn) int {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd int
	if err := raw.Control(func(f uintptr) { fd = int(f) }); err != nil {
		t.Fatal(err)
	}
	return fd
}

// TestLingeringCloseKeepsTheAnswer: a server that refuses a request it has
// not read to the end answers and closes. A plain close with the rest of
// the request unread resets the connection, and the client, still
// writing, may lose the answer; after LingerOnClose the client reads the
// whole answer and then EOF, every time.
func TestLingeringCloseKeepsTheAnswer(t *testing.T) {
	w := newWatcher(t)
	ln := listen(t, w, context.Background())
	const answer = "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
	for i := range 20 {
		client, server := pair(t, ln)
		sent := make(chan struct{})
		go func() {
			defer close(sent)
			// Far more than the server reads, and more than fits in the
			// sockets' buffers before the server answers.
			_, _ = client.Write([]byte("GET / HTTP/1.1\r\nX-Big: " + strings.Repeat("h", 1<<20)))
		}()
		if _, err := io.ReadFull(server, make([]byte, 4096)); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(server, answer); err != nil {
			t.Fatal(err)
		}
		if !Linger(server) {
			t.Fatal("Linger found no Conn")
		}
		if err := server.Close(); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(client)
		if err != nil || string(got) != answer {
			t.Fatalf("connection %d: read %q, %v; want the whole answer, then EOF", i, got, err)
		}
		if err := waitDone(t, server.Context(), "lingering close"); !errors.Is(err, ErrClosed) {
			t.Fatalf("cause %v, want ErrClosed", err)
		}
		client.Close()
		<-sent
	}
}
