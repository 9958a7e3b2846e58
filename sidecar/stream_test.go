package sidecar

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/internal/testwait"
	"github.com/rolter/rolter/kvblock"
)

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func fixedNow() time.Time { return time.Unix(1_800_000_000, 0) }

// harness feeds a stream by hand, message by message, deterministically.
type harness struct {
	t      *testing.T
	ctx    context.Context
	src    *MemSource
	st     *stream
	tr     *Tracker
	stats  *StreamStats
	view   *view
	engine *fakeEngine
}

// newHarness builds a stream over an engine starting at firstSeq; keep is
// the replay buffer length (0: no replay endpoint at all).
func newHarness(t *testing.T, seed, firstSeq uint64, keep int) *harness {
	h := &harness{t: t, ctx: t.Context(), src: NewMemSource(1, keep), stats: &StreamStats{}, view: newView()}
	h.tr = NewTracker(16, 7)
	var rep Replayer
	if keep > 0 {
		rep = h.src
	}
	h.st = newStream(h.src, rep, "", h.tr, discardLog(), fixedNow, time.Second, h.stats)
	h.engine = newFakeEngine(t, seed, firstSeq)
	return h
}

// deliver records m in the replay buffer and hands it to the stream.
func (h *harness) deliver(m Message) {
	h.src.Record(m)
	h.st.handle(h.ctx, m)
}

// lose records m in the replay buffer only.
func (h *harness) lose(m Message) { h.src.Record(m) }

func (h *harness) flush() { h.view.apply(h.t, h.tr.Flush(50)) }

// checkExactTruth asserts the consumer's view equals the engine's truth.
func (h *harness) checkExactTruth(when string) {
	h.t.Helper()
	h.flush()
	if h.view.state != mesh.StateExact {
		h.t.Fatalf("%s: state %v, want EXACT", when, h.view.state)
	}
	got, want := h.view.sorted(), h.engine.truth()
	if !slices.Equal(got, want) {
		h.t.Fatalf("%s: view diverges from the engine: %d keys vs %d (missing %d, extra %d)",
			when, len(got), len(want), len(diff(want, got)), len(diff(got, want)))
	}
}

func diff(a, b []uint64) []uint64 {
	var out []uint64
	for _, k := range a {
		if _, ok := slices.BinarySearch(b, k); !ok {
			out = append(out, k)
		}
	}
	return out
}

func TestGapRepairedByReplayStaysExact(t *testing.T) {
	for _, firstSeq := range []uint64{0, 1} {
		t.Run(fmt.Sprintf("first seq %d", firstSeq), func(t *testing.T) {
			h := newHarness(t, 42+firstSeq, firstSeq, 10000)
			lost := 0
			for i := 0; i < 3000; i++ {
				m := h.engine.step()
				if i > 0 && h.engine.rng.IntN(20) == 0 {
					h.lose(m)
					lost++
					continue
				}
				h.deliver(m)
				if i%97 == 0 {
					h.checkExactTruth(fmt.Sprintf("step %d", i))
				}
			}
			h.deliver(h.engine.step())
			h.checkExactTruth("end")
			if lost == 0 || h.stats.Gaps.Load() == 0 {
				t.Fatal("scenario lost nothing: the test proves nothing")
			}
			if g, r := h.stats.Gaps.Load(), h.stats.GapsRepaired.Load(); g != r {
				t.Fatalf("%d gaps, %d repaired", g, r)
			}
			for i, exact := range h.view.exact {
				if !exact {
					t.Fatalf("delta %d was not EXACT although every gap was repaired", i)
				}
			}
		})
	}
}

