package router

import (
	"bytes"
	"errors"
	"io"
)

// errChunked is a response body whose chunked framing is malformed.
var errChunked = errors.New("router: malformed chunked encoding from the engine")

// chunkState is where a dechunker is in the framing.
type chunkState uint8

const (
	chunkSize        chunkState = iota // in a chunk's size digits
	chunkSizeWS                        // in white space after the size digits
	chunkExt                           // in a size line's extension, up to its CR
	chunkSizeLF                        // after the size line's CR
	chunkData                          // in a chunk's data
	chunkDataCR                        // after a chunk's data: its CR
	chunkDataLF                        // after that CR: its LF
	chunkTrailer                       // at the start of a trailer line (or the final CRLF)
	chunkTrailerLine                   // in a trailer line, up to its LF
	chunkEndLF                         // after the final CR
	chunkDone                          // the last chunk and its trailer were read
)

// dechunker decodes HTTP/1.1 chunked transfer coding in place, in pieces
// as they arrive: it holds no buffer of its own, only where it is in the
// framing, so an open stream that waits for its next event holds nothing
// for it. It takes what net/http's chunked reader takes: a size line of
// 1-16 hex digits, then trailing white space or an extension after ';',
// ended by CRLF (never a bare LF); a chunk's data ended by CRLF. Trailer
// lines after the last chunk are skipped.
type dechunker struct {
	state  chunkState
	digits int    // hex digits read of the current size
	left   uint64 // data bytes left in the current chunk (or its size so far)
}

// decode turns the raw bytes b into their data, written over the start of
// b, and returns the data's length and how many of b's bytes came after
// the end of the body (not part of it: the caller must not reuse the
// connection). err is errChunked for framing that is not chunked coding.
func (d *dechunker) decode(b []byte) (n, extra int, err error) {
	for i := 0; i < len(b); {
		c := b[i]
		switch d.state {
		case chunkSize:
			if v := hexValue(c); v >= 0 {
				if d.digits == 16 {
					return n, 0, errChunked // over 64 bits
				}
				d.left = d.left<<4 | uint64(v)
				d.digits++
				i++
				continue
			}
			if d.digits == 0 {
				return n, 0, errChunked
			}
			switch c {
			case ';':
				d.state = chunkExt
			case ' ', '\t':
				d.state = chunkSizeWS
			case '\r':
				d.state = chunkSizeLF
			default:
				return n, 0, errChunked
			}
			i++
		case chunkSizeWS:
			switch c {
			case ' ', '\t':
			case '\r':
				d.state = chunkSizeLF
			default:
				return n, 0, errChunked
			}
			i++
		case chunkExt:
			switch c {
			case '\r':
				d.state = chunkSizeLF
			case '\n':
				return n, 0, errChunked // a bare LF
			}
			i++
		case chunkSizeLF:
			if c != '\n' {
				return n, 0, errChunked
			}
			d.sized()
			i++
		case chunkData:
			k := uint64(len(b) - i)
			k = min(k, d.left)
			n += copy(b[n:], b[i:i+int(k)])
			i += int(k)
			d.left -= k
			if d.left == 0 {
				d.state = chunkDataCR
			}
		case chunkDataCR:
			if c != '\r' {
				return n, 0, errChunked
			}
			d.state = chunkDataLF
			i++
		case chunkDataLF:
			if c != '\n' {
				return n, 0, errChunked
			}
			d.state, d.digits, d.left = chunkSize, 0, 0
			i++
		case chunkTrailer:
			switch c {
			case '\r':
				d.state = chunkEndLF
			case '\n':
				d.state = chunkDone
			default:
				d.state = chunkTrailerLine
			}
			i++
		case chunkTrailerLine:
			if c == '\n' {
				d.state = chunkTrailer
			}
			i++
		case chunkEndLF:
			if c != '\n' {
				return n, 0, errChunked
			}
			d.state = chunkDone
			i++
		case chunkDone:
			return n, len(b) - i, nil
		}
	}
	return n, 0, nil
}

