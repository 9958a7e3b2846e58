package router

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// fastTransport is the default upstream transport, an http.RoundTripper
// over fasthttp's HostClient (one per scheme and host). The request is
// written and its response read in the calling goroutine: no read and
// write loop goroutines per connection and no channel hand-off per
// request, as net/http.Transport has (why: router/DESIGN.md). Connections
// are pooled keep-alive, dialled with the running config's connect
// timeout; bodies pass through as the engine sent them (no transparent
// compression).
//
// Cancellation: the request's context closes its connection, whether the
// request is still being written, waits for its first byte, or its body is
// being read, so the engine sees the client's departure (and a first-byte
// or idle timeout, which end the same context) at once. A connection
// kept idle in the pool that the engine closed is found when it is used:
// a request that got no byte back on such a connection is sent once more
// on a fresh one (the engine never read it), as net/http does for a
// replayable request.
type fastTransport struct {
	// connectTimeout bounds a dial; connected observes a new connection.
	connectTimeout func() time.Duration
	connected      func(start time.Time)
	// tls configures https engines (nil: the system's roots).
	tls *tls.Config

	hosts sync.Map // scheme + "://" + host → *fasthttp.HostClient
}

// Upstream connection pool and buffer sizes.
const (
	// upstreamReadBuffer is held by a response while its body is read
	// (one per open stream); it also bounds the response header.
	upstreamReadBuffer = 8 << 10
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

func newFastTransport(s *Server) *fastTransport {
	return &fastTransport{
		connectTimeout: func() time.Duration {
			if sn := s.snap.Load(); sn != nil {
				return sn.cfg.Timeouts.Connect.Duration
			}
			return 5 * time.Second
		},
		connected: func(start time.Time) { s.stages.observe(stageUpstreamConnect, start) },
	}
}

func (t *fastTransport) host(scheme, host string) *fasthttp.HostClient {
	key := scheme + "://" + host
	if hc, ok := t.hosts.Load(key); ok {
		return hc.(*fasthttp.HostClient)
	}
	isTLS := scheme == "https"
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
		Transport:                     roundTripFunc(roundTripInCaller),
		MaxConns:                      upstreamMaxConns,
		MaxIdleConnDuration:           upstreamIdle,
		ReadBufferSize:                upstreamReadBuffer,
		WriteBufferSize:               upstreamWriteBuffer,
		ConnPoolStrategy:              fasthttp.LIFO,
		NoDefaultUserAgentHeader:      true,
		DisablePathNormalizing:        true,
		DisableHeaderNamesNormalizing: false,
		MaxIdemponentCallAttempts:     1,
		StreamResponseBody:            true,
	}
	if got, loaded := t.hosts.LoadOrStore(key, hc); loaded {
		return got.(*fasthttp.HostClient)
	}
	return hc
}

// roundTripFunc adapts a function to fasthttp.RoundTripper.
type roundTripFunc func(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) (bool, error)

func (f roundTripFunc) RoundTrip(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) (bool, error) {
	return f(hc, req, resp)
}

// ctxKey is the fasthttp user value holding a request's *call.
const ctxKey = "rolter.call"

// call is one upstream round trip: what roundTripInCaller needs from
// RoundTrip, and what the body it returns needs from roundTripInCaller.
type call struct {
	ctx     context.Context
	getBody func() (io.ReadCloser, error) // a fresh copy of the body, for a resend (nil: none)
	n       int                           // the body's length

	// Set once the response header is read: release hands the connection
	// and its reader back (reuse: the body was read to its end) or
	// closes the connection; closed reports that the context closed it.
	release   func(reuse bool)
	interrupt func() // closes the connection
	closed    *atomic.Bool
}

// RoundTrip implements http.RoundTripper.
func (t *fastTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx := r.Context()
	if err := ctx.Err(); err != nil {
		closeBody(r)
		return nil, err
	}
	hc := t.host(r.URL.Scheme, r.URL.Host)
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	// Neither side gets a Content-Type the engine or client did not send.
	req.Header.SetNoDefaultContentType(true)
	resp.Header.SetNoDefaultContentType(true)
	req.Header.SetMethod(r.Method)
	u := req.URI()
	u.SetScheme(r.URL.Scheme)
	u.SetHost(r.URL.Host)
	u.SetPath(r.URL.Path)
	if r.URL.RawQuery != "" {
		u.SetQueryString(r.URL.RawQuery)
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	c := &call{ctx: ctx, getBody: r.GetBody}
	if r.Body != nil && r.Body != http.NoBody {
		c.n = int(r.ContentLength)
		req.SetBodyStream(r.Body, c.n)
	}
	req.SetUserValue(ctxKey, c)
	err := hc.Do(req, resp)
	fasthttp.ReleaseRequest(req)
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}
	return c.response(r, resp), nil
}

