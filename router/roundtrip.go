package router

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// The edge to a transport given in Options (tests, an embedder's own):
// the upstream request is converted to an *http.Request and the response
// from an *http.Response, so that the proxy speaks the upstream client's
// types only (client.go). The time bounds a connection's deadlines give
// the router's own client are a context here: cancelled at the first-byte
// bound until the response arrives, then at the request's deadline.

// roundTrip sends x through t.rt.
func (t *fastTransport) roundTrip(x *outbound) (*reply, error) {
	if err := x.ctx.Err(); err != nil {
		fasthttp.ReleaseRequest(x.req)
		return nil, err
	}
	ctx, cancel := context.WithCancel(x.ctx)
	r := &http.Request{Method: string(x.req.Header.Method()), URL: x.url, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: make(http.Header), Host: x.url.Host}
	for k, v := range x.req.Header.All() {
		r.Header.Add(string(k), string(v))
	}
	fasthttp.ReleaseRequest(x.req)
	if b := x.body; b != nil {
		body := *b
		r.Body, r.ContentLength = &body, b.n
		r.GetBody = func() (io.ReadCloser, error) { again := *b; return &again, nil }
	}
	timer := time.AfterFunc(until(x.firstByte), cancel)
	resp, err := t.rt.RoundTrip(r.WithContext(ctx))
	if err != nil {
		timer.Stop()
		cancel()
		if cerr := x.ctx.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}
	if timer.Stop() {
		timer.Reset(until(x.deadline))
	}
	out := fasthttp.AcquireResponse()
	h := &out.Header
	h.SetNoDefaultContentType(true)
	h.SetStatusCode(resp.StatusCode)
	for k, vs := range resp.Header {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	return &reply{StatusCode: resp.StatusCode, ContentLength: resp.ContentLength, Header: h, resp: out,
		Body: &cancelOnClose{ReadCloser: resp.Body, timer: timer, cancel: cancel}}, nil
}

// until is the time left to t, a long time for no bound.
func until(t time.Time) time.Duration {
	if t.IsZero() {
		return 1<<63 - 1
	}
	return time.Until(t)
}

// cancelOnClose ends a round trip's timer and context when its body
// closes.
type cancelOnClose struct {
	io.ReadCloser
	timer  *time.Timer
	cancel context.CancelFunc
	once   sync.Once
}

func (c *cancelOnClose) Close() (err error) {
	c.once.Do(func() {
		err = c.ReadCloser.Close()
		c.timer.Stop()
		c.cancel()
	})
	return err
}
