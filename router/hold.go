package router

import (
	"context"
	"time"
)

// Requests that arrive before the first configuration. A router answers
// its port as soon as it starts, while its first snapshot (the Raft
// state's first apply, which needs a leader) comes a moment later; a
// client that connected in that moment used to get an immediate 503. Such
// a request now waits, bounded by Options.ConfigWait, and only then gets
// 503 with Retry-After.

// DefaultConfigWait is how long a request waits for the first
// configuration unless Options.ConfigWait says otherwise.
const DefaultConfigWait = 5 * time.Second

// noConfigRetryAfter is the Retry-After of the 503 after the wait.
const noConfigRetryAfter = 2 * time.Second

// markConfigured releases every request waiting for the first snapshot.
func (s *Server) markConfigured() {
	s.configuredOnce.Do(func() { close(s.configured) })
}

// awaitSnapshot returns the running snapshot, waiting up to the config
// wait for the first one. nil means none came in time, the client went
// away (ctx ended) or the server is draining.
func (s *Server) awaitSnapshot(ctx context.Context) *snapshot {
	if sn := s.snap.Load(); sn != nil || s.configWait <= 0 || s.draining.Load() {
		return sn
	}
	t := time.NewTimer(s.configWait)
	defer t.Stop()
	select {
	case <-s.configured:
	case <-t.C:
	case <-ctx.Done():
	}
	return s.snap.Load()
}
