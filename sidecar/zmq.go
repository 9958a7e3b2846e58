package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/rolter/rolter/internal/zmqsock"
	"github.com/rolter/rolter/sidecar/kvevents"
)

// The ZMQ sockets come from internal/zmqsock, the module's only cgo code.
// A SUB socket receives the live stream (connecting, or binding for
// publishers that connect); a fresh DEALER per replay request talks to the
// engine's ROUTER. Receives use a short timeout so that context
// cancellation is noticed; ZMQ reconnects on its own after an engine
// restart, and the stream detects the new sequence. A build without cgo
// reports ErrNoCGO.

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
	sock *zmqsock.Socket
}

var (
	_ Source   = (*zmqSub)(nil)
	_ Replayer = (*zmqReplayer)(nil)
)

// openZMQ opens the subscriber (and the replayer when configured) in a
// private ZMQ context; closeFn closes sockets and terminates the context.
func openZMQ(cfg Config, log *slog.Logger) (Source, Replayer, func(), error) {
	zctx, err := zmqsock.NewContext()
	if errors.Is(err, zmqsock.ErrNoCgo) {
		return nil, nil, nil, ErrNoCGO
	}
	if err != nil {
		return nil, nil, nil, err
	}
	sock, err := zctx.Socket(zmqsock.Sub, zmqsock.Options{RecvHWM: zmqRcvHWM, MaxMsgSize: maxFrameSize, RecvTimeout: zmqPoll,
		ReconnectIvl: 100 * time.Millisecond, ReconnectIvlMax: 5 * time.Second, Subscribe: cfg.Topic})
	if err != nil {
		_ = zctx.Term()
		return nil, nil, nil, err
	}
	if cfg.KVEventsBind {
		err = sock.Bind(cfg.KVEvents)
	} else {
		err = sock.Connect(cfg.KVEvents)
	}
	if err != nil {
		_ = sock.Close()
		_ = zctx.Term()
		return nil, nil, nil, err
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

// Recv implements Source.
func (z *zmqSub) Recv(ctx context.Context) (Message, error) {
	for {
		if err := ctx.Err(); err != nil {
			return Message{}, err
		}
		frames, err := z.sock.Recv()
		if errors.Is(err, zmqsock.ErrTimeout) {
			continue
		}
		if err != nil {
			return Message{}, err
		}
		return ParseFrames(frames)
	}
}

// zmqReplayer asks the engine's ROUTER socket for buffered batches.
type zmqReplayer struct {
	zctx     *zmqsock.Context
	endpoint string
	log      *slog.Logger
}

// Replay implements Replayer: one DEALER per request, so that a late answer
// to an abandoned request can never be mistaken for the current one.
func (r *zmqReplayer) Replay(ctx context.Context, from uint64) ([]Message, error) {
	sock, err := r.zctx.Socket(zmqsock.Dealer, zmqsock.Options{RecvTimeout: zmqPoll, MaxMsgSize: maxFrameSize, SendTimeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrReplay, err)
	}
	defer sock.Close()
	if err := sock.Connect(r.endpoint); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrReplay, err)
	}
	req := ReplayRequest(from)
	if err := sock.Send(req[0], req[1]); err != nil {
		return nil, fmt.Errorf("%w: send: %w", ErrReplay, err)
	}
	var out []Message
	size := 0
	for len(out) < maxReplayMsgs && size < maxReplaySize {
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("%w: no end marker after %d messages: %w", ErrReplay, len(out), err)
		}
		frames, err := sock.Recv()
		if errors.Is(err, zmqsock.ErrTimeout) {
			continue
		}
		if err != nil {
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
