package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/propagation"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/router/hangup"
)

// The API on fasthttp's server. fasthttp reads a request's header and
// body into buffers it keeps with the connection's RequestCtx, calls the
// handler in the connection's goroutine, and writes the response after
// the handler returned: no goroutine per request, no http.Header maps,
// no background read. A client's departure reaches the request through
// its connection's context (the departure watch Serve puts on the
// listener, router/hangup): one epoll set of the connections, no
// goroutine or system call per request.
//
// The handler runs the request up to the commit of its answer's status
// and headers. A body the engine sends with a length of at most
// maxInlineBody is then read into the response in the handler, so the
// answer goes out in one write with its header; any other body (an event
// stream, a body without a length, a larger one) is copied by bodyCopy,
// which fasthttp calls to write the body once it wrote the header: each
// Write is one chunk, flushed (chunked bodies), or part of a body of the
// engine's length. bodyCopy.WriteTo then ends the answer (attempt.done);
// bodyCopy.Close ends it when WriteTo never ran (the header write
// failed, or the response was dropped).
//
// The request's bookkeeping (attempt.settle: the leg's end, metrics, the
// log line, the trace's end, the body's buffer) runs after fasthttp wrote
// and flushed the answer: each connection is a fastConn, which holds the
// request it serves, and the server's ConnState hook settles it when the
// connection turns idle (the answer is out; a pipelined next request is
// read after it) or closes.

// maxInlineBody bounds the engine's body the handler reads whole into the
// response (the usual non-streamed completion is a few kilobytes); a
// longer one streams at its length.
const maxInlineBody = 64 << 10

// writeBufferSize is a connection's write buffer, which an open stream
// holds for as long as it is open (fasthttp's default is 4 KiB): an
// event is a few hundred bytes, and so is a response's head, so 2 KiB
// saves 2 KiB of heap per open stream (about 5 KB of RSS at 1000 streams,
// BENCHMARKS.md §2). A plain answer's head and body leave in one write
// up to about 1.7 KB of body, in two beyond.
const writeBufferSize = 2 << 10

// fastFront is a request on fasthttp's server: both sides of it.
type fastFront struct {
	ctx *fasthttp.RequestCtx
	c   context.Context // the connection's: ends when the client leaves
	fc  *fastConn       // nil: the request settles in the handler
	// meth and p are the method and path, as shared strings when known.
	meth, p string
	// out is the body's writer while bodyCopy.WriteTo runs (nil before:
	// writes go into the response's buffer); n counts what went to it.
	out     io.Writer
	n       int64
	aborted bool
	copy    bodyCopy
}

var (
	_ inbound    = (*fastFront)(nil)
	_ answer     = (*fastFront)(nil)
	_ laterBody  = (*fastFront)(nil)
	_ settler    = (*fastFront)(nil)
	_ lastWriter = (*fastFront)(nil)
)

// fastConn is an API connection as fasthttp's server has it, below TLS
// and above the departure watch: the watch's context, found once at
// accept, the front of the request it serves (HTTP/1.1: one at a time),
// and that request, settled once its answer is out (connSet.track).
type fastConn struct {
	net.Conn
	ctx   context.Context
	set   *connSet
	front fastFront
	// end is the request to settle; only the connection's goroutine
	// touches it (the handler, then fasthttp's ConnState hook).
	end *attempt
	// held is what Write kept while holding (fastFront.writeLast: a
	// body's last chunk), to go out in one write with the next: the last
	// chunk fasthttp writes and flushes right after. Only the
	// connection's goroutine touches them.
	held    *[]byte
	holding bool
}

// NetConn is the connection under c (hangup.Context and hangup.Linger
// find the watch's through it, as through *tls.Conn).
func (c *fastConn) NetConn() net.Conn { return c.Conn }

// Write writes p to the connection, after what it held.
func (c *fastConn) Write(p []byte) (int, error) {
	if c.held == nil && !c.holding {
		return c.Conn.Write(p)
	}
	if c.held == nil {
		c.held = heldBufs.Get().(*[]byte)
	}
	if b := *c.held; len(b)+len(p) <= cap(b) {
		*c.held = append(b, p...)
		if c.holding {
			return len(p), nil
		}
		return len(p), c.sendHeld()
	}
	// p does not fit: what was held goes first.
	if err := c.sendHeld(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// sendHeld writes what c held and lets its buffer go.
func (c *fastConn) sendHeld() error {
	var err error
	if b := *c.held; len(b) > 0 {
		_, err = c.Conn.Write(b)
	}
	c.dropHeld()
	return err
}

// dropHeld lets the held buffer go, written or not.
func (c *fastConn) dropHeld() {
	*c.held = (*c.held)[:0]
	heldBufs.Put(c.held)
	c.held = nil
}

// heldBufs recycle fastConn's held writes: an event stream's last chunk
// (the relay reads an event stream in 4 KiB) and the last chunk after it.
var heldBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10+64); return &b }}

