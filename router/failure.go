package router

import (
	"fmt"
	"io"
	"net/http"
	"sync"
)

// An engine's failed answer (408, 429 or 5xx) that no retry follows is
// relayed to the client as the engine sent it: its status, its headers
// and its body. The body is read whole before the answer is committed,
// and at most maxFailureBody of it, so that the client gets either the
// engine's whole answer or an error of the router's in the OpenAI shape,
// never an engine's error cut short, and a broken or hostile engine that
// answers 500 with gigabytes cannot make the router hold them (fasthttp's
// front keeps the body of an answer the handler writes until it returns).
// A body longer than the bound (declared so, or found so as it is read),
// or one that breaks before its end, is replaced: the client gets the
// engine's status (and its Retry-After, if any) with the router's error,
// code upstream_error_too_large or upstream_error_unreadable.

// maxFailureBody bounds the failed answer's body the router relays. It is
// maxInlineBody, the body fasthttp's front reads whole for a successful
// answer: an engine's error is a few hundred bytes.
const maxFailureBody = maxInlineBody

// failureBufs holds the buffers failed answers are read into, one per
// failing request only while its answer is read and written.
var failureBufs = sync.Pool{New: func() any { b := make([]byte, maxFailureBody); return &b }}

// relayFailure answers the client with the engine's failed response resp
// (whole, or replaced by the router's error: see above) and returns the
// client's status.
func (a *attempt) relayFailure(resp *reply) int {
	defer resp.close()
	bufp := failureBufs.Get().(*[]byte)
	defer failureBufs.Put(bufp)
	n, over, err := 0, resp.ContentLength > maxFailureBody, error(nil)
	if !over {
		n, over, err = readWhole(resp.Body, *bufp)
	}
	if a.r.Context().Err() != nil {
		return statusClientClosed
	}
	if over || err != nil {
		return a.replaceFailure(resp, over, err)
	}
	a.w.copyHeader(resp.Header)
	a.stampHeaders(a.obs.failed)
	a.w.commit(resp.StatusCode)
	_, _ = a.w.Write((*bufp)[:n])
	a.obs.bytesOut += int64(n)
	return resp.StatusCode
}

// replaceFailure answers a failed response whose body is not relayed
// (over: longer than maxFailureBody; else it broke with err) with its
// status and the router's error.
func (a *attempt) replaceFailure(resp *reply, over bool, err error) int {
	name := "the engine"
	if t := a.obs.failed; t != nil {
		name = "provider " + t.provider.name
	}
	msg := fmt.Sprintf("%s answered HTTP %d with an error body over %d bytes, which the router does not relay",
		name, resp.StatusCode, maxFailureBody)
	code := "upstream_error_too_large"
	if !over {
		msg = fmt.Sprintf("%s answered HTTP %d and its error body could not be read: %v", name, resp.StatusCode, err)
		code = "upstream_error_unreadable"
	}
	a.s.log.Warn("engine's error body not relayed", "status", resp.StatusCode, "reason", msg, "request_id", a.obs.id)
	typ := "server_error"
	if resp.StatusCode == http.StatusTooManyRequests {
		typ = "rate_limit_error"
	}
	a.w.setHeader("Content-Type", valueJSON)
	if ra := resp.get("Retry-After"); ra != "" {
		a.w.setHeader("Retry-After", []string{ra})
	}
	a.stampHeaders(a.obs.failed)
	a.w.commit(resp.StatusCode)
	b := errorJSON(msg, typ, code)
	_, _ = a.w.Write(b)
	a.obs.bytesOut += int64(len(b))
	return resp.StatusCode
}

// readWhole reads r to its end into buf: n bytes, or over when r holds
// more than len(buf), or the error it broke with.
func readWhole(r io.Reader, buf []byte) (n int, over bool, err error) {
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err == io.EOF {
			return n, false, nil
		}
		if err != nil {
			return n, false, err
		}
	}
	// buf is full: the body is whole only if it ends here.
	var probe [1]byte
	for {
		m, err := r.Read(probe[:])
		switch {
		case m > 0:
			return n, true, nil
		case err == io.EOF:
			return n, false, nil
		case err != nil:
			return n, false, err
		}
	}
}
