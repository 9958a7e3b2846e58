// Package hangup owns noticing that an API client has gone: one epoll set
// holds every accepted connection of the listeners it wraps, registered once
// when the connection is accepted, and one goroutine waits on it. When the
// peer's FIN or RST arrives, the connection's Context is cancelled, so
// whatever the server does for it (an admission wait, the mesh hold, the
// upstream request) can end on it. Per request it costs nothing: no read,
// no goroutine, no system call; per connection it costs one epoll_ctl ADD,
// one DEL and one context.
//
// Only the peer's departure counts. Bytes from the client (a pipelined
// next request) are not watched for, and neither is the server's own
// writing. A client that half-closes its side (shutdown(SHUT_WR)) counts
// as gone, as it does for net/http's server, whose background read ends
// the request's context on the EOF it reads. One difference: a client
// that pipelines its next request and then half-closes always counts as
// gone here; net/http's background read stops at a pipelined byte it has
// not buffered yet, and then does not see the EOF.
//
// A Conn can also close without losing its last answer (LingerOnClose): a
// server refusing a request it did not read to the end (a header or body
// over its limit) sends the answer, a FIN, and reads off the rest before
// closing, as net/http's server does, so the client's kernel does not get
// a reset that discards the answer.
//
// The watcher needs Linux's epoll. On other systems New returns an error
// and the caller serves without it.
package hangup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// The causes a Conn's context ends with (context.Cause).
var (
	// ErrDeparted: the client closed or reset its connection, or
	// half-closed its sending side.
	ErrDeparted = errors.New("hangup: the client closed the connection")
	// ErrClosed: the server closed the connection.
	ErrClosed = errors.New("hangup: the connection was closed")
)

// Conn is an accepted TCP connection whose Context ends when the client
// leaves. It is the *net.TCPConn for everything else: every method of the
// embedded connection (SetKeepAlive, SetReadBuffer, CloseWrite, ReadFrom
// for sendfile and splice, SyscallConn, ...) is the connection's own, so
// servers that look for those interfaces find them. Only Close is its own:
// it takes the connection out of the epoll set before closing it, so
// close it through the Conn, not through the embedded field.
type Conn struct {
	*net.TCPConn
	ctx    context.Context
	cancel context.CancelCauseFunc
	w      *Watcher
	reg    registration
	closed atomic.Bool
	linger atomic.Bool
}

// Context ends when the client closes, resets or half-closes the
// connection (cause ErrDeparted) or when the connection is closed (cause
// ErrClosed), or when the listener's base context ends. It lives as long as
// the connection, across all the requests it carries.
func (c *Conn) Context() context.Context { return c.ctx }

// Watched reports whether the connection's departure is watched. It is not
// when registering it with the epoll set failed (the kernel's limit of
// watches, fs.epoll.max_user_watches, was reached, or the Watcher was
// closed): such a connection is served all the same, and its Context ends
// only when it is closed.
func (c *Conn) Watched() bool { return c.reg.watched() }

// Close takes the connection out of the epoll set, closes it and ends its
// Context. Calls after the first return the connection's own error. After
// LingerOnClose, Close sends a FIN after the last bytes written and a
// goroutine reads and drops what the client still sends, for up to
// lingerTime or lingerBytes, before it closes the socket.
func (c *Conn) Close() error {
	first := c.closed.CompareAndSwap(false, true)
	if first {
		c.w.unwatch(c)
	}
	if first && c.linger.Load() {
		c.cancel(ErrClosed)
		if err := c.TCPConn.CloseWrite(); err != nil {
			return c.TCPConn.Close()
		}
		go c.drainAndClose()
		return nil
	}
	err := c.TCPConn.Close()
	c.cancel(ErrClosed)
	return err
}

// How long and how much a lingering Close reads before it closes (net/http's
// server waits 500 ms after such an answer too).
const (
	lingerTime  = 500 * time.Millisecond
	lingerBytes = 256 << 10
)

// LingerOnClose makes Close keep the client's answer: closing a socket
// with unread bytes in its receive queue resets the connection, and a
// client still writing a request the server refused (a header or body
// over the limit) would lose the error answer already sent to it.
func (c *Conn) LingerOnClose() { c.linger.Store(true) }

func (c *Conn) drainAndClose() {
	_ = c.TCPConn.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.Copy(io.Discard, io.LimitReader(c.TCPConn, lingerBytes))
	_ = c.TCPConn.Close()
}

// Linger calls LingerOnClose on the Conn under c (found as Context finds
// it) and reports whether there was one.
func Linger(c net.Conn) bool {
	hc := under(c)
	if hc != nil {
		hc.LingerOnClose()
	}
	return hc != nil
}

// Context finds the departure context of c: c itself when it is a *Conn,
// or the connection under it when c wraps one and says so with
// NetConn() net.Conn (as *tls.Conn does). ok is false for a connection
// that no Watcher's listener accepted, and for one hidden by a wrapper
// without NetConn (fasthttp's per-IP limit, Server.MaxConnsPerIP, wraps
// each connection so).
func Context(c net.Conn) (ctx context.Context, ok bool) {
	if hc := under(c); hc != nil {
		return hc.ctx, true
	}
	return nil, false
}

// under is the Conn c is or wraps (through NetConn), or nil.
func under(c net.Conn) *Conn {
	for c != nil {
		switch v := c.(type) {
		case *Conn:
			return v
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// Listener returns ln with every connection it accepts registered with w
// and wrapped in a *Conn whose Context derives from base. ln must yield
// TCP connections; any other kind is closed and Accept returns an error.
// When the API serves TLS, wrap the result (tls.NewListener): the
// departure is the TCP connection's, and Context finds it through the
// *tls.Conn.
func (w *Watcher) Listener(ln net.Listener, base context.Context) net.Listener {
	return &listener{Listener: ln, w: w, base: base}
}

type listener struct {
	net.Listener
	w    *Watcher
	base context.Context
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		_ = c.Close()
		return nil, fmt.Errorf("hangup: the listener accepted a %T; only TCP connections are watched", c)
	}
	ctx, cancel := context.WithCancelCause(l.base)
	conn := &Conn{TCPConn: tc, ctx: ctx, cancel: cancel, w: l.w}
	l.w.watch(conn)
	return conn, nil
}
