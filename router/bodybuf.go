package router

import (
	"io"
	"math/bits"
	"sync"

	"github.com/rolter/rolter/strategies"
)

// Request bodies are read into buffers recycled across requests, one
// sync.Pool per power-of-two size class. A 100k-token prompt is most of a
// megabyte: allocated per request, each one was zeroed by the allocator
// and, every few requests, made the collector run a cycle over the whole
// heap, which cost the router as much CPU as reading the prompt. A
// buffer goes back to its pool when the request's last use of it has
// ended: serveInference releases it after every attempt, retry and
// stream resume is over (each attempt's upstream body is written, in the
// handler's goroutine, from the request's buffer in place; see bodyFor).
//
// A request's buffer holds its body and at most as many bytes again (the
// class's rounding), and never more than max_body_bytes + 1: a class
// larger than that is not used; the buffer is then allocated at the exact
// size and left to the collector. Pooled buffers are freed by the
// collector over two cycles once unused (sync.Pool), so an idle router
// gives the memory of a burst of long prompts back.
//
// A body the server already read into a buffer of its own is lent rather
// than copied (lentBody: the fasthttp front), when that buffer obeys the
// same bound: release then hands it back to its owner, and the bodyBuf of
// its class keeps only the ids and block-key storage (a byte buffer it had
// is dropped, so a request never holds two).

// Body buffer classes: 2^minBodyClass bytes to 2^maxBodyClass.
const (
	minBodyClass = 10 // 1 KiB: a short chat request
	maxBodyClass = 30 // 1 GiB, past any sensible max_body_bytes
)

var bodyPools [maxBodyClass - minBodyClass + 1]sync.Pool

// bodyBuf is one request body's buffer: b[:len(b)] is the body read so
// far. ids and keys are the storage a token-id prompt's ids and block keys
// were read into by an earlier request with a body of this class, kept for
// the next one (parse, recycle). Nothing may keep b, ids or keys, or a
// slice of them, past release.
type bodyBuf struct {
	b     []byte
	class int // index into bodyPools; -1: not pooled
	ids   []uint32
	keys  []uint64
	known knownSpans // the parse's noted values (request.known)
	// lender owns b while it is lent (lentBody).
	lender bodyLender
}

// bodyLender is a server's request whose body buffer a bodyBuf borrows:
// ResetBody takes the buffer back (fasthttp.Request). It is called in
// the goroutine that serves the request, before the server reads the
// connection's next request.
type bodyLender interface{ ResetBody() }

// parse is parseRequest of the body, reading a token-id prompt into the
// buffer's ids storage and leaving its keys storage for the block keys
// (request.keys).
func (bb *bodyBuf) parse() (request, error) {
	r, err := parseRequestInto(bb.b, bb.ids[:0], &bb.known)
	r.keys, r.known = bb.keys[:0], &bb.known
	return r, err
}

// recycle keeps, for the requests that get this buffer next, the ids and
// block-key storage req and rc used (grown past the buffer's own, or
// allocated when the buffer had none): they are the request's alone and
// end with it.
func (bb *bodyBuf) recycle(req *request, rc *strategies.RouteContext) {
	if bb == nil || bb.class < 0 {
		return
	}
	if cap(req.promptIDs) > cap(bb.ids) {
		bb.ids = req.promptIDs
	}
	if cap(rc.BlockKeys) > cap(bb.keys) {
		bb.keys = rc.BlockKeys
	}
}

// bodyClass is the index of the smallest class whose buffers hold n
// bytes (n ≥ 1).
func bodyClass(n int) int {
	if n <= 1<<minBodyClass {
		return 0
	}
	return bits.Len(uint(n-1)) - minBodyClass
}

// newBodyBuf returns an empty buffer with room for at least n bytes, and
// for no more than room bytes unless n is more.
func newBodyBuf(n int, room int64) *bodyBuf {
	c := bodyClass(n)
	if c >= len(bodyPools) || int64(1)<<(c+minBodyClass) > max(room, int64(n)) {
		return &bodyBuf{b: make([]byte, 0, n), class: -1}
	}
	if v, ok := bodyPools[c].Get().(*bodyBuf); ok {
		if cap(v.b) == 0 { // it served lent bodies only
			v.b = make([]byte, 0, 1<<(c+minBodyClass))
		}
		v.b = v.b[:0]
		return v
	}
	return &bodyBuf{b: make([]byte, 0, 1<<(c+minBodyClass)), class: c}
}

// lentBody is a buffer whose body is b itself, which l owns (no copy), or
// nil when b's buffer holds more than the body and as many bytes again,
// or more than room bytes: the caller then copies the body into a buffer
// of its own (newBodyBuf) and lets l have b back at once, so that a
// short request never keeps a long one's buffer.
func lentBody(b []byte, room int64, l bodyLender) *bodyBuf {
	if n := int64(cap(b)); n > 2*int64(len(b)) || n > room {
		return nil
	}
	c := bodyClass(len(b) + 1)
	var bb *bodyBuf
	if c < len(bodyPools) && int64(1)<<(c+minBodyClass) <= max(room, int64(len(b))) {
		bb, _ = bodyPools[c].Get().(*bodyBuf)
		if bb == nil {
			bb = &bodyBuf{class: c}
		}
	} else {
		bb = &bodyBuf{class: -1}
	}
	bb.b, bb.lender = b, l
	return bb
}

// disown lets go of a lent body without handing it back: for a request
// settled by fasthttp's ConnState hook, whose server resets the request,
// body and all, itself (right after the hook when the connection turns
// idle, before it when the connection closes: the request may by then
// serve another connection, so it must not be touched).
func (bb *bodyBuf) disown() {
	if bb != nil && bb.lender != nil {
		bb.b, bb.lender = nil, nil
	}
}

// release hands bb's buffer back to its pool, or to its lender; bb must
// not be used again.
func (bb *bodyBuf) release() {
	if bb == nil {
		return
	}
	if bb.lender != nil {
		bb.lender.ResetBody()
		bb.b, bb.lender = nil, nil
	}
	if bb.class >= 0 {
		bodyPools[bb.class].Put(bb)
	}
}

// maxBodyHint bounds the buffer readBody takes before data arrives (a
// class size: the 256 KiB class).
const maxBodyHint = 256 << 10

// readBody reads r to its end into a pooled buffer sized for a body of
// declared length n (-1: unknown), so the usual body is read with one
// buffer and no copy; limit is max_body_bytes, which r enforces. The
// caller releases the buffer once nothing uses the body any more, on
// error too.
func readBody(r io.Reader, n, limit int64) (*bodyBuf, error) {
	// The hint is capped: a client declaring a large body and sending
	// nothing must not make the router hold it up front. One byte more
	// than the body lets the read that finds its end land in room.
	bb := newBodyBuf(int(min(max(n, 511), maxBodyHint-1)+1), limit+1)
	for {
		m, err := r.Read(bb.b[len(bb.b):cap(bb.b)])
		bb.b = bb.b[:len(bb.b)+m]
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return bb, err
		}
		if len(bb.b) == cap(bb.b) {
			// Full: the client sent what the hint allowed (size for the
			// length it declared, bounded by max_body_bytes) or, without
			// a length, more than it had: double.
			want := min(2*int64(cap(bb.b)), limit+1)
			if int64(len(bb.b)) < n {
				want = n + 1
			}
			want = max(want, int64(len(bb.b))+1)
			next := newBodyBuf(int(want), limit+1)
			next.b = append(next.b, bb.b...)
			bb.release()
			bb = next
		}
	}
}