// sized ends a size line: the chunk's data follows, or the trailer after
// the last chunk.
func (d *dechunker) sized() {
	if d.left == 0 {
		d.state = chunkTrailer
		return
	}
	d.state = chunkData
}

func (d *dechunker) done() bool { return d.state == chunkDone }

func hexValue(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// bodyKind is how a response body's end is known.
type bodyKind uint8

const (
	bodyNone    bodyKind = iota // no body (204, 304, a HEAD request, Content-Length 0)
	bodySized                   // Content-Length bytes
	bodyChunked                 // chunked transfer coding
	bodyToEOF                   // until the engine closes the connection
)

// upstreamBody reads a response body straight from its connection into
// the caller's buffer: the bytes read with the header first, then one
// read of the connection per call. It holds no buffer between calls.
type upstreamBody struct {
	kind    bodyKind
	pending []byte // body bytes that came with the header, not yet read
	left    int64  // bodySized: bytes still to read
	dc      dechunker
	// over is set when bytes followed the body's end: the connection
	// cannot carry another request.
	over bool
	end  bool // the body was read to its end
}

// read fills p from the body, reading r (the connection) once when
// nothing is pending. It returns io.EOF with the last bytes or after them.
func (u *upstreamBody) read(r io.Reader, p []byte) (int, error) {
	for {
		if u.end {
			return 0, io.EOF
		}
		if len(p) == 0 {
			return 0, nil
		}
		if len(u.pending) > 0 {
			if n, again, err := u.takePending(p); !again {
				return n, err
			}
			continue
		}
		q := u.window(p)
		m, err := r.Read(q)
		if n, again, err := u.frame(q, m, err); !again {
			return n, err
		}
	}
}

// takePending moves what came with the header (or what of it fits) into
// p, framed as frame frames a read.
func (u *upstreamBody) takePending(p []byte) (n int, again bool, err error) {
	q := u.window(p)
	m := copy(q, u.pending)
	u.pending = u.pending[m:]
	if len(u.pending) == 0 {
		u.pending = nil
	}
	return u.frame(q, m, nil)
}

// hasData reports whether data of the body, not only its framing, came
// with the header (asked before the first read; false when unsure).
func (u *upstreamBody) hasData() bool {
	switch {
	case len(u.pending) == 0:
		return false
	case u.kind != bodyChunked:
		return true
	}
	// The first chunk's size line, then at least a byte of its data.
	i := bytes.Index(u.pending, []byte("\r\n"))
	return i > 0 && i+2 < len(u.pending) && u.pending[0] != '0'
}

// window is the part of p one read of the connection may fill: all of
// it, or no more than is left of a sized body.
func (u *upstreamBody) window(p []byte) []byte {
	if u.kind == bodySized && int64(len(p)) > u.left {
		return p[:u.left]
	}
	return p
}

// frame takes the m raw bytes a read put at the start of q (err: the
// read's error) and leaves the body's data there: n bytes, and the error
// to report with them (io.EOF at the body's end). again reports that only
// framing came and the body goes on: the caller reads once more.
func (u *upstreamBody) frame(q []byte, m int, err error) (n int, again bool, _ error) {
	n = m
	switch u.kind {
	case bodySized:
		u.left -= int64(m)
		if u.left == 0 {
			u.end = true
			return n, false, io.EOF
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
	case bodyChunked:
		var extra int
		var derr error
		n, extra, derr = u.dc.decode(q[:m])
		if derr != nil {
			return n, false, derr
		}
		if u.dc.done() {
			u.end, u.over = true, extra > 0 || len(u.pending) > 0
			return n, false, io.EOF
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
	case bodyToEOF:
		if err == io.EOF {
			u.end = true
		}
	}
	return n, n == 0 && err == nil, err
}

// ready reports whether read returns without reading the connection.
func (u *upstreamBody) ready() bool { return u.end || len(u.pending) > 0 }