func closeBody(r *http.Request) {
	if r.Body != nil {
		r.Body.Close()
	}
}

// roundTripInCaller writes req on a pooled connection of hc and reads
// the response header; the body is left on the connection for the
// http.Response's Body. The request's context closes the connection
// until that Body is closed.
func roundTripInCaller(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) (bool, error) {
	c := req.UserValue(ctxKey).(*call)
	retry, err := c.once(hc, req, resp)
	if !retry || c.getBody == nil {
		return false, err
	}
	// A pooled connection the engine had closed: send once more on a new
	// one, with a fresh copy of the body.
	b, gerr := c.getBody()
	if gerr != nil {
		return false, err
	}
	req.SetBodyStream(b, c.n)
	_, err = c.once(hc, req, resp)
	return false, err
}

// once is one try of roundTripInCaller. retry reports a connection that
// had served requests before and gave nothing back for this one: the
// engine closed it while it was idle.
func (c *call) once(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) (retry bool, err error) {
	cc, err := hc.AcquireConn(0, false)
	if err != nil {
		return false, err
	}
	reused := !cc.LastUseTime().IsZero()
	conn := cc.Conn()
	closed := new(atomic.Bool)
	stop := context.AfterFunc(c.ctx, func() {
		closed.Store(true)
		_ = conn.Close()
	})
	bw := hc.AcquireWriter(conn)
	err = req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	hc.ReleaseWriter(bw)
	if err == nil {
		br := hc.AcquireReader(conn)
		resp.StreamBody = true
		if err = resp.ReadLimitBody(br, 0); err == nil {
			c.closed = closed
			c.interrupt = func() { _ = conn.Close() }
			c.release = func(reuse bool) {
				// A context that fired may still be closing conn.
				stopped := stop()
				_ = resp.CloseBodyStream()
				hc.ReleaseReader(br)
				if reuse && stopped && !resp.ConnectionClose() {
					hc.ReleaseConn(cc)
				} else {
					hc.CloseConn(cc)
				}
			}
			return false, nil
		}
		hc.ReleaseReader(br)
	}
	stop()
	hc.CloseConn(cc)
	if closed.Load() {
		return false, c.ctx.Err()
	}
	return reused && staleConn(err), err
}

// staleConn reports an error a keep-alive connection closed by its peer
// gives before any response byte.
func staleConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, fasthttp.ErrConnectionClosed)
}

// response converts fasthttp's response header and streamed body into
// an http.Response (header keys canonical, as net/http's would be).
func (c *call) response(r *http.Request, resp *fasthttp.Response) *http.Response {
	h := &resp.Header
	out := &http.Response{
		Status:     strconv.Itoa(h.StatusCode()) + " " + http.StatusText(h.StatusCode()),
		StatusCode: h.StatusCode(),
		Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        make(http.Header, h.Len()),
		ContentLength: int64(h.ContentLength()),
		Request:       r,
	}
	if out.ContentLength < 0 {
		out.ContentLength = -1
	}
	for k, v := range h.All() {
		key := string(k)
		out.Header[key] = append(out.Header[key], string(v))
	}
	out.Body = &streamBody{c: c, resp: resp, r: resp.BodyStream()}
	return out
}

// streamBody is a response body read from the upstream connection. Close
// may run while a Read is blocked (a timer cutting a silent stream): it
// closes the connection, which ends the Read, and releases the
// connection once the Read returned.
type streamBody struct {
	c      *call
	resp   *fasthttp.Response
	r      io.Reader
	mu     sync.Mutex // held by Read
	closed atomic.Bool
	eof    bool
	once   sync.Once
}

var errBodyClosed = errors.New("router: read on a closed upstream body")

func (b *streamBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, errBodyClosed
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return 0, errBodyClosed
	}
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.eof = true
	} else if err != nil && b.c.closed.Load() {
		if cerr := b.c.ctx.Err(); cerr != nil {
			err = cerr
		}
	}
	return n, err
}

// Close hands the connection back to the pool when the body was read to
// its end, and closes it otherwise (the engine sees the request end).
func (b *streamBody) Close() error {
	b.once.Do(func() {
		b.closed.Store(true)
		if !b.mu.TryLock() {
			b.c.interrupt()
			b.mu.Lock()
		}
		b.c.release(b.eof)
		b.mu.Unlock()
		fasthttp.ReleaseResponse(b.resp)
	})
	return nil
}

// CloseIdleConnections closes every pooled connection that no request
// holds (as http.Transport's method of the name). fasthttp's per-host
// cleaner goroutine exits on its next wake, at most upstreamIdle later.
func (t *fastTransport) CloseIdleConnections() {
	t.hosts.Range(func(_, hc any) bool {
		hc.(*fasthttp.HostClient).CloseIdleConnections()
		return true
	})
}