// fastListener makes each accepted connection a fastConn.
type fastListener struct {
	net.Listener
	set *connSet
}

func (l fastListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &fastConn{Conn: c, ctx: connContext(c), set: l.set}, nil
}

// fastConnOf is the fastConn c is or wraps (through NetConn, as a
// *tls.Conn does), or nil.
func fastConnOf(c net.Conn) *fastConn {
	for {
		switch v := c.(type) {
		case *fastConn:
			return v
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
}

// serveFast is the fasthttp handler of the API. A panic is logged and
// ends the connection, as net/http's server does (fasthttp would end the
// process).
func (s *Server) serveFast(ctx *fasthttp.RequestCtx) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("panic serving a request", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			_ = ctx.Conn().Close()
		}
	}()
	var f *fastFront
	if fc := fastConnOf(ctx.Conn()); fc != nil {
		fc.front = fastFront{ctx: ctx, c: fc.ctx, fc: fc}
		f = &fc.front
	} else {
		f = &fastFront{ctx: ctx, c: connContext(ctx.Conn())}
	}
	f.meth = knownString(ctx.Method(), http.MethodPost, http.MethodGet)
	f.p = knownString(ctx.Path(), inferencePaths[0], inferencePaths[1], inferencePaths[2], "/v1/models")
	s.serveAPI(f, f)
}

// knownString is b as the one of known it equals, without allocating, or
// else as a copy.
func knownString(b []byte, known ...string) string {
	for _, k := range known {
		if string(b) == k {
			return k
		}
	}
	return string(b)
}

// connContext is the context of the connection under c (below TLS): the
// departure watch's, cancelled when the client leaves. A connection
// without one never ends the request's context.
func connContext(c net.Conn) context.Context {
	if ctx, ok := hangup.Context(c); ok {
		return ctx
	}
	return context.Background()
}

