package sidecar

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
)

// Message is one KV-event message: the three ZMQ frames, parsed.
type Message struct {
	Topic   string
	Seq     uint64
	Payload []byte
}

// EndOfReplay is the sequence number of the replay end marker.
const EndOfReplay = ^uint64(0)

var (
	// ErrFrames: a message without the topic / 8-byte sequence / payload
	// framing. Counted as malformed and dropped.
	ErrFrames = errors.New("bad kv event framing")
	// ErrNoCGO: the binary was built without cgo, so it has no ZMQ.
	ErrNoCGO = errors.New("kv events need ZMQ, which needs a cgo build (CGO_ENABLED=1 and libzmq)")
	// ErrReplay: the replay endpoint did not answer usefully.
	ErrReplay = errors.New("kv event replay failed")
)

// Source delivers live KV-event messages in arrival order.
type Source interface {
	// Recv blocks until the next message or until ctx is done (then it
	// returns ctx.Err()). Other errors are transient: the caller retries.
	// Called from one goroutine only.
	Recv(ctx context.Context) (Message, error)
}

// Replayer asks the engine to resend buffered batches.
type Replayer interface {
	// Replay returns the buffered messages with Seq ≥ from, in order, up to
	// the end marker (not included). It must give up when ctx is done.
	Replay(ctx context.Context, from uint64) ([]Message, error)
}

// ParseFrames parses a live message's frames: topic, sequence, payload.
func ParseFrames(frames [][]byte) (Message, error) {
	if len(frames) != 3 {
		return Message{}, fmt.Errorf("%w: %d frames", ErrFrames, len(frames))
	}
	if len(frames[1]) != 8 {
		return Message{}, fmt.Errorf("%w: sequence frame of %d bytes", ErrFrames, len(frames[1]))
	}
	return Message{
		Topic:   string(frames[0]),
		Seq:     binary.BigEndian.Uint64(frames[1]),
		Payload: frames[2],
	}, nil
}

// ParseReplayFrames parses one replay answer as a DEALER receives it:
// empty delimiter, sequence, payload. The end marker parses with
// Seq == EndOfReplay.
func ParseReplayFrames(frames [][]byte) (Message, error) {
	if len(frames) == 3 && len(frames[0]) == 0 {
		frames = frames[1:]
	}
	if len(frames) != 2 || len(frames[0]) != 8 {
		return Message{}, fmt.Errorf("%w: replay answer of %d frames", ErrFrames, len(frames))
	}
	return Message{Seq: binary.BigEndian.Uint64(frames[0]), Payload: frames[1]}, nil
}

// ReplayRequest returns the frames a DEALER sends to ask for replay from seq.
func ReplayRequest(from uint64) [][]byte {
	seq := make([]byte, 8)
	binary.BigEndian.PutUint64(seq, from)
	return [][]byte{{}, seq}
}
