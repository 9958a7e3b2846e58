package router

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// fastTransport is the router's upstream client, over fasthttp's
// HostClient (one per scheme and host). The proxy hands it a request in
// fasthttp's own types (outbound: the header built straight from the
// client's, router/DESIGN.md "The way to the engine") and gets the
// engine's response as a reply, whose header is fasthttp's as read from
// the connection: no net/http types in between. The request is written
// and its response read in the calling goroutine: no read and write loop
// goroutines per connection and no channel hand-off per request, as
// net/http.Transport has. Connections are pooled keep-alive, dialled with
// the running config's connect timeout; bodies pass through as the
// engine sent them (no transparent compression).
//
// Time bounds are the connection's own deadlines, set once per try and
// once at the response's header: the first-byte bound covers the write
// and the wait for the header, the request's deadline the body. Neither
// takes a timer or a context of its own per request (Go's poller keeps
// one timer per connection and resets it). Cancellation: the client's
// context (its departure) closes the connection, whether the request is
// still being written, waits for its first byte, or its body is being
// read, so the engine sees the client leave at once. A connection kept
// idle in the pool that the engine closed is found when it is used: a
// request that got no byte back on such a connection is sent once more on
// a fresh one (the engine never read it), as net/http does for a
// replayable request.
//
// rt, when set (Options.Transport), carries the requests instead: the
// request and the response are converted to and from net/http's types at
// that edge (roundtrip.go).
type fastTransport struct {
	// connectTimeout bounds a dial; connected observes a new connection.
	connectTimeout func() time.Duration
	connected      func(start time.Time)
	// tls configures https engines (nil: the system's roots).
	tls *tls.Config
	rt  http.RoundTripper

	plain, secure sync.Map // host → *fasthttp.HostClient, for http and https
}

// outbound is one request to an engine as the proxy (and the health
// checks) hand it to the upstream client.
type outbound struct {
	// ctx ends when the client leaves: the connection is closed then.
	ctx context.Context
	url *url.URL
	// req has its method and header set (the client's fields the engine
	// gets, the provider's Authorization, the request id); send sets the
	// URI and the body and gives req back to its pool.
	req  *fasthttp.Request
	body *splicedBody // nil: none
	// firstByte bounds the write and the wait for the response's header;
	// deadline the rest (zero: no bound).
	firstByte, deadline time.Time
}

// reply is an engine's response as the proxy relays it: the status, the
// header as fasthttp read it (keys canonical), the body's declared length
// (-1: none) and the body.
type reply struct {
	StatusCode    int
	ContentLength int64
	// Header is nil once dropped (drop): an open stream need not hold it.
	Header *fasthttp.ResponseHeader
	Body   io.ReadCloser
	resp   *fasthttp.Response // Header's, back to its pool on drop
}

// get is the header's first value of key ("" when absent or dropped).
func (r *reply) get(key string) string {
	if r.Header == nil {
		return ""
	}
	return string(r.Header.Peek(key))
}

// drop lets the header go (to its pool); the body stays readable.
func (r *reply) drop() {
	if r.resp != nil {
		fasthttp.ReleaseResponse(r.resp)
	}
	r.resp, r.Header = nil, nil
}

// close closes the body and lets the header go. It is for the goroutine
// serving the request; a timer cutting a body closes Body alone.
func (r *reply) close() {
	r.Body.Close()
	r.drop()
}

// Upstream connection pool and buffer sizes.
const (
	// upstreamReadBuffer is held while a response header is read, then
	// handed back (the body is read into the relay's buffer, client.go
	// Read); it bounds the engine's response header (fasthttp parses it
	// in the buffer): an engine's is a few hundred bytes, a hosted API's
	// 1-2 KiB.
	upstreamReadBuffer = 4 << 10
	// upstreamWriteBuffer is held while a request is written.
	upstreamWriteBuffer = 4 << 10
	// upstreamIdle closes a pooled connection idle this long: below
	// uvicorn's (vLLM's server) 5 s keep-alive, so the pool rarely holds
	// a connection the engine already closed.
	upstreamIdle = 4 * time.Second
	// upstreamMaxConns is far above any engine's concurrency: the router
	// never queues for a connection.
	upstreamMaxConns = 1 << 16
)

func newFastTransport(s *Server, rt http.RoundTripper) *fastTransport {
	return &fastTransport{
		rt: rt,
		connectTimeout: func() time.Duration {
			if sn := s.snap.Load(); sn != nil {
				return sn.cfg.Timeouts.Connect.Duration
			}
			return 5 * time.Second
		},
		connected: func(start time.Time) { s.stages.observe(stageUpstreamConnect, start) },
	}
}