func TestUnrepairedGapDegradesUntilCleared(t *testing.T) {
	tests := []struct {
		name string
		keep int // replay buffer; 0 = no replay endpoint
		lose int // consecutive messages lost
	}{
		{"no replay endpoint", 0, 1},
		{"replay buffer too short", 5, 12},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 7, 0, tc.keep)
			for i := 0; i < 300; i++ {
				h.deliver(h.engine.step())
			}
			h.checkExactTruth("before the gap")
			for i := 0; i < tc.lose; i++ {
				h.lose(h.engine.step())
			}
			before := len(h.view.exact)
			for i := 0; i < 500; i++ {
				h.deliver(h.engine.step())
				h.flush()
			}
			if h.tr.State() != mesh.StateDegraded {
				t.Fatalf("state %v after an unrepaired gap, want DEGRADED", h.tr.State())
			}
			for i, exact := range h.view.exact[before:] {
				if exact {
					t.Fatalf("delta %d after the gap claims EXACT", before+i)
				}
			}
			h.deliver(h.engine.clearAll())
			h.checkExactTruth("right after AllBlocksCleared")
			for i := 0; i < 300; i++ {
				h.deliver(h.engine.step())
			}
			h.checkExactTruth("after resync")
		})
	}
}

func TestEngineRestartStartsANewStream(t *testing.T) {
	tests := []struct {
		name      string
		keep      int
		loseFirst int // messages of the new stream lost before the sidecar sees one
		wantExact bool
	}{
		{"restart seen from its first message", 0, 0, true},
		{"restart joined late, replay has the history", 1000, 3, true},
		{"restart joined late, no replay", 0, 3, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 3, 0, tc.keep)
			for i := 0; i < 400; i++ {
				h.deliver(h.engine.step())
			}
			h.checkExactTruth("old engine")
			// The engine restarts: empty cache, sequence from 0 again, empty
			// replay buffer.
			h.engine = newFakeEngine(t, 4, 0)
			h.src.Restart()
			for i := 0; i < tc.loseFirst; i++ {
				h.lose(h.engine.step())
			}
			for i := 0; i < 50; i++ {
				h.deliver(h.engine.step())
			}
			if h.stats.Restarts.Load() != 1 {
				t.Fatalf("restarts = %d, want 1", h.stats.Restarts.Load())
			}
			if !tc.wantExact {
				h.flush()
				if h.view.state != mesh.StateDegraded {
					t.Fatalf("state %v, want DEGRADED", h.view.state)
				}
				return
			}
			h.checkExactTruth("new engine")
		})
	}
}

func TestJoinMidStream(t *testing.T) {
	tests := []struct {
		name      string
		keep      int
		wantExact bool
	}{
		{"replay holds the whole history", 10000, true},
		{"replay holds only the tail", 50, false},
		{"no replay", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 11, 0, tc.keep)
			for i := 0; i < 200; i++ {
				h.lose(h.engine.step()) // published before the sidecar subscribed
			}
			for i := 0; i < 100; i++ {
				h.deliver(h.engine.step())
			}
			if tc.wantExact {
				h.checkExactTruth("joined")
				return
			}
			h.flush()
			if h.view.state != mesh.StateDegraded {
				t.Fatalf("state %v, want DEGRADED", h.view.state)
			}
		})
	}
}

func TestMalformedBatchIsCountedDroppedAndDegrades(t *testing.T) {
	h := newHarness(t, 5, 0, 100)
	for i := 0; i < 50; i++ {
		h.deliver(h.engine.step())
	}
	bad := h.engine.message()
	bad.Payload = []byte{0x93, 0xcb, 0x01} // truncated
	h.deliver(bad)
	h.deliver(h.engine.step())
	if got := h.stats.Malformed.Load(); got != 1 {
		t.Fatalf("malformed = %d, want 1", got)
	}
	h.flush()
	if h.view.state != mesh.StateDegraded {
		t.Fatalf("a dropped batch must degrade the view, got %v", h.view.state)
	}
	// A duplicate (same number again after replay) is not a restart.
	if h.stats.Restarts.Load() != 0 {
		t.Fatal("malformed message counted as restart")
	}
}

func TestTopicFilter(t *testing.T) {
	h := newHarness(t, 5, 0, 0)
	h.st.topic = "kv@"
	m := h.engine.step()
	other := m
	other.Topic = "other"
	h.st.handle(h.ctx, other)
	if h.stats.Messages.Load() != 0 {
		t.Fatal("message of another topic was applied")
	}
	h.st.handle(h.ctx, m)
	if h.stats.Messages.Load() != 1 {
		t.Fatal("matching topic not applied")
	}
}