// view is b as a string without a copy: only for reading it while fasthttp
// keeps b unchanged (the request's header and body live until the
// response is written).
func view(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// bytesOf is s as a byte slice for fasthttp calls that copy it.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

func (f *fastFront) Context() context.Context { return f.c }
func (f *fastFront) method() string           { return f.meth }
func (f *fastFront) path() string             { return f.p }
func (f *fastFront) header(key string) string { return string(f.ctx.Request.Header.Peek(key)) }
func (f *fastFront) bearer() string           { return view(f.ctx.Request.Header.Peek("Authorization")) }

func (f *fastFront) contentLength() int64 {
	if n := f.ctx.Request.Header.ContentLength(); n >= 0 {
		return int64(n)
	}
	return -1
}

// readBody is the body fasthttp read before the handler (bounded by
// max_body_bytes and read_body there: newFastServer), the buffer the
// proxy parses and sends upstream from. fasthttp's buffer is lent as it
// is (lentBody) when it is no bigger than the router's own would be:
// sized for the body's length, which is the usual case and every long
// prompt's. The proxy hands it back when it releases the body (at the
// stream's first byte, or the request's end), before fasthttp reuses the
// request. A buffer bigger than that (fasthttp's pool gave a short body
// a long one's) is copied from and handed back at once, so that a stream
// never keeps more than its own body's buffer.
func (f *fastFront) readBody(limit int64, _ time.Duration) (*bodyBuf, error) {
	b := f.ctx.Request.Body()
	if int64(len(b)) > limit { // the limit was lowered since fasthttp read it
		bb := newBodyBuf(1, limit+1)
		return bb, fmt.Errorf("%w: the limit is %d bytes", ErrTooLarge, limit)
	}
	if bb := lentBody(b, limit+1, &f.ctx.Request); bb != nil {
		return bb, nil
	}
	bb := newBodyBuf(len(b)+1, limit+1)
	bb.b = append(bb.b, b...)
	f.ctx.Request.ResetBody()
	return bb, nil
}

// upstreamHeader copies the forwarded fields of fasthttp's header (its
// server normalised their keys) into dst without a conversion.
func (f *fastFront) upstreamHeader(p *provider, dst *fasthttp.RequestHeader) {
	for k, v := range f.ctx.Request.Header.All() {
		if forwarded(view(k)) {
			dst.AddBytesKV(k, v)
		}
	}
	upstreamAuth(dst, p)
}

func (f *fastFront) carrier() propagation.TextMapCarrier { return fastCarrier{&f.ctx.Request.Header} }

// fastCarrier reads a trace context from fasthttp's request header.
type fastCarrier struct{ h *fasthttp.RequestHeader }

func (c fastCarrier) Get(key string) string { return string(c.h.Peek(key)) }
func (c fastCarrier) Set(string, string)    {}
func (c fastCarrier) Keys() []string {
	var keys []string
	for k := range c.h.All() {
		keys = append(keys, string(k))
	}
	return keys
}

func (f *fastFront) setHeader(key string, values []string) {
	h := &f.ctx.Response.Header
	h.SetCanonical(bytesOf(key), bytesOf(values[0]))
	for _, v := range values[1:] {
		h.Add(key, v)
	}
}

func (f *fastFront) delHeader(key string) { f.ctx.Response.Header.Del(key) }

func (f *fastFront) copyHeader(src *fasthttp.ResponseHeader) {
	dst := &f.ctx.Response.Header
	engineFields(src, func(k, v []byte, again bool) {
		if again {
			dst.AddBytesKV(k, v)
		} else {
			dst.SetCanonical(k, v)
		}
	})
}

func (f *fastFront) commit(status int) { f.ctx.SetStatusCode(status) }

func (f *fastFront) Write(p []byte) (int, error) {
	if f.out == nil {
		f.ctx.Response.AppendBody(p)
		return len(p), nil
	}
	n, err := f.out.Write(p)
	f.n += int64(n)
	return n, err
}

// flush has nothing to do: fasthttp flushes each chunk it writes.
func (f *fastFront) flush() error { return nil }

// writeLast writes the body's last bytes as a chunk that the connection
// holds until fasthttp writes the body's last chunk and flushes, right
// after the relay returns: one write to the client, not two.
func (f *fastFront) writeLast(p []byte) error {
	if f.out == nil || f.fc == nil {
		_, err := f.Write(p)
		return err
	}
	f.fc.holding = true
	_, err := f.Write(p)
	f.fc.holding = false
	return err
}

// abort cuts the connection: at once when the body was still to go out
// with the header, else by WriteTo's error.
func (f *fastFront) abort() {
	if f.out != nil {
		f.aborted = true
		return
	}
	_ = f.ctx.Conn().Close()
}

func (f *fastFront) later(a *attempt, size int64, flushHead bool) bool {
	if f.out != nil || size >= 0 && size <= maxInlineBody { // an event stream's size is -1
		return false
	}
	f.copy = bodyCopy{f: f, a: a}
	f.ctx.Response.SetBodyStream(&f.copy, int(size))
	f.ctx.Response.ImmediateHeaderFlush = flushHead // the client sees the stream begin at once
	return true
}

// settleLater leaves a to the connection, which settles it once the
// answer is written and flushed, or once it closed.
func (f *fastFront) settleLater(a *attempt) bool {
	if f.fc == nil {
		return false
	}
	f.fc.end = a
	f.fc.set.settling.Add(1)
	return true
}

// bodyCopy is the body of an answer that fasthttp writes after the
// handler returned: WriteTo relays the engine's body and ends the
// request. It never reads (fasthttp calls WriteTo, BodyWriterTo).
type bodyCopy struct {
	f *fastFront
	a *attempt // nil once WriteTo or Close took it
}

var errNoRead = errors.New("router: the body is written with WriteTo")

func (*bodyCopy) Read([]byte) (int, error)  { return 0, errNoRead }
func (*bodyCopy) SupportsBodyWriteTo() bool { return true }

// errAborted fails the response's write so fasthttp closes the
// connection.
var errAborted = errors.New("router: the engine's body broke midway")

func (c *bodyCopy) WriteTo(w io.Writer) (int64, error) {
	a, f := c.a, c.f
	if a == nil {
		return 0, nil
	}
	c.a = nil
	f.out, f.n = w, 0
	a.copyBody()
	f.out = nil
	if f.aborted {
		return f.n, errAborted
	}
	return f.n, nil
}

// Close ends the request if WriteTo never ran.
func (c *bodyCopy) Close() error {
	if a := c.a; a != nil {
		c.a = nil
		a.abandon()
	}
	return nil
}

// fastError answers what fasthttp refuses before the handler, in the
// OpenAI shape: a header over max_header_bytes (431), a body over
// max_body_bytes (413), a large body while the bodies being received use
// their memory budget (503 body_memory_busy, pending.go), a request not
// read in time (408), a malformed one (400). fasthttp closes the
// connection after it; the close lingers (hangup.Conn.LingerOnClose).
func (s *Server) fastError(ctx *fasthttp.RequestCtx, err error, pending *pendingBodies) {
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	// The request's body reservation ends here, whatever the error.
	refused := pending.done(&ctx.Request.Header)
	retry := time.Duration(0)
	switch {
	case refused:
		// Refused unread by the budget (HeaderReceived), which fasthttp
		// reports as a body over its limit.
		err = fmt.Errorf("%w (%d bytes declared); retry shortly", ErrBodyMemory, ctx.Request.Header.ContentLength())
		retry = time.Second
	case errors.As(err, &small):
		err = fmt.Errorf("%w: the limit is %d bytes", ErrHeaderLarge, s.serveConfig().Limits.MaxHeaderBytes)
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		err = fmt.Errorf("%w: the limit is %d bytes", ErrTooLarge, s.serveConfig().Limits.MaxBodyBytes)
	case errors.As(err, &ne) && ne.Timeout():
		err = fmt.Errorf("%w: the request was not read in time", ErrReadTimeout)
	default:
		err = fmt.Errorf("%w: %s", ErrBadRequest, withoutRequestBytes(err.Error()))
	}
	f := &fastFront{ctx: ctx}
	writeError(f, err, retry)
	// fasthttp closes the connection next, maybe with the rest of the
	// refused request unread: read it off first, or the client's kernel
	// gets a reset and may drop this answer.
	hangup.Linger(ctx.Conn())
}

// newFastServer is the API's fasthttp server for the config's limits and
// timeouts: read_header bounds the header (from its first byte),
// read_body the body, idle a keep-alive connection's wait; there is no
// write timeout (a stream may last as long as the engine sends).
// max_header_bytes is the read buffer, so the request line and header
// must fit it; max_body_bytes, read again for each request from the
// running config, bounds the body. A connection holds its read buffer
// only while it reads a request, and its write buffer only while it
// writes a response (ReduceMemoryUsage): an open stream holds the write
// buffer alone.
func (s *Server) newFastServer(t config.Timeouts, l config.Limits, conns *connSet) *fasthttp.Server {
	pending := &conns.pending
	return &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			pending.done(&ctx.Request.Header) // the body is in
			s.serveFast(ctx)
		},
		ErrorHandler: func(ctx *fasthttp.RequestCtx, err error) { s.fastError(ctx, err, pending) },
		HeaderReceived: func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
			c := s.serveConfig()
			limit := c.Limits.MaxBodyBytes
			rc := fasthttp.RequestConfig{ReadTimeout: c.Timeouts.ReadBody.Duration, MaxRequestBodySize: int(limit)}
			if n := int64(h.ContentLength()); n <= limit && !pending.admit(h, n, pendingBudget(limit)) {
				// fasthttp refuses a body over its limit before it
				// allocates or reads any of it; fastError answers 503.
				rc.MaxRequestBodySize = 1
			}
			return rc
		},
		ReadBufferSize:               l.MaxHeaderBytes,
		WriteBufferSize:              writeBufferSize,
		ReadTimeout:                  t.ReadHeader.Duration,
		IdleTimeout:                  t.Idle.Duration,
		ReduceMemoryUsage:            true,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		DisablePreParseMultipartForm: true,
		CloseOnShutdown:              true,
		ConnState:                    conns.track,
		Logger:                       fastLogger{s.log},
	}
}