// host returns the HostClient of scheme and host, made on first use.
func (t *fastTransport) host(scheme, host string) *fasthttp.HostClient {
	isTLS := scheme == "https"
	m := &t.plain
	if isTLS {
		m = &t.secure
	}
	if hc, ok := m.Load(host); ok {
		return hc.(*fasthttp.HostClient)
	}
	addr := host
	if _, _, err := net.SplitHostPort(host); err != nil {
		addr = fasthttp.AddMissingPort(host, isTLS)
	}
	d := &net.Dialer{KeepAlive: 30 * time.Second}
	hc := &fasthttp.HostClient{
		Addr:      addr,
		IsTLS:     isTLS,
		TLSConfig: t.tls,
		DialTimeout: func(addr string, _ time.Duration) (net.Conn, error) {
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), t.connectTimeout())
			defer cancel()
			c, err := d.DialContext(ctx, "tcp", addr)
			if err == nil {
				t.connected(start)
			}
			return c, err
		},
		MaxConns:                  upstreamMaxConns,
		MaxIdleConnDuration:       upstreamIdle,
		ReadBufferSize:            upstreamReadBuffer,
		WriteBufferSize:           upstreamWriteBuffer,
		ConnPoolStrategy:          fasthttp.LIFO,
		NoDefaultUserAgentHeader:  true,
		DisablePathNormalizing:    true,
		MaxIdemponentCallAttempts: 1,
		StreamResponseBody:        true,
	}
	if got, loaded := m.LoadOrStore(host, hc); loaded {
		return got.(*fasthttp.HostClient)
	}
	return hc
}

// call is one upstream round trip, from send to the close of the body of
// the reply it returns, which is part of it: one allocation holds the
// request's state on both sides of the connection.
type call struct {
	ctx context.Context
	// resend: the request may be sent again on a new connection (until
	// the engine answered); spliced is its body kept whole for that, n its
	// length (0: none).
	resend  bool
	spliced splicedBody
	n       int
	// firstByte and deadline are outbound's.
	firstByte, deadline time.Time

	head bool // a HEAD request: the response has no body

	// Set once the response header is read.
	resp    *fasthttp.Response   // until response hands it to out
	body    upstreamBody         // the body's framing and what came with the header
	keep    bool                 // the engine did not ask to close the connection
	hc      *fasthttp.HostClient // the pool conn goes back to (release)
	cc      any                  // conn as hc's pool knows it (fasthttp's *clientConn)
	conn    net.Conn             // the connection it reads from
	stop    func() bool          // unregisters the context's close of conn
	mu      sync.Mutex           // held by Read and waitReadable
	closed  atomic.Bool          // Close ran or began
	aborted atomic.Bool          // the context closed conn
	eof     bool                 // the body was read to its end

	// out is what send returns, its Body the call.
	out reply

	// raw waits for conn to be readable without a buffer (nil: a TLS
	// connection, whose reads go through its own record buffer);
	// readable is its callback: a look (waitReadable: woke and peek its
	// state) or, while readPooled runs (pool set), the read itself into
	// bufp, whose result is got and rerr.
	raw      syscall.RawConn
	readable func(fd uintptr) bool
	pool     *sync.Pool
	bufp     *[]byte
	got      int
	rerr     error
	woke     bool
	peek     [1]byte
	once     sync.Once
}

// send writes x's request and reads the engine's response header; the
// body is read through the reply's Body, which the caller closes.
func (t *fastTransport) send(x *outbound) (*reply, error) {
	if t.rt != nil {
		return t.roundTrip(x)
	}
	req := x.req
	if err := x.ctx.Err(); err != nil {
		fasthttp.ReleaseRequest(req)
		return nil, err
	}
	hc := t.host(x.url.Scheme, x.url.Host)
	c := newCall(x)
	// HostClient.Do would add a retry loop (off: MaxIdemponentCallAttempts
	// 1), deadlines of its own (ReadTimeout, WriteTimeout: unset) and three
	// frames to the stack a request waits on for its first byte; what else
	// it does before calling the transport newCall does.
	err := c.roundTrip(hc, req, c.resp)
	if err == io.EOF {
		err = fasthttp.ErrConnectionClosed // as Do reports it
	}
	fasthttp.ReleaseRequest(req)
	if err != nil {
		fasthttp.ReleaseResponse(c.resp)
		if cerr := x.ctx.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}
	return c.response(), nil
}