func TestCapturedVectorsThroughTheStream(t *testing.T) {
	load := func(name string) []Message {
		raw, err := os.ReadFile(filepath.Join("kvevents", "testdata", "vectors", name))
		if err != nil {
			t.Fatal(err)
		}
		var out []Message
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var v struct {
				Frames []string `json:"frames_b64"`
			}
			if err := json.Unmarshal([]byte(line), &v); err != nil {
				t.Fatal(err)
			}
			frames := make([][]byte, len(v.Frames))
			for i, f := range v.Frames {
				frames[i], _ = base64.StdEncoding.DecodeString(f)
			}
			m, err := ParseFrames(frames)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, m)
		}
		return out
	}
	seq := func(from uint32, n int) []uint32 {
		out := make([]uint32, n)
		for i := range out {
			out[i] = from + uint32(i)
		}
		return out
	}
	t.Run("publisher a: root parent 0, chained store", func(t *testing.T) {
		tr := NewTracker(16, 1)
		st := newStream(nil, nil, "kv@", tr, discardLog(), fixedNow, time.Second, &StreamStats{})
		for _, m := range load("publisher-a-array.jsonl") {
			st.handle(t.Context(), m)
		}
		first := kvblock.Keys(nil, seq(1, 32), 16, 0)
		second := make([]uint32, 16)
		for i := range second {
			second[i] = uint32(99 - i)
		}
		want := append(first, kvblock.Next(first[0], 0, second))
		for _, k := range want {
			if !tr.Resident(k) {
				t.Errorf("key %#x not resident", k)
			}
		}
		if s := tr.Stats(); s.ResidentKeys != 3 || s.State != mesh.StateExact {
			t.Fatalf("stats %+v, want 3 keys EXACT", s)
		}
	})
	for _, file := range []string{"publisher-b-array-byteshash.jsonl", "publisher-b-map-byteshash.jsonl"} {
		t.Run(file, func(t *testing.T) {
			tr := NewTracker(16, 1)
			stats := &StreamStats{}
			st := newStream(nil, nil, "", tr, discardLog(), fixedNow, time.Second, stats)
			msgs := load(file)
			st.handle(t.Context(), msgs[0])
			lora := kvblock.Keys(nil, seq(1, 32), 16, kvblock.Extra("sql-adapter", ""))
			if !tr.Resident(lora[0]) || !tr.Resident(lora[1]) || tr.Resident(kvblock.Keys(nil, seq(1, 32), 16, 0)[0]) {
				t.Fatal("adapter blocks must be keyed with the adapter name")
			}
			if tr.State() != mesh.StateDegraded {
				t.Fatal("a stream first seen at 41 cannot be exact")
			}
			st.handle(t.Context(), msgs[1]) // 43: 42 missing, no replay
			if stats.Gaps.Load() != 1 || tr.State() != mesh.StateDegraded || tr.Resident(lora[0]) {
				t.Fatalf("after the gap: gaps=%d state=%v", stats.Gaps.Load(), tr.State())
			}
			st.handle(t.Context(), msgs[2]) // 44: AllBlocksCleared
			if tr.State() != mesh.StateExact || tr.Stats().ResidentKeys != 0 {
				t.Fatalf("after AllBlocksCleared: %+v", tr.Stats())
			}
		})
	}
}

// failingReplayer is a replay endpoint that is down.
type failingReplayer struct{ calls int }

func (f *failingReplayer) Replay(ctx context.Context, from uint64) ([]Message, error) {
	f.calls++
	return nil, ErrReplay
}

