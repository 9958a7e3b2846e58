//go:build cgo

package zmqsock

import (
	"errors"
	"fmt"
	"syscall"

	zmq "github.com/pebbe/zmq4"
)

// Context is a private libzmq context.
type Context struct{ z *zmq.Context }

// NewContext returns a new context.
func NewContext() (*Context, error) {
	z, err := zmq.NewContext()
	if err != nil {
		return nil, fmt.Errorf("zmq context: %w", err)
	}
	return &Context{z: z}, nil
}

// Term terminates the context; its sockets must be closed first.
func (c *Context) Term() error { return c.z.Term() }

// Socket is one ZMQ socket.
type Socket struct{ s *zmq.Socket }

var types = map[Type]zmq.Type{Pub: zmq.PUB, Sub: zmq.SUB, Router: zmq.ROUTER, Dealer: zmq.DEALER}

// Socket opens a socket of type t with opt set.
func (c *Context) Socket(t Type, opt Options) (*Socket, error) {
	zt, ok := types[t]
	if !ok {
		return nil, fmt.Errorf("zmq: unknown socket type %d", t)
	}
	s, err := c.z.NewSocket(zt)
	if err != nil {
		return nil, fmt.Errorf("zmq socket: %w", err)
	}
	sets := []func() error{func() error { return s.SetLinger(0) }}
	if opt.SendHWM > 0 {
		sets = append(sets, func() error { return s.SetSndhwm(opt.SendHWM) })
	}
	if opt.RecvHWM > 0 {
		sets = append(sets, func() error { return s.SetRcvhwm(opt.RecvHWM) })
	}
	if opt.MaxMsgSize > 0 {
		sets = append(sets, func() error { return s.SetMaxmsgsize(opt.MaxMsgSize) })
	}
	if opt.RecvTimeout > 0 {
		sets = append(sets, func() error { return s.SetRcvtimeo(opt.RecvTimeout) })
	}
	if opt.SendTimeout > 0 {
		sets = append(sets, func() error { return s.SetSndtimeo(opt.SendTimeout) })
	}
	if opt.ReconnectIvl > 0 {
		sets = append(sets, func() error { return s.SetReconnectIvl(opt.ReconnectIvl) })
	}
	if opt.ReconnectIvlMax > 0 {
		sets = append(sets, func() error { return s.SetReconnectIvlMax(opt.ReconnectIvlMax) })
	}
	if t == Sub {
		sets = append(sets, func() error { return s.SetSubscribe(opt.Subscribe) })
	}
	for _, set := range sets {
		if err := set(); err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("zmq socket option: %w", err)
		}
	}
	return &Socket{s: s}, nil
}

// Bind binds the socket to endpoint.
func (s *Socket) Bind(endpoint string) error { return s.s.Bind(endpoint) }

// Connect connects the socket to endpoint; libzmq reconnects on its own.
func (s *Socket) Connect(endpoint string) error { return s.s.Connect(endpoint) }

// LastEndpoint is the endpoint last bound (a "*" port resolved).
func (s *Socket) LastEndpoint() (string, error) { return s.s.GetLastEndpoint() }

// Close closes the socket.
func (s *Socket) Close() error { return s.s.Close() }

// Send sends frames as one multi-part message, waiting up to the send
// timeout for room.
func (s *Socket) Send(frames ...[]byte) error { return s.send(0, frames) }

// SendDontWait sends frames as one message or fails at once when the
// queue is full (a PUB socket at its high-water mark).
func (s *Socket) SendDontWait(frames ...[]byte) error { return s.send(zmq.DONTWAIT, frames) }

func (s *Socket) send(flag zmq.Flag, frames [][]byte) error {
	parts := make([]any, len(frames))
	for i, f := range frames {
		parts[i] = f
	}
	var err error
	if flag == zmq.DONTWAIT {
		_, err = s.s.SendMessageDontwait(parts...)
	} else {
		_, err = s.s.SendMessage(parts...)
	}
	return mapErr(err)
}

// Recv receives one multi-part message; ErrTimeout when the receive
// timeout passed first.
func (s *Socket) Recv() ([][]byte, error) {
	frames, err := s.s.RecvMessageBytes(0)
	return frames, mapErr(err)
}

func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, zmq.ETIMEDOUT) {
		return ErrTimeout
	}
	switch zmq.AsErrno(err) {
	case zmq.Errno(syscall.EAGAIN), zmq.Errno(syscall.EINTR):
		return ErrTimeout
	}
	return err
}