// fastLogger passes fasthttp's messages to the router's log.
type fastLogger struct{ log *slog.Logger }

func (l fastLogger) Printf(format string, args ...any) {
	l.log.Warn("api server", "msg", withoutRequestBytes(fmt.Sprintf(format, args...)))
}

// withoutRequestBytes is fasthttp's error text msg without the request's
// bytes it quotes after a header it could not parse ("…: buffer size=N,
// contents: …", the buffer's first and last 200 bytes): they hold the
// client's Authorization header, which is neither echoed to the client
// nor written to the log.
func withoutRequestBytes(msg string) string {
	if i := strings.Index(msg, ": buffer size="); i >= 0 {
		return msg[:i] + " (the request's bytes are not shown)"
	}
	return msg
}

// connSet is the API's open connections, closed when the drain deadline
// passed (fasthttp's Shutdown waits for them without closing them), and
// the requests waiting for their settle.
type connSet struct {
	mu sync.Mutex
	m  map[net.Conn]struct{}
	// settling counts the requests left to settle: fasthttp's Shutdown
	// returns once the connections' handlers are done, before the
	// ConnState hook of their close ran.
	settling sync.WaitGroup
	log      *slog.Logger
	// pending bounds the memory of the bodies being received (pending.go).
	pending pendingBodies
}

