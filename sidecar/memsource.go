package sidecar

import (
	"context"
	"sync"
)

// MemSource is an in-memory Source and Replayer: what a ZMQ publisher with a
// replay buffer looks like, without sockets. Tests script loss and restarts
// with it; `rolter bench gossip` can drive sidecars with synthetic events.
type MemSource struct {
	live chan Message
	mu   sync.Mutex
	buf  []Message // replay buffer, oldest first
	max  int
	// replays counts Replay calls.
	replays int
}

var (
	_ Source   = (*MemSource)(nil)
	_ Replayer = (*MemSource)(nil)
)

// NewMemSource returns a source whose live queue holds queue messages and
// whose replay buffer keeps the last keep messages (0: no replay buffer).
func NewMemSource(queue, keep int) *MemSource {
	return &MemSource{live: make(chan Message, queue), max: keep}
}

// Publish records m in the replay buffer and delivers it live, blocking
// while the live queue is full.
func (s *MemSource) Publish(ctx context.Context, m Message) error {
	s.record(m)
	select {
	case s.live <- m:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Record adds m to the replay buffer without delivering it live: on its own,
// a message lost between publisher and subscriber.
func (s *MemSource) Record(m Message) { s.record(m) }

// Restart empties the replay buffer, as an engine restart does.
func (s *MemSource) Restart() {
	s.mu.Lock()
	s.buf = nil
	s.mu.Unlock()
}

func (s *MemSource) record(m Message) {
	if s.max <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.buf) == s.max {
		copy(s.buf, s.buf[1:])
		s.buf = s.buf[:len(s.buf)-1]
	}
	s.buf = append(s.buf, m)
}

// Recv implements Source.
func (s *MemSource) Recv(ctx context.Context) (Message, error) {
	select {
	case m := <-s.live:
		return m, nil
	case <-ctx.Done():
		return Message{}, ctx.Err()
	}
}

// Replay implements Replayer.
func (s *MemSource) Replay(ctx context.Context, from uint64) ([]Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replays++
	var out []Message
	for _, m := range s.buf {
		if m.Seq >= from {
			out = append(out, m)
		}
	}
	return out, nil
}

// Replays returns how many replay requests the source has answered.
func (s *MemSource) Replays() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replays
}
