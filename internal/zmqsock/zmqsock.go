// Package zmqsock owns rolter's only cgo code: the ZMQ sockets (libzmq
// through github.com/pebbe/zmq4) that carry vLLM's KV-event stream. The
// sidecar subscribes (SUB) and asks for replays (DEALER); the simulator
// publishes (PUB) and answers replays (ROUTER), as an engine does. Both go
// through this package, whose API has no cgo types: a build without cgo
// compiles it too, and NewContext then returns ErrNoCgo.
//
// A Socket is not safe for concurrent use (a ZMQ rule): one goroutine owns
// it. A Context may be shared; Term it after closing its sockets.
package zmqsock

import (
	"errors"
	"time"
)

// ErrNoCgo is returned by NewContext in a build without cgo.
var ErrNoCgo = errors.New("zmq needs a cgo build with libzmq (CGO_ENABLED=1)")

// ErrTimeout is returned by Recv and Send when the socket's timeout
// passed (or a signal interrupted the call) with nothing done: retry.
var ErrTimeout = errors.New("zmq: timed out")

// Type is a socket type.
type Type int

// The socket types the KV-event stream uses.
const (
	Pub Type = iota
	Sub
	Router
	Dealer
)

// Options are set on a socket before it binds or connects. Zero values
// keep libzmq's defaults, except Linger, which is always 0: a closing
// socket drops what it has not sent.
type Options struct {
	SendHWM, RecvHWM int
	// MaxMsgSize makes libzmq drop (and disconnect) a peer sending a
	// larger message, before it is buffered.
	MaxMsgSize int64
	// RecvTimeout, SendTimeout bound Recv and Send (zero: block).
	RecvTimeout, SendTimeout time.Duration
	// ReconnectIvl and ReconnectIvlMax pace reconnection after the peer
	// went away.
	ReconnectIvl, ReconnectIvlMax time.Duration
	// Subscribe is the topic prefix a Sub socket receives.
	Subscribe string
}
