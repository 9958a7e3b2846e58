package mesh

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// lockCheckingSender records what a member sends and whether the engine
// lock was free at that moment.
type lockCheckingSender struct {
	e      func() *engine
	mu     sync.Mutex
	sent   [][]byte
	locked int
}

func (s *lockCheckingSender) record(msg []byte) error {
	free := true
	if e := s.e(); e != nil {
		if free = e.mu.TryLock(); free {
			e.mu.Unlock()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, append([]byte(nil), msg...))
	if !free {
		s.locked++
	}
	return nil
}

func (s *lockCheckingSender) SendBestEffort(_ *memberlist.Node, msg []byte) error {
	return s.record(msg)
}
func (s *lockCheckingSender) SendReliable(_ *memberlist.Node, msg []byte) error { return s.record(msg) }

// A router that cannot apply a sidecar's status asks it for a full state,
// and sends that request only after releasing the engine's lock: a slow
// or blocked send must not stall the readers and writers of that engine.
func TestResyncAskSentOutsideTheEngineLock(t *testing.T) {
	now := time.Unix(1000, 0)
	c := &core{cfg: Config{Name: "router"}, log: slog.New(slog.DiscardHandler), members: map[string]member{},
		now: func() time.Time { return now }}
	v := newView(c, RouterConfig{})
	const url = "http://127.0.0.1:1"
	tx := &lockCheckingSender{e: func() *engine { return v.lookup(url) }}
	c.setSender(tx)
	meta := Meta{Role: RoleSidecar, EngineURL: url}
	c.members["sc"] = member{node: &memberlist.Node{Name: "sc"}, meta: meta}
	v.memberUp("sc", meta)

	// A status of an epoch the router holds no full state for.
	msg := encodeStatus(&statusMsg{From: "sc", Seq: 1, Epoch: 7, ResSeq: 3})
	if err := v.handle(msg[0], msg[1:]); err != nil {
		t.Fatal(err)
	}
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if len(tx.sent) != 1 || tx.sent[0][0] != msgResync {
		t.Fatalf("sent %d messages, want one resync request", len(tx.sent))
	}
	ask, err := decodeResync(tx.sent[0][1:])
	if err != nil || !ask.Full || ask.From != "router" {
		t.Fatalf("resync request %+v, %v: want a full-state request from the router", ask, err)
	}
	if tx.locked != 0 {
		t.Errorf("%d sends happened while the engine lock was held", tx.locked)
	}
	if got := c.stats.ResyncsAsked.Load(); got != 1 {
		t.Errorf("ResyncsAsked = %d, want 1", got)
	}
}

// memberlist hands a node messages from inside memberlist.Create, before
// the member has anything to send through: a resync asked for then is
// counted as a send error instead of crashing the process (a router
// restarted in place got a sidecar's delta that way and died).
func TestAskBeforeTheMemberStartedIsCountedNotSent(t *testing.T) {
	now := time.Unix(1000, 0)
	c := &core{cfg: Config{Name: "router"}, log: slog.New(slog.DiscardHandler), members: map[string]member{},
		now: func() time.Time { return now }}
	v := newView(c, RouterConfig{})
	const url = "http://127.0.0.1:1"
	meta := Meta{Role: RoleSidecar, EngineURL: url}
	c.members["sc"] = member{node: &memberlist.Node{Name: "sc"}, meta: meta}
	v.memberUp("sc", meta)
	msg := encodeStatus(&statusMsg{From: "sc", Seq: 1, Epoch: 7, ResSeq: 3})
	if err := v.handle(msg[0], msg[1:]); err != nil {
		t.Fatal(err)
	}
	if got := c.stats.SendErrors.Load(); got != 1 {
		t.Fatalf("send errors %d, want the unsent resync counted once", got)
	}
}