// newCall sets x's request URI and body and makes the call that will
// carry it and its response.
func newCall(x *outbound) *call {
	req, resp := x.req, fasthttp.AcquireResponse()
	// Neither side gets a Content-Type the engine or client did not send.
	req.Header.SetNoDefaultContentType(true)
	resp.Header.SetNoDefaultContentType(true)
	u := req.URI()
	u.DisablePathNormalizing = true
	u.SetScheme(x.url.Scheme)
	u.SetHost(x.url.Host)
	u.SetPath(x.url.Path)
	if x.url.RawQuery != "" {
		u.SetQueryString(x.url.RawQuery)
	}
	c := &call{ctx: x.ctx, resp: resp, resend: true, head: req.Header.IsHead(),
		firstByte: x.firstByte, deadline: x.deadline}
	if x.body != nil {
		c.n = int(x.body.n)
		c.spliced = *x.body
		req.SetBodyStream(x.body, c.n)
	}
	return c
}

// Close lets the router's body be an http.Request's Body as it is (not
// wrapped), for a transport given in Options.
func (b *splicedBody) Close() error { return nil }

// roundTrip writes req on a pooled connection of hc and reads the
// response header, in the caller's goroutine; the body is left on the
// connection for the reply's Body. The request's context closes the
// connection until that Body is closed.
func (c *call) roundTrip(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) error {
	retry, err := c.try(hc, req, resp)
	if !retry || !c.resend {
		return err
	}
	// A pooled connection the engine had closed: send once more on a new
	// one, with the call's whole copy of the body (the first try read the
	// caller's), which this last try reads.
	if c.n > 0 {
		req.SetBodyStream(&c.spliced, c.n)
	}
	_, err = c.try(hc, req, resp)
	return err
}

// try is one try of roundTrip. retry reports a connection that
// had served requests before and gave nothing back for this one: the
// engine closed it while it was idle. Writing and reading are functions
// of their own so that the frames a request waits under for its first
// byte stay small (router/DESIGN.md, "Memory per in-flight request").
func (c *call) try(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) (retry bool, err error) {
	cc, err := hc.AcquireConn(0, false)
	if err != nil {
		return false, err
	}
	reused := !cc.LastUseTime().IsZero()
	c.hc, c.cc, c.conn = hc, cc, cc.Conn()
	c.aborted.Store(false)
	// A pooled connection keeps the deadlines its last request left: each
	// try sets both. fasthttp sets none itself on a connection taken with
	// AcquireConn (only Do does, for ReadTimeout and WriteTimeout, which
	// are unset: client.go in fasthttp v1.78.0), and its pool's cleaner
	// closes idle connections by their last use, not by a deadline.
	_ = c.conn.SetDeadline(c.firstByte)
	// The context closes the connection from the write on for a large
	// body, which the engine may take its time to read; a small one is
	// written without blocking, and the watch (several allocations) is set
	// up in the engine's time, after it. A context that ended meanwhile
	// closes the connection at once then.
	c.stop = unwatched
	early := c.n > watchWriteAbove
	if early {
		c.stop = context.AfterFunc(c.ctx, c.abort)
	}
	if err = c.write(hc, req); err == nil {
		if !early {
			c.stop = context.AfterFunc(c.ctx, c.abort)
		}
		// The engine's queue and prefill are waited out holding no buffer
		// (waitReadable) under this small frame.
		c.watch()
		c.waitReadable()
		if err = c.readHeader(hc, resp); err == nil {
			return false, nil
		}
	}
	c.stop()
	hc.CloseConn(cc)
	if c.aborted.Load() {
		return false, c.ctx.Err()
	}
	return reused && staleConn(err), err
}

// watchWriteAbove is the request body above which the context watches the
// connection while the request is written (a socket's send buffer takes
// a smaller one whole).
const watchWriteAbove = 64 << 10

// unwatched is the stop of a call whose context does not watch its
// connection (yet).
func unwatched() bool { return true }

// write writes req on c.conn through a pooled writer.
func (c *call) write(hc *fasthttp.HostClient, req *fasthttp.Request) error {
	bw := hc.AcquireWriter(c.conn)
	err := req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	hc.ReleaseWriter(bw)
	return err
}

