package router

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// net/http's server refuses some requests before any handler runs and
// answers them itself, in plain text: a header over MaxHeaderBytes (431)
// and a malformed request (400). It writes the answer to the connection
// in one Write, "HTTP/1.1 <text>" + stdErrorHeaders + "<text>", and
// closes it (net/http conn.serve). fasthttp's front gives the OpenAI
// error shape there (fastError). So that the API answers the same on
// either front, Serve's net/http front wraps each API connection
// (refusalListener) and such a Write goes out as the router's answer
// instead: 431 request_header_too_large, 400 invalid_request. Nothing
// else is touched: an answer a handler writes carries a Date header, so
// it never has that form.

// stdErrorHeaders are the headers of net/http's own refusals.
const stdErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// maxStdRefusal bounds the Writes looked at: net/http's refusals are a
// few hundred bytes.
const maxStdRefusal = 512

// refusalListener gives the connections it accepts the router's answers
// to net/http's refusals (limit is max_header_bytes, for the 431's
// message). It wraps the API listener above TLS, where net/http's answer
// is still plain text; so net/http does not see a *tls.Conn: requests
// carry no Request.TLS (the router reads none) and a plain-HTTP client on
// the TLS port gets its connection closed without net/http's 400 text, as
// on fasthttp's front. The API speaks HTTP/1.1 only, so nothing is lost
// to ALPN.
type refusalListener struct {
	net.Listener
	tooLarge []byte // the 431's OpenAI error
}

func newRefusalListener(ln net.Listener, limit int) net.Listener {
	return refusalListener{Listener: ln, tooLarge: refusalBody(fmt.Errorf("%w: the limit is %d bytes", ErrHeaderLarge, limit))}
}

func (l refusalListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &refusalConn{Conn: c, tooLarge: l.tooLarge}, nil
}

// refusalBody is err's OpenAI error.
func refusalBody(err error) []byte {
	_, typ, code := errorClass(err)
	return errorJSON(err.Error(), typ, code)
}

// refusalConn is an API connection on net/http's server whose refusals
// are the router's.
type refusalConn struct {
	net.Conn
	tooLarge []byte
}

func (c *refusalConn) Write(p []byte) (int, error) {
	text, ok := stdRefusal(p)
	if !ok {
		return c.Conn.Write(p)
	}
	var status string
	var body []byte
	switch {
	case text == "431 Request Header Fields Too Large":
		status, body = text, c.tooLarge
	case strings.HasPrefix(text, "400 Bad Request"):
		why := strings.TrimPrefix(strings.TrimPrefix(text, "400 Bad Request"), ": ")
		if why == "" {
			why = "malformed HTTP request"
		}
		status, body = "400 Bad Request", refusalBody(fmt.Errorf("%w: %s", ErrBadRequest, why))
	default:
		return c.Conn.Write(p)
	}
	answer := make([]byte, 0, 160+len(body))
	answer = append(answer, "HTTP/1.1 "...)
	answer = append(answer, status...)
	answer = append(answer, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	answer = strconv.AppendInt(answer, int64(len(body)), 10)
	answer = append(answer, "\r\nDate: "...)
	answer = time.Now().UTC().AppendFormat(answer, http.TimeFormat)
	answer = append(answer, "\r\nConnection: close\r\n\r\n"...)
	answer = append(answer, body...)
	if _, err := c.Conn.Write(answer); err != nil {
		return 0, err
	}
	return len(p), nil
}

// CloseWrite half-closes the connection when the one below can (a TCP
// or TLS connection): net/http does so after its 431, before it closes,
// so that the client reads the answer rather than a reset.
func (c *refusalConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// stdRefusal reports whether p is one of net/http's own refusals, and its
// text ("431 Request Header Fields Too Large").
func stdRefusal(p []byte) (text string, ok bool) {
	const start = "HTTP/1.1 "
	if len(p) > maxStdRefusal || len(p) < len(start) || string(p[:len(start)]) != start {
		return "", false
	}
	s := view(p)                    // read only during the Write
	i := strings.IndexByte(s, '\r') // the status line's end
	if i < 0 || !strings.HasPrefix(s[i:], stdErrorHeaders) {
		return "", false
	}
	text = s[len(start):i]
	return text, s[i+len(stdErrorHeaders):] == text
}