func TestDeadReplayEndpointIsNotRetriedPerGap(t *testing.T) {
	now := fixedNow()
	rep := &failingReplayer{}
	tr := NewTracker(16, 1)
	stats := &StreamStats{}
	st := newStream(nil, rep, "", tr, discardLog(), func() time.Time { return now }, time.Second, stats)
	e := newFakeEngine(t, 8, 0)
	st.handle(t.Context(), e.step())
	for gap := 0; gap < 3; gap++ {
		e.step() // lost
		st.handle(t.Context(), e.step())
	}
	if rep.calls != 1 || stats.Gaps.Load() != 3 || stats.ReplayFailures.Load() != 1 {
		t.Fatalf("replay calls %d, gaps %d, failures %d: want 1 call within the cooldown",
			rep.calls, stats.Gaps.Load(), stats.ReplayFailures.Load())
	}
	if tr.State() != mesh.StateDegraded {
		t.Fatalf("state %v", tr.State())
	}
	now = now.Add(replayCooldown)
	e.step()
	st.handle(t.Context(), e.step())
	if rep.calls != 2 {
		t.Fatalf("after the cooldown the endpoint must be asked again (calls %d)", rep.calls)
	}
}

// scriptedSource returns its script in order, then blocks until ctx is done.
type scriptedSource struct {
	mu     sync.Mutex
	script []error // nil entries deliver msg
	msg    Message
}

func (s *scriptedSource) Recv(ctx context.Context) (Message, error) {
	s.mu.Lock()
	if len(s.script) > 0 {
		err := s.script[0]
		s.script = s.script[1:]
		s.mu.Unlock()
		return s.msg, err
	}
	s.mu.Unlock()
	<-ctx.Done()
	return Message{}, ctx.Err()
}

func TestRunLoopCountsBadFramingAndSurvivesErrors(t *testing.T) {
	e := newFakeEngine(t, 9, 0)
	src := &scriptedSource{script: []error{ErrFrames, errors.New("socket hiccup"), nil}, msg: e.step()}
	stats := &StreamStats{}
	st := newStream(src, nil, "", NewTracker(16, 1), discardLog(), fixedNow, time.Second, stats)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- st.run(ctx) }()
	testwait.For(t, 10*time.Second, "the message after the errors to be applied", func() bool { return stats.Messages.Load() == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("run returned %v", err)
	}
	if stats.Malformed.Load() != 1 || stats.RecvErrors.Load() != 1 {
		t.Fatalf("malformed %d, receive errors %d", stats.Malformed.Load(), stats.RecvErrors.Load())
	}
}

// BenchmarkStreamMessage measures one engine step end to end in the sidecar:
// sequence check, msgpack decode, key computation and residency update.
func BenchmarkStreamMessage(b *testing.B) {
	e := newFakeEngine(b, 1, 0)
	msgs := make([]Message, 4096)
	for i := range msgs {
		msgs[i] = e.step()
	}
	tr := NewTracker(16, 1)
	st := newStream(nil, nil, "", tr, discardLog(), fixedNow, time.Second, &StreamStats{})
	ctx := b.Context()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		st.handle(ctx, msgs[i%len(msgs)]) // wrapping around reads as an engine restart
		i++
		if i%256 == 0 {
			tr.Flush(0)
		}
	}
}

// An engine that has published nothing yet (its replay buffer is empty)
// has an empty cache: the view is EXACT before the first request, instead
// of waiting for it. A history in the buffer, or no replay endpoint,
// leaves the first live message to decide.
func TestIdleEngineIsExactFromAnEmptyReplay(t *testing.T) {
	for _, tc := range []struct {
		name    string
		history int  // batches already published
		replay  bool // engine has a replay endpoint
		want    mesh.ResidencyState
	}{
		{"idle engine with replay", 0, true, mesh.StateExact},
		{"engine with history", 2, true, mesh.StateUnknown},
		{"no replay endpoint", 0, false, mesh.StateUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := NewMemSource(1, 16)
			e := newFakeEngine(t, 5, 0)
			for range tc.history {
				src.Record(e.step())
			}
			var rep Replayer
			if tc.replay {
				rep = src
			}
			tr := NewTracker(16, 1)
			st := newStream(&scriptedSource{}, rep, "", tr, discardLog(), fixedNow, time.Second, &StreamStats{})
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- st.run(ctx) }()
			if tc.want == mesh.StateExact {
				testwait.For(t, 10*time.Second, "EXACT from the empty replay", func() bool { return tr.State() == mesh.StateExact })
			}
			cancel()
			<-done
			if got := tr.State(); got != tc.want {
				t.Fatalf("state %v, want %v", got, tc.want)
			}
		})
	}
}
