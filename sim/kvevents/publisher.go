package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Sender delivers one multipart message on the live (PUB) socket. It is
// called with the publisher's lock held, in sequence order; it must not
// block for long (a PUB socket drops rather than blocks).
type Sender interface {
	Send(frames [][]byte) error
}

// Message is one published batch as kept in the replay buffer.
type Message struct {
	Seq     uint64
	Payload []byte
}

// Options configure a Publisher.
type Options struct {
	Encoding Encoding
	Topic    string
	// DPRank is the data_parallel_rank sent in every batch (negative: nil).
	DPRank int
	// FirstSeq is the first sequence number (vLLM starts at 0).
	FirstSeq uint64
	// BufferSteps is how many batches the replay buffer keeps (vLLM: 10000).
	BufferSteps int
	// Now stamps batches; time.Now when nil.
	Now func() time.Time
}

// Publisher numbers, encodes, buffers and sends event batches. It is safe
// for concurrent use.
type Publisher struct {
	opts Options

	mu      sync.Mutex
	live    Sender
	next    uint64
	ring    []Message // oldest first, at most BufferSteps
	skipLo  uint64    // live sends of seq in [skipLo, skipHi) are dropped
	skipHi  uint64
	sent    uint64
	skipped uint64
}

// NewPublisher returns a publisher sending on live (nil: buffer only).
func NewPublisher(opts Options, live Sender) *Publisher {
	if opts.BufferSteps <= 0 {
		opts.BufferSteps = 10000
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Publisher{opts: opts, live: live, next: opts.FirstSeq}
}

// SetSender replaces the live sender (nil: buffer only).
func (p *Publisher) SetSender(s Sender) {
	p.mu.Lock()
	p.live = s
	p.mu.Unlock()
}

// Publish encodes events as one batch with the next sequence number,
// keeps it for replay and sends it live unless its number is in the
// skipped range. An empty batch is not published.
func (p *Publisher) Publish(events []Event) error {
	if len(events) == 0 {
		return nil
	}
	ts := float64(p.opts.Now().UnixNano()) / 1e9
	payload, err := p.opts.Encoding.EncodeBatch(ts, events, p.opts.DPRank)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	seq := p.next
	p.next++
	p.ring = append(p.ring, Message{Seq: seq, Payload: payload})
	if over := len(p.ring) - p.opts.BufferSteps; over > 0 {
		p.ring = append(p.ring[:0], p.ring[over:]...)
	}
	if seq >= p.skipLo && seq < p.skipHi {
		p.skipped++
		return nil
	}
	if p.live == nil {
		return nil
	}
	p.sent++
	if err := p.live.Send([][]byte{[]byte(p.opts.Topic), SeqFrame(seq), payload}); err != nil {
		return fmt.Errorf("kvevents: send seq %d: %w", seq, err)
	}
	return nil
}

// SkipNext drops the next n sequence numbers from the live socket while
// keeping them in the replay buffer: a gap only replay can close.
func (p *Publisher) SkipNext(n int) {
	p.mu.Lock()
	p.skipLo, p.skipHi = p.next, p.next+uint64(max(n, 0))
	p.mu.Unlock()
}

// RestartSequence makes the next batch carry the first sequence number
// again and empties the replay buffer, as an engine restart does.
func (p *Publisher) RestartSequence() {
	p.mu.Lock()
	p.next = p.opts.FirstSeq
	p.ring = nil
	p.skipLo, p.skipHi = 0, 0
	p.mu.Unlock()
}

// Stats returns the next sequence number, the batches sent live and the
// batches dropped by SkipNext.
func (p *Publisher) Stats() (next, sent, skipped uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.next, p.sent, p.skipped
}

// Replay returns the buffered batches with seq ≥ start, oldest first.
func (p *Publisher) Replay(start uint64) []Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Message
	for _, m := range p.ring {
		if m.Seq >= start {
			out = append(out, m)
		}
	}
	return out
}

// ErrReplayRequest is returned for a malformed replay request.
var ErrReplayRequest = errors.New("kvevents: malformed replay request")

// ReplayResponse answers one request received on the ROUTER socket:
// frames [identity, "", start_seq(8 bytes BE)] (the empty delimiter is
// optional). It returns the messages to send back, each
// [identity, "", seq, payload], ending with the end marker
// [identity, "", 0xFFFFFFFFFFFFFFFF, ""].
func (p *Publisher) ReplayResponse(request [][]byte) ([][][]byte, error) {
	if len(request) < 2 {
		return nil, fmt.Errorf("%w: %d frames", ErrReplayRequest, len(request))
	}
	id := request[0]
	startFrame := request[len(request)-1]
	if len(startFrame) != 8 {
		return nil, fmt.Errorf("%w: start frame of %d bytes", ErrReplayRequest, len(startFrame))
	}
	start := binary.BigEndian.Uint64(startFrame)
	msgs := p.Replay(start)
	out := make([][][]byte, 0, len(msgs)+1)
	for _, m := range msgs {
		out = append(out, [][]byte{id, {}, SeqFrame(m.Seq), m.Payload})
	}
	out = append(out, [][]byte{id, {}, SeqFrame(EndMarkerSeq), {}})
	return out, nil
}
