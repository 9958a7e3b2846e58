package sidecar

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/kvblock"
	"github.com/rolter/rolter/sidecar/kvevents"
)

// StreamStats are the KV-event stream's counters (monotonic).
type StreamStats struct {
	Messages        atomic.Uint64 // messages accepted by the topic filter
	Stored          atomic.Uint64 // BlockStored events applied
	Removed         atomic.Uint64 // BlockRemoved events applied
	Cleared         atomic.Uint64 // AllBlocksCleared events applied
	Malformed       atomic.Uint64 // messages dropped as undecodable
	Gaps            atomic.Uint64 // sequence gaps detected
	GapsRepaired    atomic.Uint64 // gaps closed by replay
	Replays         atomic.Uint64 // replay requests sent
	ReplayFailures  atomic.Uint64 // replay requests that failed outright
	Restarts        atomic.Uint64 // sequence regressions (engine restarts)
	Duplicates      atomic.Uint64 // messages already applied
	RecvErrors      atomic.Uint64 // transient receive errors
	LastMessageUnix atomic.Int64  // unix ns of the last accepted message
}

// stream applies one engine's KV-event stream to a Tracker, in sequence.
//
// Sequence rules. The first message fixes the stream: when its number is the
// publisher's start value (0 for vLLM, 1 for others) the engine's cache was
// empty and the view starts EXACT; otherwise the history is asked for by
// replay from 0, and the view is EXACT only when replay returns every batch
// from the start value on. After that each message must be last+1; a gap is
// repaired by replay from last+1, and when replay cannot close it the view is
// DEGRADED. A number at or below the last live one means the engine
// restarted: the tracker is cleared and the stream starts again. A DEGRADED
// view becomes EXACT again only by a full resync: an AllBlocksCleared applied
// in sequence, or an engine restart observed from its stream's start.
type stream struct {
	src           Source
	rep           Replayer // nil: no replay endpoint
	topic         string
	tracker       *Tracker
	dec           *kvevents.Decoder
	log           *slog.Logger
	now           func() time.Time
	replayTimeout time.Duration
	stats         *StreamStats

	started  bool
	next     uint64 // sequence number expected next
	lastLive uint64 // last sequence number received live
	exact    bool
	// replayDownUntil: after a failed replay request, gaps are not repaired
	// until then, so that a dead replay endpoint cannot stall the stream
	// for a replay timeout per gap.
	replayDownUntil time.Time
}

// replayCooldown is how long a failed replay endpoint is left alone.
const replayCooldown = 10 * time.Second

func newStream(src Source, rep Replayer, topic string, tr *Tracker, log *slog.Logger, now func() time.Time, replayTimeout time.Duration, stats *StreamStats) *stream {
	if replayTimeout <= 0 {
		replayTimeout = 2 * time.Second
	}
	return &stream{src: src, rep: rep, topic: topic, tracker: tr, dec: kvevents.NewDecoder(),
		log: log, now: now, replayTimeout: replayTimeout, stats: stats}
}

// run receives and applies messages until ctx is done.
func (s *stream) run(ctx context.Context) error {
	s.probe(ctx)
	backoff := time.NewTimer(0)
	defer backoff.Stop()
	for {
		m, err := s.src.Recv(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, ErrFrames) {
				// A message without valid framing: its sequence number is
				// unknown; the next message shows whether it left a gap.
				s.stats.Malformed.Add(1)
				s.log.Warn("kv events: badly framed message dropped", "err", err)
				continue
			}
			s.stats.RecvErrors.Add(1)
			s.log.Warn("kv events: receive failed", "err", err)
			backoff.Reset(100 * time.Millisecond)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-backoff.C:
			}
			continue
		}
		s.handle(ctx, m)
	}
}

// handle applies one live message.
func (s *stream) handle(ctx context.Context, m Message) {
	if s.topic != "" && !strings.HasPrefix(m.Topic, s.topic) {
		return
	}
	s.stats.Messages.Add(1)
	s.stats.LastMessageUnix.Store(s.now().UnixNano())
	if s.started && m.Seq <= s.lastLive {
		s.stats.Restarts.Add(1)
		s.log.Info("kv events: sequence went back, engine restarted", "last", s.lastLive, "seq", m.Seq)
		s.tracker.Clear()
		s.started = false
	}
	switch {
	case !s.started:
		s.start(ctx, m)
	case m.Seq < s.next:
		s.stats.Duplicates.Add(1)
	case m.Seq == s.next:
		s.apply(m)
	default:
		s.gap(ctx, m)
	}
	s.lastLive = m.Seq
	if s.exact {
		s.tracker.SetState(mesh.StateExact)
	} else {
		s.tracker.SetState(mesh.StateDegraded)
	}
}

