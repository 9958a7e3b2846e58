package mesh

import (
	"io"
	"log"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Metered wraps a memberlist transport to count every byte a node sends
// (UDP packets and TCP streams) and, for fault tests, to drop a fraction of
// outbound packets. Streams are never dropped: TCP is reliable.
type Metered struct {
	inner memberlist.NodeAwareTransport

	loss atomic.Uint64 // float64 bits
	mu   sync.Mutex
	rnd  *rand.Rand

	PacketBytes    atomic.Uint64
	StreamBytes    atomic.Uint64
	PacketsSent    atomic.Uint64
	PacketsDropped atomic.Uint64

	streams chan net.Conn
	stop    chan struct{} // Shutdown began
	done    chan struct{} // inner transport is down
	once    sync.Once
}

var _ memberlist.NodeAwareTransport = (*Metered)(nil)

// NewMetered wraps inner; seed makes the loss pattern reproducible.
func NewMetered(inner memberlist.NodeAwareTransport, seed uint64) *Metered {
	t := &Metered{inner: inner, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		streams: make(chan net.Conn), stop: make(chan struct{}), done: make(chan struct{})}
	go t.forward()
	return t
}

// SetLoss sets the probability in [0,1] that an outbound packet is dropped.
func (t *Metered) SetLoss(p float64) { t.loss.Store(math.Float64bits(min(max(p, 0), 1))) }

// BytesSent returns every byte written to packets and streams.
func (t *Metered) BytesSent() uint64 { return t.PacketBytes.Load() + t.StreamBytes.Load() }

func (t *Metered) drop() bool {
	p := math.Float64frombits(t.loss.Load())
	if p <= 0 {
		return false
	}
	t.mu.Lock()
	x := t.rnd.Float64()
	t.mu.Unlock()
	return x < p
}

// forward hands the inner transport's inbound streams to memberlist,
// wrapped for counting. After Shutdown begins (stop), it keeps draining and
// closes them, so the inner listener never blocks on its channel; it exits
// once the inner transport is down (done).
func (t *Metered) forward() {
	for {
		select {
		case <-t.done:
			return
		case c := <-t.inner.StreamCh():
			select {
			case t.streams <- &countedConn{Conn: c, n: &t.StreamBytes}:
			case <-t.stop:
				c.Close()
			}
		}
	}
}

// FinalAdvertiseAddr implements memberlist.Transport.
func (t *Metered) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	return t.inner.FinalAdvertiseAddr(ip, port)
}

// WriteTo implements memberlist.Transport.
func (t *Metered) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress implements memberlist.NodeAwareTransport.
func (t *Metered) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if t.drop() {
		t.PacketsDropped.Add(1)
		return time.Now(), nil
	}
	t.PacketsSent.Add(1)
	t.PacketBytes.Add(uint64(len(b)))
	return t.inner.WriteToAddress(b, a)
}

// PacketCh implements memberlist.Transport.
func (t *Metered) PacketCh() <-chan *memberlist.Packet { return t.inner.PacketCh() }

// DialTimeout implements memberlist.Transport.
func (t *Metered) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *Metered) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	c, err := t.inner.DialAddressTimeout(a, timeout)
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, n: &t.StreamBytes}, nil
}

// StreamCh implements memberlist.Transport.
func (t *Metered) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown implements memberlist.Transport.
func (t *Metered) Shutdown() error {
	var err error
	t.once.Do(func() {
		close(t.stop)
		err = t.inner.Shutdown()
		close(t.done)
	})
	return err
}

type countedConn struct {
	net.Conn
	n *atomic.Uint64
}

func (c *countedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.n.Add(uint64(n))
	return n, err
}

// NewLoopbackTransport returns a metered memberlist transport bound to
// 127.0.0.1 on an ephemeral port (the UDP socket takes the TCP port; a
// collision is retried).
func NewLoopbackTransport(seed uint64) (*Metered, error) {
	var err error
	for range 5 {
		var nt *memberlist.NetTransport
		nt, err = memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{"127.0.0.1"}, Logger: log.New(io.Discard, "", 0)})
		if err == nil {
			return NewMetered(nt, seed), nil
		}
	}
	return nil, err
}
