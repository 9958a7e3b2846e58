package router

import (
	"sync"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

// pendingBodies bounds the memory fasthttp's server sets aside for bodies
// it has not received yet. Once it has read a request's header, fasthttp
// reads the body into one buffer sized for the declared Content-Length,
// allocated before the first byte of the body arrives; a client that
// declares a large body and then sends nothing pins that buffer until
// [timeouts] read_body ends the request. Eight such connections declaring
// 33 MB each held 257 MiB of heap.
//
// fasthttp can read a body as a stream instead (StreamRequestBody), into
// a buffer that grows as the bytes arrive, but then it keeps the
// connection's read buffer (max_header_bytes, 64 KiB) for as long as the
// connection is open, idle and streaming ones included, where it now
// holds it only while it reads a request: 64 KiB more per open stream.
// So the body is read as before, and a declared body above maxBodyHint
// (256 KiB: smaller ones are what the net/http front holds before data
// arrives too) is admitted only while the bodies being received, declared
// sizes summed, stay within the budget: twice max_body_bytes (64 MiB by
// default). One over it is refused before fasthttp allocates anything,
// with 503 and code body_memory_busy (fastError), and the connection
// closes. A body of up to 256 KiB is never refused.
//
// A reservation lasts from the header (the server's HeaderReceived hook)
// until the body is in (the handler starts) or its read failed (fastError),
// both in the connection's goroutine. The reservations of one server's
// connections live in its connSet.
type pendingBodies struct {
	n  atomic.Int32 // entries in held: done is one atomic load when 0
	mu sync.Mutex
	// used is the declared bytes of the admitted bodies being received.
	used int64
	// held is each request's reservation by its header (fasthttp's
	// RequestCtx, one per connection, passes its own), 0 for a refused one.
	held map[*fasthttp.RequestHeader]int64
}

// pendingBudget is the budget of a config with max_body_bytes limit.
func pendingBudget(limit int64) int64 { return 2 * limit }

// admit reserves n declared bytes for the body of h within budget and
// reports whether it fits. A body of maxBodyHint or less is not counted.
func (p *pendingBodies) admit(h *fasthttp.RequestHeader, n, budget int64) bool {
	if n <= maxBodyHint {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = map[*fasthttp.RequestHeader]int64{}
	}
	ok := p.used+n <= budget
	if ok {
		p.used += n
		p.held[h] = n
	} else {
		p.held[h] = 0
	}
	p.n.Store(int32(len(p.held)))
	return ok
}

// done ends the reservation of h, if it has one, and reports whether its
// body was refused.
func (p *pendingBodies) done(h *fasthttp.RequestHeader) (refused bool) {
	if p.n.Load() == 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.held[h]
	if !ok {
		return false
	}
	delete(p.held, h)
	p.used -= n
	p.n.Store(int32(len(p.held)))
	return n == 0
}
