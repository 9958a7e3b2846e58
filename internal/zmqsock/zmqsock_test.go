//go:build cgo

package zmqsock

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func open(t *testing.T, c *Context, typ Type, opt Options) *Socket {
	t.Helper()
	s, err := c.Socket(typ, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func newContext(t *testing.T) *Context {
	t.Helper()
	c, err := NewContext()
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs after the sockets' Close.
	t.Cleanup(func() { _ = c.Term() })
	return c
}

// A receive with nothing to read ends with ErrTimeout, which callers
// retry, not with a failure.
func TestRecvTimesOutWithErrTimeout(t *testing.T) {
	c := newContext(t)
	sub := open(t, c, Sub, Options{RecvTimeout: 10 * time.Millisecond})
	if err := sub.Bind("tcp://127.0.0.1:*"); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Recv(); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Recv: %v, want ErrTimeout", err)
	}
}

// The replay conversation: a DEALER asks, the ROUTER sees the asker's
// identity frame and answers it; multi-part frames arrive intact.
func TestRouterAnswersDealer(t *testing.T) {
	c := newContext(t)
	router := open(t, c, Router, Options{RecvTimeout: 5 * time.Second})
	if err := router.Bind("tcp://127.0.0.1:*"); err != nil {
		t.Fatal(err)
	}
	ep, err := router.LastEndpoint()
	if err != nil {
		t.Fatal(err)
	}
	dealer := open(t, c, Dealer, Options{RecvTimeout: 5 * time.Second, SendTimeout: time.Second})
	if err := dealer.Connect(ep); err != nil {
		t.Fatal(err)
	}
	if err := dealer.Send(nil, []byte("from-0")); err != nil {
		t.Fatal(err)
	}
	req, err := router.Recv()
	if err != nil || len(req) != 3 || len(req[1]) != 0 || string(req[2]) != "from-0" {
		t.Fatalf("router got %q, %v; want [identity, empty, from-0]", req, err)
	}
	if err := router.Send(req[0], nil, []byte("seq"), []byte("payload")); err != nil {
		t.Fatal(err)
	}
	resp, err := dealer.Recv()
	want := [][]byte{{}, []byte("seq"), []byte("payload")}
	if err != nil || !slices.EqualFunc(resp, want, slices.Equal) {
		t.Fatalf("dealer got %q, %v; want %q", resp, err, want)
	}
}

// A subscriber receives what a publisher sends under its topic prefix.
func TestPubSubDeliversTheSubscribedTopic(t *testing.T) {
	c := newContext(t)
	pub := open(t, c, Pub, Options{SendHWM: 1000})
	if err := pub.Bind("tcp://127.0.0.1:*"); err != nil {
		t.Fatal(err)
	}
	ep, _ := pub.LastEndpoint()
	sub := open(t, c, Sub, Options{RecvTimeout: 20 * time.Millisecond, Subscribe: "kv@"})
	if err := sub.Connect(ep); err != nil {
		t.Fatal(err)
	}
	// A subscription takes a moment to reach the publisher (ZMQ's slow
	// joiner): publish until one message arrives, then check it.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := pub.SendDontWait([]byte("other"), []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := pub.SendDontWait([]byte("kv@e1"), []byte("batch")); err != nil {
			t.Fatal(err)
		}
		got, err := sub.Recv()
		if errors.Is(err, ErrTimeout) {
			continue
		}
		if err != nil || len(got) != 2 || string(got[0]) != "kv@e1" || string(got[1]) != "batch" {
			t.Fatalf("sub got %q, %v; want [kv@e1 batch] only", got, err)
		}
		return
	}
	t.Fatal("no message reached the subscriber")
}
