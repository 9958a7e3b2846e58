//go:build linux

package hangup

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// The watcher exists for fasthttp's server, which has no departure
// signal of its own: a handler finds its connection's context through
// RequestCtx.Conn and sees the client leave mid-request. The server's
// TCP keep-alive setting is applied to the *Conn (fasthttp's
// keepAliveConn interface) as to a bare *net.TCPConn.
func TestFasthttpHandlerSeesTheClientLeave(t *testing.T) {
	w := newWatcher(t)
	ln := listen(t, w, context.Background())
	started := make(chan struct{})
	causes := make(chan error, 1)
	srv := &fasthttp.Server{
		TCPKeepalive: true,
		Handler: func(ctx *fasthttp.RequestCtx) {
			if string(ctx.Path()) == "/quick" {
				ctx.SetBodyString("ok")
				return
			}
			dctx, ok := Context(ctx.Conn())
			if !ok {
				causes <- errors.New("no departure context under the handler's connection")
				return
			}
			close(started)
			select {
			case <-dctx.Done():
				causes <- context.Cause(dctx)
			case <-ctx.Done():
				causes <- errors.New("the server shut down first")
			}
		},
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A request answered on the connection first: keep-alive traffic is
	// no departure.
	if _, err := io.WriteString(c, "GET /quick HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	var resp fasthttp.Response
	br := bufio.NewReader(c)
	if err := resp.Read(br); err != nil || string(resp.Body()) != "ok" {
		t.Fatalf("first response %q, %v", resp.Body(), err)
	}
	if _, err := io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case err := <-causes:
		t.Fatal(err)
	case <-time.After(within):
		t.Fatal("the second request never reached the handler")
	}
	c.Close()
	select {
	case err := <-causes:
		if !errors.Is(err, ErrDeparted) {
			t.Fatalf("the handler saw %v, want ErrDeparted", err)
		}
	case <-time.After(within):
		t.Fatal("the handler never saw the client leave")
	}
}
