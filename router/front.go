package router

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/propagation"
)

// The client's side of a request, its "front". One proxy serves two HTTP
// servers: net/http's (Handler, and Serve where the departure watch is
// not available) and fasthttp's (Serve on Linux, front_fast.go). The
// proxy reads the request through inbound and answers through answer, and
// each server has one implementation of both. Every method is called from
// the goroutine serving the request: the handler's, or on fasthttp, once
// the status and headers are committed, the one that writes the body
// (bodyCopy.WriteTo).

// inbound is the client's request as the proxy reads it.
type inbound interface {
	// Context ends when the client leaves (its connection closes or
	// resets) or the server closes the connection.
	Context() context.Context
	method() string
	path() string
	// header is the first value of key ("" when absent). The string is
	// the proxy's to keep.
	header(key string) string
	// bearer is the Authorization header's value, read only while the
	// call that asked runs (it may alias the server's buffer).
	bearer() string
	// contentLength is the declared body length (-1: none).
	contentLength() int64
	// readBody reads the whole body into a pooled buffer (bodybuf.go):
	// at most limit bytes (more is an error wrapping ErrTooLarge), within
	// timeout. The caller releases the buffer, on error too.
	readBody(limit int64, timeout time.Duration) (*bodyBuf, error)
	// upstreamHeader adds the request's header for an engine to dst:
	// every field but the hop-by-hop ones, the client's credentials, the
	// body framing, the client's encodings and Host (forwarded), in the
	// client's order, and the provider's Authorization (upstreamAuth).
	upstreamHeader(p *provider, dst *fasthttp.RequestHeader)
	// carrier reads the client's trace context (traceparent).
	carrier() propagation.TextMapCarrier
}

// answer is the response to the client. Headers are set until commit;
// commit fixes the status and the headers; the body follows. On net/http
// commit writes them at once; on fasthttp they go out once the handler
// returned: with the body the handler wrote whole, in one write, or
// ahead of a body copied later (bodyCopy; an event stream's head is
// flushed at once).
type answer interface {
	// setHeader sets a canonical key's values (which it does not modify).
	setHeader(key string, values []string)
	delHeader(key string)
	// copyHeader copies an engine's response header, minus hop-by-hop
	// fields (engineFields): a key's values in the engine's order,
	// replacing what the answer had under it.
	copyHeader(src *fasthttp.ResponseHeader)
	commit(status int)
	Write(p []byte) (int, error)
	// flush sends what was written so far to the client.
	flush() error
	// abort cuts the connection after a body that broke midway, so the
	// client cannot take it as whole; it is called last, after done.
	abort()
}

// stdFront is a request on net/http's server: both sides of it.
type stdFront struct {
	w   http.ResponseWriter
	r   *http.Request
	ctl http.ResponseController
	p   string // the request's path, cleaned (cleanPath)
}

// cleanPath is a request's (decoded) path normalised as fasthttp's server
// normalises it before the handler: repeated slashes collapsed, "." and
// ".." segments resolved, a trailing slash kept. So both fronts route
// //v1/chat/completions, and send it upstream, as /v1/chat/completions.
func cleanPath(p string) string {
	if !strings.Contains(p, "//") && !strings.Contains(p, "/.") {
		return p
	}
	c := path.Clean(p)
	if c != "/" && (strings.HasSuffix(p, "/") || strings.HasSuffix(p, "/.") || strings.HasSuffix(p, "/..")) {
		c += "/"
	}
	return c
}

var (
	_ inbound = (*stdFront)(nil)
	_ answer  = (*stdFront)(nil)
)

func (f *stdFront) Context() context.Context { return f.r.Context() }
func (f *stdFront) method() string           { return f.r.Method }
func (f *stdFront) path() string             { return f.p }
func (f *stdFront) contentLength() int64     { return f.r.ContentLength }
func (f *stdFront) bearer() string           { return f.r.Header.Get("Authorization") }

func (f *stdFront) header(key string) string { return f.r.Header.Get(key) }

func (f *stdFront) readBody(limit int64, timeout time.Duration) (*bodyBuf, error) {
	// A client that trickles its body is cut after timeout; the deadline
	// is lifted again for the (long) streaming response.
	_ = f.ctl.SetReadDeadline(time.Now().Add(timeout))
	body, err := readBody(http.MaxBytesReader(f.w, f.r.Body, limit), f.r.ContentLength, limit)
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case err == nil:
	case errors.As(err, &mbe):
		// net/http closes the connection after the 413, reading a little
		// more of the body first so that the client reads the answer.
		err = fmt.Errorf("%w: the limit is %d bytes", ErrTooLarge, limit)
	default:
		// The rest of the body is never read: the connection closes after
		// the answer, and the read deadline stays passed, so net/http's
		// own read of the rest fails at once (a client that stalled its
		// body would hold the connection open forever).
		f.w.Header()["Connection"] = valueClose
		_ = f.ctl.SetReadDeadline(time.Now())
		if errors.As(err, &ne) && ne.Timeout() {
			err = fmt.Errorf("%w: the body was not read in time", ErrReadTimeout)
		}
		return body, err
	}
	_ = f.ctl.SetReadDeadline(time.Time{})
	return body, err
}

// upstreamHeader converts at net/http's edge: its header's keys are
// canonical (net/http's server wrote them), as forwarded wants them.
func (f *stdFront) upstreamHeader(p *provider, dst *fasthttp.RequestHeader) {
	for k, vs := range f.r.Header {
		if forwarded(k) {
			for _, v := range vs {
				dst.Add(k, v)
			}
		}
	}
	upstreamAuth(dst, p)
}

func (f *stdFront) carrier() propagation.TextMapCarrier { return propagation.HeaderCarrier(f.r.Header) }

func (f *stdFront) setHeader(key string, values []string) { f.w.Header()[key] = values }
func (f *stdFront) delHeader(key string)                  { delete(f.w.Header(), key) }
func (f *stdFront) commit(status int)                     { f.w.WriteHeader(status) }
func (f *stdFront) Write(p []byte) (int, error)           { return f.w.Write(p) }
func (f *stdFront) flush() error                          { return f.ctl.Flush() }
func (f *stdFront) abort()                                { panic(http.ErrAbortHandler) }

// copyHeader converts the engine's header at net/http's edge. A
// hop-by-hop field the answer had is dropped too.
func (f *stdFront) copyHeader(src *fasthttp.ResponseHeader) {
	dst := f.w.Header()
	engineFields(src, func(k, v []byte, again bool) {
		key := string(k)
		if again {
			dst[key] = append(dst[key], string(v))
		} else {
			dst[key] = []string{string(v)}
		}
	})
	for _, k := range hopHeaders {
		delete(dst, k)
	}
}

// Header values the router sets, shared by every response (setHeader
// does not modify them).
var (
	valueJSON    = []string{"application/json"}
	valueNoCache = []string{"no-cache"}
	valueClose   = []string{"close"}
	valuePOST    = []string{http.MethodPost}
	valueGET     = []string{http.MethodGet}
)