// readHeader reads the response header into resp and sets up the body.
// The reader is held only while the header is read, once the engine
// started answering; what came after the header is copied out (usually
// nothing, or the first event), and the body is read from the connection
// straight into the caller's buffer.
func (c *call) readHeader(hc *fasthttp.HostClient, resp *fasthttp.Response) error {
	br := hc.AcquireReader(c.conn)
	err := readHeader(br, &resp.Header)
	if err == nil {
		c.body = newUpstreamBody(&resp.Header, c.head)
		if k := br.Buffered(); k > 0 {
			b, _ := br.Peek(k)
			c.body.pending = append([]byte(nil), b...)
		}
		// The engine answered: the body will not be sent again, and the
		// stream need not keep it.
		c.resend, c.spliced = false, splicedBody{}
		c.keep = !resp.ConnectionClose()
		// From here the request's deadline bounds the body (the first
		// byte's bound did the write and the header).
		_ = c.conn.SetReadDeadline(c.deadline)
	} else if errors.Is(err, fasthttp.ErrTimeout) {
		err = errFirstByte
	}
	hc.ReleaseReader(br)
	return err
}

// errFirstByte is a try whose engine did not begin its answer within the
// first-byte timeout (or the request's deadline, when sooner).
var errFirstByte = errors.New("no response header within the first-byte timeout")

// release hands the connection back to its pool (reuse), or closes it.
func (c *call) release(reuse bool) {
	if reuse {
		giveBack(c.hc.ReleaseConn, c.cc)
	} else {
		giveBack(c.hc.CloseConn, c.cc)
	}
}

// giveBack calls f with cc as f's parameter type: fasthttp's pool takes
// its connections as a type it does not export, which a call keeps in an
// interface (holding the pointer allocates nothing, as a closure over it
// would).
func giveBack[C any](f func(C), cc any) { f(cc.(C)) }

// abort closes the connection when the request's context ends.
func (c *call) abort() {
	c.aborted.Store(true)
	_ = c.conn.Close()
}

// staleConn reports an error a keep-alive connection closed by its peer
// gives before any response byte.
func staleConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, fasthttp.ErrConnectionClosed)
}

// response is the call's reply: the header as read, the body c.
func (c *call) response() *reply {
	h := &c.resp.Header
	c.out = reply{StatusCode: h.StatusCode(), ContentLength: int64(h.ContentLength()), Header: h, Body: c, resp: c.resp}
	if c.out.ContentLength < 0 {
		c.out.ContentLength = -1
	}
	c.resp = nil
	return &c.out
}

// maxInterim bounds the 1xx responses skipped before the real one.
const maxInterim = 8

var errInterim = errors.New("router: too many 1xx responses from the engine")

// readHeader reads the response header from br, skipping interim 1xx
// responses (101 Switching Protocols is final).
func readHeader(br *bufio.Reader, h *fasthttp.ResponseHeader) error {
	for n := 0; ; n++ {
		if err := h.Read(br); err != nil {
			return err
		}
		if code := h.StatusCode(); code < 100 || code > 199 || code == http.StatusSwitchingProtocols {
			return nil
		}
		if n == maxInterim {
			return errInterim
		}
	}
}

// newUpstreamBody returns the framing of the body that follows h.
func newUpstreamBody(h *fasthttp.ResponseHeader, head bool) upstreamBody {
	code, cl := h.StatusCode(), h.ContentLength()
	switch {
	case head || code < 200 || code == http.StatusNoContent || code == http.StatusNotModified || cl == 0:
		return upstreamBody{kind: bodyNone, end: true}
	case cl == -1:
		return upstreamBody{kind: bodyChunked}
	case cl < 0:
		return upstreamBody{kind: bodyToEOF}
	}
	return upstreamBody{kind: bodySized, left: int64(cl)}
}