// track is fasthttp's ConnState hook. A connection turns idle once its
// answer was written and flushed (ReduceMemoryUsage flushes every
// answer), before a pipelined next request is read; it closes after a
// failed write or an answer with Connection: close. Either way its
// request is settled then, in the connection's goroutine.
func (cs *connSet) track(c net.Conn, st fasthttp.ConnState) {
	switch st {
	case fasthttp.StateIdle, fasthttp.StateClosed, fasthttp.StateHijacked:
		fc := fastConnOf(c)
		if fc != nil && fc.held != nil {
			// Nothing followed a held write (the answer's flush always
			// does): it goes now, or with a closed connection, nowhere.
			if st == fasthttp.StateClosed {
				fc.dropHeld()
			} else {
				_ = fc.sendHeld()
			}
		}
		if fc != nil && fc.end != nil {
			a := fc.end
			fc.end = nil
			a.body.disown()
			cs.settle(a)
		}
	}
	switch st {
	case fasthttp.StateNew:
		cs.mu.Lock()
		if cs.m == nil {
			cs.m = map[net.Conn]struct{}{}
		}
		cs.m[c] = struct{}{}
		cs.mu.Unlock()
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		cs.mu.Lock()
		delete(cs.m, c)
		cs.mu.Unlock()
	}
}

// settle settles a; a panic is logged (fasthttp's hook would end the
// process), as serveFast logs one in the handler.
func (cs *connSet) settle(a *attempt) {
	defer cs.settling.Done()
	defer func() {
		if v := recover(); v != nil {
			cs.log.Error("panic settling a request", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		}
	}()
	a.settle()
}

// settled waits until no request is left to settle, or ctx ends.
func (cs *connSet) settled(ctx context.Context) error {
	ch := make(chan struct{})
	go func() { cs.settling.Wait(); close(ch) }()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (cs *connSet) closeAll() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for c := range cs.m {
		_ = c.Close()
	}
}

// frontKind picks the API's server in Serve.
type frontKind int

const (
	frontAuto frontKind = iota // fasthttp where the departure watch runs (Linux), else net/http
	frontStd                   // net/http
	frontFast                  // fasthttp (tests; fails Serve where there is no departure watch)
)

// apiServer is the API's fasthttp server on api, under the departure
// watch (router/hangup: the context of each connection ends when its
// client leaves), or nil when the API runs on net/http, whose background
// read notices a departure: where the watch does not run (not Linux), or
// when the front is pinned to net/http. stop ends the watch once the
// server is done.
func (s *Server) apiServer(api net.Listener, base context.Context, t config.Timeouts, l config.Limits) (srv listenerServer, stop func(), err error) {
	stop = func() {}
	if s.front == frontStd {
		return nil, stop, nil
	}
	w, err := hangup.New()
	if err != nil {
		if s.front == frontFast {
			return nil, stop, err
		}
		s.log.Info("no client departure watch here: the API runs on net/http", "err", err)
		return nil, stop, nil
	}
	conns := &connSet{log: s.log}
	var ln net.Listener = fastListener{w.Listener(api, base), conns}
	stop = func() { _ = w.Close() }
	if s.wrapAPI != nil {
		ln = s.wrapAPI(ln)
	}
	return fastServer{s.newFastServer(t, l, conns), ln, conns}, stop, nil
}

// fastServer is the API's fasthttp server as Serve drives it.
type fastServer struct {
	srv   *fasthttp.Server
	ln    net.Listener
	conns *connSet
}

func (x fastServer) serve() error { return x.srv.Serve(x.ln) }

// shutdown drains the server, then waits for the requests it served to
// settle (their log lines and metrics).
func (x fastServer) shutdown(ctx context.Context) error {
	if err := x.srv.ShutdownWithContext(ctx); err != nil {
		return err
	}
	return x.conns.settled(ctx)
}
func (x fastServer) close() { x.conns.closeAll() }
