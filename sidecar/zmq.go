//go:build cgo

package sidecar

import (
	"context"
	"fmt"
	"log/slog"
	"syscall"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/rolter/rolter/sidecar/kvevents"
)

// ZMQ is the only cgo code of the module. A SUB socket receives the live
// stream (connecting, or binding for publishers that connect); a fresh DEALER
// per replay request talks to the engine's ROUTER. Receives use a short
// timeout so that context cancellation is noticed; ZMQ reconnects on its own
// after an engine restart, and the stream detects the new sequence.

const (
	zmqPoll       = 100 * time.Millisecond // receive timeout between ctx checks
	zmqRcvHWM     = 100000                 // as vLLM's default hwm
	maxReplayMsgs = 1 << 20                // bound on one replay answer, in messages
	maxReplaySize = 256 << 20              // and in payload bytes
	// maxFrameSize makes libzmq drop (and disconnect) oversized messages
	// before they are buffered: a batch is at most kvevents.MaxPayload.
	maxFrameSize = kvevents.MaxPayload + 4096
)

// zmqSub is a Source over a ZMQ SUB socket. Only the stream goroutine uses it.
type zmqSub struct {
	sock *zmq.Socket
}

var (
	_ Source   = (*zmqSub)(nil)
	_ Replayer = (*zmqReplayer)(nil)
)

// openZMQ opens the subscriber (and the replayer when configured) in a
// private ZMQ context; closeFn closes sockets and terminates the context.
func openZMQ(cfg Config, log *slog.Logger) (Source, Replayer, func(), error) {
	zctx, err := zmq.NewContext()
	if err != nil {
		return nil, nil, nil, err
	}
	sock, err := zctx.NewSocket(zmq.SUB)
	if err != nil {
		_ = zctx.Term()
		return nil, nil, nil, err
	}
	fail := func(err error) (Source, Replayer, func(), error) {
		_ = sock.Close()
		_ = zctx.Term()
		return nil, nil, nil, err
	}
	for _, set := range []func() error{
		func() error { return sock.SetLinger(0) },
		func() error { return sock.SetRcvhwm(zmqRcvHWM) },
		func() error { return sock.SetMaxmsgsize(maxFrameSize) },
		func() error { return sock.SetRcvtimeo(zmqPoll) },
		func() error { return sock.SetReconnectIvl(100 * time.Millisecond) },
		func() error { return sock.SetReconnectIvlMax(5 * time.Second) },
		func() error { return sock.SetSubscribe(cfg.Topic) },
	} {
		if err := set(); err != nil {
			return fail(err)
		}
	}
	if cfg.KVEventsBind {
		err = sock.Bind(cfg.KVEvents)
	} else {
		err = sock.Connect(cfg.KVEvents)
	}
	if err != nil {
		return fail(err)
	}
	var rep Replayer
	if cfg.KVEventsReplay != "" {
		rep = &zmqReplayer{zctx: zctx, endpoint: cfg.KVEventsReplay, log: log}
	}
	closeFn := func() {
		_ = sock.Close()
		_ = zctx.Term()
	}
	return &zmqSub{sock: sock}, rep, closeFn, nil
}

func isTimeout(err error) bool {
	return zmq.AsErrno(err) == zmq.Errno(syscall.EAGAIN)
}

// Recv implements Source.
func (z *zmqSub) Recv(ctx context.Context) (Message, error) {
	for {
		if err := ctx.Err(); err != nil {
			return Message{}, err
		}
		frames, err := z.sock.RecvMessageBytes(0)
		if err != nil {
			if isTimeout(err) || zmq.AsErrno(err) == zmq.Errno(syscall.EINTR) {
				continue
			}
			return Message{}, err
		}
		return ParseFrames(frames)
	}
}

// zmqReplayer asks the engine's ROUTER socket for buffered batches.
type zmqReplayer struct {
	zctx     *zmq.Context
	endpoint string
	log      *slog.Logger
}

// Replay implements Replayer: one DEALER per request, so that a late answer
// to an abandoned request can never be mistaken for the current one.
func (r *zmqReplayer) Replay(ctx context.Context, from uint64) ([]Message, error) {
	sock, err := r.zctx.NewSocket(zmq.DEALER)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrReplay, err)
	}
	defer sock.Close()
	if err := sock.SetLinger(0); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrReplay, err)
	}
	if err := sock.SetRcvtimeo(zmqPoll); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrReplay, err)
	}
	if err := sock.SetMaxmsgsize(maxFrameSize); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrReplay, err)
	}
	if err := sock.SetSndtimeo(time.Second); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrReplay, err)
	}
	if err := sock.Connect(r.endpoint); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrReplay, err)
	}
	req := ReplayRequest(from)
	if _, err := sock.SendMessage(req[0], req[1]); err != nil {
		return nil, fmt.Errorf("%w: send: %w", ErrReplay, err)
	}
	var out []Message
	size := 0
	for len(out) < maxReplayMsgs && size < maxReplaySize {
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("%w: no end marker after %d messages: %w", ErrReplay, len(out), err)
		}
		frames, err := sock.RecvMessageBytes(0)
		if err != nil {
			if isTimeout(err) || zmq.AsErrno(err) == zmq.Errno(syscall.EINTR) {
				continue
			}
			return out, fmt.Errorf("%w: %w", ErrReplay, err)
		}
		m, err := ParseReplayFrames(frames)
		if err != nil {
			r.log.Warn("kv events: bad replay answer skipped", "err", err)
			continue
		}
		if m.Seq == EndOfReplay {
			return out, nil
		}
		out = append(out, m)
		size += len(m.Payload)
	}
	return out, fmt.Errorf("%w: answer over %d messages or %d bytes", ErrReplay, maxReplayMsgs, maxReplaySize)
}