// watch sets up waitReadable and readPooled for c.conn when it is a
// plain TCP connection.
func (c *call) watch() {
	c.raw = nil
	sc, ok := c.conn.(syscall.Conn)
	if !ok || !canPeek {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	c.raw = raw
	if c.readable == nil {
		c.readable = c.onReadable
	}
}

// onReadable is c.raw's read callback: true ends the wait, false waits
// for the poller to see the socket turn readable, then it is called
// again.
func (c *call) onReadable(fd uintptr) bool {
	if c.pool == nil {
		// waitReadable: called again after the poller saw the socket
		// turn readable, no second look needed.
		if c.woke {
			return true
		}
		c.woke = true
		return peekReadable(fd, c.peek[:])
	}
	// readPooled: the buffer is taken for the read and handed back if it
	// would block, before the wait.
	if c.bufp == nil {
		c.bufp = c.pool.Get().(*[]byte)
	}
	n, wait, err := readFD(fd, c.body.window(*c.bufp))
	if wait {
		c.pool.Put(c.bufp)
		c.bufp = nil
		return false
	}
	c.got, c.rerr = n, err
	return true
}

var (
	errBodyClosed = errors.New("router: read on a closed upstream body")
	// errDeadline is a body cut by the request's deadline.
	errDeadline = errors.New("the request's deadline passed")
)

// waitReadable blocks until a Read of the body will find something to
// return (bytes, the body's end, or an error it will report), holding no
// buffer (relayEvents: a resumable stream waits for its next event with
// none). It returns at once on a connection it cannot watch; a Close or
// the request's context ending ends the wait.
func (c *call) waitReadable() {
	if c.raw == nil || c.closed.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() || c.body.ready() {
		return
	}
	c.woke = false
	_ = c.raw.Read(c.readable) // an error is Read's to report
}

// readPooled reads the body as Read does, into a buffer it takes from
// pool and returns with the bytes (nil: it holds none, after an error),
// for the caller to put back. On a watched connection the read is made in
// the poller's callback, and a read that would block hands the buffer
// back before the goroutine waits: an open stream waiting for its next
// event holds none (proxy.go relay), and bytes already there cost one
// system call, not a look and then the read.
func (c *call) readPooled(pool *sync.Pool) (bufp *[]byte, n int, err error) {
	if c.closed.Load() {
		return nil, 0, errBodyClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return nil, 0, errBodyClosed
	}
	if c.raw == nil || c.body.end {
		bufp = pool.Get().(*[]byte)
		n, err = c.body.read(c.conn, *bufp)
		return bufp, n, c.readErr(err)
	}
	if len(c.body.pending) > 0 {
		bufp = pool.Get().(*[]byte)
		var again bool
		if n, again, err = c.body.takePending(*bufp); !again {
			return bufp, n, c.readErr(err)
		}
		c.bufp = bufp // only framing came with the header: read on with it
	}
	c.pool = pool
	for {
		if werr := c.raw.Read(c.readable); werr != nil {
			err = werr // the connection closed (Close, the context) while waiting
			break
		}
		var again bool
		n, again, err = c.body.frame(c.body.window(*c.bufp), c.got, c.rerr)
		if !again {
			break
		}
	}
	bufp, c.bufp, c.pool, c.rerr = c.bufp, nil, nil, nil
	return bufp, n, c.readErr(err)
}

// Read reads the response body from the upstream connection: what
// arrived with the header, else one read of the connection, so a burst of
// events the engine sent together is one read and one write to the client.
func (c *call) Read(p []byte) (int, error) {
	if c.closed.Load() {
		return 0, errBodyClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return 0, errBodyClosed
	}
	n, err := c.body.read(c.conn, p)
	return n, c.readErr(err)
}

// readErr notes the body's end, and reports a read the request's context
// cut (by closing the connection) as the context's error and one its
// deadline cut as errDeadline.
func (c *call) readErr(err error) error {
	switch {
	case err == io.EOF:
		c.eof = true
	case err == nil:
	case c.aborted.Load():
		if cerr := c.ctx.Err(); cerr != nil {
			err = cerr
		}
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = errDeadline
	}
	return err
}

// buffered reports whether the body's first data came with the header:
// the relay's first read will not wait.
func (c *call) buffered() bool { return c.body.hasData() }

// Close hands the connection back to the pool when the body was read to
// its end, and closes it otherwise (the engine sees the request end). It
// may run while a Read is blocked (a timer cutting a silent stream): it
// closes the connection, which ends the Read, and releases the
// connection once the Read returned.
func (c *call) Close() error {
	c.once.Do(func() {
		c.closed.Store(true)
		if !c.mu.TryLock() {
			_ = c.conn.Close()
			c.mu.Lock()
		}
		// A context that fired may still be closing conn.
		stopped := c.stop()
		c.release(c.eof && stopped && !c.aborted.Load() && c.keep && !c.body.over)
		c.mu.Unlock()
	})
	return nil
}

// CloseIdleConnections closes every pooled connection that no request
// holds (as http.Transport's method of the name). fasthttp's per-host
// cleaner goroutine exits on its next wake, at most upstreamIdle later.
func (t *fastTransport) CloseIdleConnections() {
	if c, ok := t.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
	for _, m := range []*sync.Map{&t.plain, &t.secure} {
		m.Range(func(_, hc any) bool {
			hc.(*fasthttp.HostClient).CloseIdleConnections()
			return true
		})
	}
}
