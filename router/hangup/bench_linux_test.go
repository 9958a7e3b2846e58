//go:build linux

package hangup

import (
	"context"
	"net"
	"testing"
)

// BenchmarkAcceptClose is the watcher's cost per connection: a loopback
// connection dialled, accepted and closed on both sides, through a bare
// listener and through a Watcher's (one epoll_ctl ADD, one DEL, one
// context and the Conn). The difference between the two is the cost; a
// request on the connection costs nothing more.
func BenchmarkAcceptClose(b *testing.B) {
	for _, bc := range []struct {
		name  string
		watch bool
	}{{"bare", false}, {"watched", true}} {
		b.Run(bc.name, func(b *testing.B) {
			tcp, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer tcp.Close()
			ln := tcp
			if bc.watch {
				w, err := New()
				if err != nil {
					b.Fatal(err)
				}
				defer w.Close()
				ln = w.Listener(tcp, context.Background())
			}
			addr := ln.Addr().String()
			b.ReportAllocs()
			for b.Loop() {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					b.Fatal(err)
				}
				s, err := ln.Accept()
				if err != nil {
					b.Fatal(err)
				}
				s.Close()
				c.Close()
			}
		})
	}
}