// probe asks the replay endpoint, before any live message, for the whole
// history. An empty answer means the engine has published nothing yet, so
// its cache is empty and the view is EXACT from the start: an idle engine
// need not wait for its first request to be scored. Without a replay
// endpoint (or when the answer is not empty) the first live message
// decides, as start says.
func (s *stream) probe(ctx context.Context) {
	if !s.canReplay() {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, s.replayTimeout)
	defer cancel()
	s.stats.Replays.Add(1)
	msgs, err := s.rep.Replay(rctx, 0)
	if err != nil {
		s.stats.ReplayFailures.Add(1)
		s.log.Warn("kv events: replay endpoint did not answer at start", "err", err)
		return
	}
	if len(msgs) == 0 && !s.started {
		s.exact = true
		s.tracker.SetState(mesh.StateExact)
		s.log.Info("kv events: the engine has published no event yet (empty replay): residency EXACT and empty")
	}
}

// start begins a stream at its first live message m.
func (s *stream) start(ctx context.Context, m Message) {
	s.started = true
	var history []Message
	if s.canReplay() && m.Seq > 0 {
		history = s.replay(ctx, 0, m.Seq)
	}
	complete := m.Seq <= 1 && len(history) == 0
	if len(history) > 0 {
		complete = history[0].Seq <= 1 && history[len(history)-1].Seq == m.Seq-1
		for i := 1; i < len(history) && complete; i++ {
			complete = history[i].Seq == history[i-1].Seq+1
		}
	}
	s.exact = complete
	if !complete {
		s.log.Warn("kv events: joined the stream mid-way; residency DEGRADED until the engine clears its cache or restarts", "seq", m.Seq)
	}
	for _, h := range history {
		s.apply(h)
	}
	s.apply(m)
}

// gap handles a live message m beyond the expected next number.
func (s *stream) gap(ctx context.Context, m Message) {
	s.stats.Gaps.Add(1)
	if s.canReplay() {
		for _, h := range s.replay(ctx, s.next, m.Seq) {
			if h.Seq == s.next {
				s.apply(h)
			} else if h.Seq > s.next {
				break
			}
		}
	}
	if s.next == m.Seq {
		s.stats.GapsRepaired.Add(1)
	} else {
		s.log.Warn("kv events: sequence gap not repaired; residency DEGRADED", "missing_from", s.next, "seq", m.Seq)
		s.exact = false
	}
	s.apply(m)
}

func (s *stream) canReplay() bool {
	return s.rep != nil && !s.now().Before(s.replayDownUntil)
}

// replay asks for messages from `from` and keeps those below `below`, in
// order.
func (s *stream) replay(ctx context.Context, from, below uint64) []Message {
	s.stats.Replays.Add(1)
	rctx, cancel := context.WithTimeout(ctx, s.replayTimeout)
	defer cancel()
	msgs, err := s.rep.Replay(rctx, from)
	if err != nil {
		s.stats.ReplayFailures.Add(1)
		s.replayDownUntil = s.now().Add(replayCooldown)
		s.log.Warn("kv events: replay failed; not retried for a while", "from", from, "err", err, "cooldown", replayCooldown)
	}
	out := msgs[:0]
	for _, h := range msgs {
		if h.Seq >= from && h.Seq < below && (len(out) == 0 || h.Seq > out[len(out)-1].Seq) {
			out = append(out, h)
		}
	}
	return out
}

// apply decodes m and applies it, advancing the expected number.
func (s *stream) apply(m Message) {
	s.next = m.Seq + 1
	b, err := s.dec.Decode(m.Payload)
	if err != nil {
		s.stats.Malformed.Add(1)
		s.log.Warn("kv events: malformed batch dropped; residency DEGRADED", "seq", m.Seq, "err", err)
		s.exact = false
		return
	}
	for i := range b.Events {
		switch b.Events[i].Kind {
		case kvblock.BlockStored:
			s.stats.Stored.Add(1)
		case kvblock.BlockRemoved:
			s.stats.Removed.Add(1)
		case kvblock.AllBlocksCleared:
			s.stats.Cleared.Add(1)
			s.exact = true // full resync: the engine's cache is empty here
		}
	}
	s.tracker.Apply(b)
}
