package mesh

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
)

// waitPaired waits until a holds b's verified certificate and a session
// with it.
func waitPaired(t *testing.T, a, b *core) {
	t.Helper()
	testwait.For(t, 10*time.Second, a.Name()+" shares a session with "+b.Name(), func() bool {
		s, _ := a.pairFor(b.Name())
		return s != nil
	})
}

// A message recorded off the wire and delivered again is refused: a
// learned record (which carries no sequence number of its own) reaches the
// router once, and its copies count as replays.
func TestIdentityRefusesReplayedMessages(t *testing.T) {
	h := newIdentityHarness(t, 2, 0)
	rt, other := h.Routers[0], h.Routers[1]
	waitPaired(t, other.core, rt.core)
	waitPaired(t, rt.core, other.core)
	msg := encodeLearned(&learnedMsg{From: other.Name(), Records: []Learned{
		{Kind: LearnedPin, Model: "m", Target: EngineURL(0), Key: 4242, TTL: time.Minute}}})
	sealed, ok := other.sealFor(rt.Name(), msg)
	if !ok {
		t.Fatal("no session with the router")
	}
	deliver := (*delegate)(rt.core).NotifyMsg
	before := rejected(rt.core, rejectReplay)
	for range 5 {
		deliver(bytes.Clone(sealed))
	}
	select {
	case got := <-rt.Learned():
		if got.Key != 4242 {
			t.Fatalf("received %+v", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the original message did not arrive")
	}
	select {
	case got := <-rt.Learned():
		t.Fatalf("a replayed copy was applied: %+v", got)
	default:
	}
	if got := rejected(rt.core, rejectReplay) - before; got != 4 {
		t.Errorf("replay rejections rose by %d, want 4", got)
	}

	// Nor does the window reopen when the sender's certificate arrives
	// again (anyone may resend it), or when the router forgot it (the
	// sender left and rejoined in the same session, a healed partition):
	// the copy is still refused, while the sender's next message, numbered
	// on from before, is taken.
	identity := encodeIdentity(&identityMsg{From: other.Name(), Chain: other.identity().Chain})
	for _, forget := range []bool{false, true} {
		if forget {
			rt.mu.Lock()
			delete(rt.peers, other.Name())
			rt.mu.Unlock()
		}
		deliver(identity)
		waitPaired(t, rt.core, other.core)
		deliver(bytes.Clone(sealed))
		select {
		case got := <-rt.Learned():
			t.Fatalf("forget=%v: a replayed copy was applied after the certificate came again: %+v", forget, got)
		default:
		}
		next, _ := other.sealFor(rt.Name(), msg)
		deliver(next)
		select {
		case <-rt.Learned():
		case <-time.After(5 * time.Second):
			t.Fatalf("forget=%v: the sender's next message was refused", forget)
		}
	}
	before += 2 // the two copies above

	// A message without a number (sealed as before numbers existed) is
	// refused too, although its MAC checks.
	s, _ := other.pairFor(rt.Name())
	mac := macOf(s.key, msg)
	deliver(append(append(bytes.Clone(msg), macPrefix...), mac...))
	if got := rejected(rt.core, rejectReplay) - before; got != 5 {
		t.Errorf("an unnumbered message: replay rejections rose by %d, want 5", got)
	}
}

// A message recorded in an earlier session of its sender (before it
// restarted) does not check in the new one: the pair key is bound to both
// members' sessions.
func TestIdentitySessionsBindThePairKey(t *testing.T) {
	ca, err := NewTestCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	a, err := ca.Issue("a", RoleRouter, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ca.Issue("b", RoleSidecar, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pubB, _ := exchangeKey(b.Leaf.PublicKey)
	pubA, _ := exchangeKey(a.Leaf.PublicKey)
	endA, endB := end{keyIDOf(a.Chain[0]), 1}, end{keyIDOf(b.Chain[0]), 7}
	ab, _ := pairKey(a.Key, endA, pubB, endB)
	ba, _ := pairKey(b.Key, endB, pubA, endA)
	if !bytes.Equal(ab, ba) {
		t.Fatal("the two ends derive different keys for one session")
	}
	for _, restarted := range []struct{ a, b end }{{end{endA.keyID, 2}, endB}, {endA, end{endB.keyID, 8}}} {
		k, _ := pairKey(a.Key, restarted.a, pubB, restarted.b)
		if bytes.Equal(k, ab) {
			t.Errorf("sessions %d/%d derive the key of sessions 1/7", restarted.a.session, restarted.b.session)
		}
	}
}

// The replay window takes each number once, in any order within the
// window, and nothing older than it.
func TestReplayWindow(t *testing.T) {
	var w replayWindow
	steps := []struct {
		n    uint64
		want bool
	}{
		{0, false}, {1, true}, {1, false}, {3, true}, {2, true}, {2, false}, {3, false},
		{300, true}, {300 - replayWindowSize + 1, true}, {300 - replayWindowSize + 1, false},
		{300 - replayWindowSize, false}, {46, true}, {299, true}, {1000, true}, {999, true}, {300, false}, {1000, false},
		{1000 - 64, true}, {1000 - 64, false}, {1000 - 65, true}, {1000 - 128, true}, {1000 - 129, true}, {1000 - 129, false},
	}
	for i, s := range steps {
		if got := w.take(s.n); got != s.want {
			t.Errorf("step %d: take(%d) = %v, want %v", i, s.n, got, s.want)
		}
	}
}

// A certificate grants one role: a process cannot start as a router with
// a sidecar's certificate (or the other way round), nor with one that
// names no role.
func TestIdentityRoleAtStart(t *testing.T) {
	ca, err := NewTestCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		cert  Role
		start func(context.Context, Config, []string) error
	}{
		{"router with a sidecar certificate", RoleSidecar, func(ctx context.Context, c Config, j []string) error {
			_, err := StartRouter(ctx, c, j)
			return err
		}},
		{"sidecar with a router certificate", RoleRouter, func(ctx context.Context, c Config, j []string) error {
			_, err := StartSidecar(ctx, c, j)
			return err
		}},
		{"router with no role", 0, func(ctx context.Context, c Config, j []string) error {
			_, err := StartRouter(ctx, c, j)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := ca.Issue("m", tc.cert, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			err = tc.start(t.Context(), Config{Identity: id, InsecureDev: true, BindAddr: "127.0.0.1",
				Meta: Meta{EngineURL: EngineURL(0)}, Timing: FastTiming}, nil)
			if !errors.Is(err, ErrIdentity) {
				t.Fatalf("started: err = %v", err)
			}
		})
	}
}

// A member holding a valid sidecar certificate that announces itself as
// a router is not taken as one: its router-to-router messages are
// refused (wrong_role) though their MAC checks under its key.
func TestIdentityRefusesAnotherRole(t *testing.T) {
	h := newIdentityHarness(t, 1, 0)
	rt := h.Routers[0]
	id, err := h.CA.Issue("liar", RoleSidecar, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewLoopbackTransport(79)
	if err != nil {
		t.Fatal(err)
	}
	// A modified build: a sidecar core that announces the router role.
	liar, err := newCore(Config{Identity: id, InsecureDev: true, Transport: tr, Timing: FastTiming,
		Meta: Meta{EngineURL: EngineURL(3)}}, RoleSidecar)
	if err != nil {
		t.Fatal(err)
	}
	liar.cfg.Meta.Role = RoleRouter
	meta, err := encodeMeta(&liar.cfg.Meta)
	if err != nil {
		t.Fatal(err)
	}
	liar.meta.Store(&meta)
	liar.hooks = roleHooks{handle: func(byte, []byte) (bool, error) { return true, nil }}
	if err := liar.start(t.Context(), []string{rt.Addr()}); err != nil {
		t.Fatal(err)
	}
	defer liar.Close()
	testwait.For(t, 10*time.Second, "the liar holds the router's certificate", func() bool {
		liar.mu.RLock()
		defer liar.mu.RUnlock()
		_, ok := liar.peers[rt.Name()]
		return ok
	})
	before := rejected(rt.core, rejectWrongRole)
	msg := encodeLearned(&learnedMsg{From: "liar", Records: []Learned{
		{Kind: LearnedPin, Model: "m", Target: EngineURL(0), Key: 7, TTL: time.Minute}}})
	testwait.For(t, 10*time.Second, "the router refuses the liar's messages for its role", func() bool {
		// The liar seals in the session the two would share if the router took it.
		liar.mu.RLock()
		p := liar.peers[rt.Name()]
		liar.mu.RUnlock()
		m, _ := liar.memberByName(rt.Name())
		key, err := pairKey(id.Key, end{keyIDOf(id.Chain[0]), liar.cfg.Meta.session}, p.pub, end{p.keyID, m.meta.session})
		if err != nil {
			t.Fatal(err)
		}
		(*delegate)(rt.core).NotifyMsg(seal(key, 1, msg))
		return rejected(rt.core, rejectWrongRole) > before
	})
	select {
	case got := <-rt.Learned():
		t.Fatalf("a record from a sidecar's certificate was taken as a router's: %+v", got)
	default:
	}
}

// A renewed certificate is taken up without a restart: the router learns
// the new one, what the sidecar sends after the renewal is applied, and
// a certificate for another name or role is refused, leaving the running
// one in place.
func TestIdentityRenewalWithoutRestart(t *testing.T) {
	h := newIdentityHarness(t, 1, 1)
	rt, sc := h.Routers[0], h.Sidecars[0]
	waitPaired(t, rt.core, sc.core)
	tg := rt.View().Targets([]string{EngineURL(0)})
	sc.Publisher().SetStatus(EngineStatus{MetricsOK: true, Running: 1})
	testwait.For(t, 10*time.Second, "the status under the first certificate applied", func() bool {
		q, ok := tg.Load(0)
		return ok && q == 1
	})
	first := sc.identity()
	for _, bad := range []struct {
		name string
		role Role
	}{{"someone-else", RoleSidecar}, {sc.Name(), RoleRouter}} {
		id, err := h.CA.Issue(bad.name, bad.role, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := sc.SetIdentity(id); !errors.Is(err, ErrIdentity) {
			t.Errorf("a certificate for %s as %s: err = %v", bad.name, bad.role, err)
		}
	}
	if sc.identity() != first {
		t.Fatal("a refused certificate replaced the running one")
	}
	renewed, err := h.CA.Issue(sc.Name(), RoleSidecar, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.SetIdentity(renewed); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the router holds the renewed certificate", func() bool {
		rt.mu.RLock()
		defer rt.mu.RUnlock()
		p, ok := rt.peers[sc.Name()]
		return ok && bytes.Equal(p.keyID, renewed.keyID) && bytes.Equal(rt.members[sc.Name()].meta.keyID, renewed.keyID)
	})
	sc.Publisher().SetStatus(EngineStatus{MetricsOK: true, Running: 5})
	testwait.For(t, 10*time.Second, "a status sealed under the renewed certificate applied", func() bool {
		q, ok := tg.Load(0)
		return ok && q == 5
	})
}

// A sidecar that restarts at the same address (same certificate, a new
// session) is heard again: the router derives the new session's key once
// it sees the new meta, and applies the new process's statuses.
func TestIdentityRestartStartsANewSession(t *testing.T) {
	h := newIdentityHarness(t, 1, 0)
	rt := h.Routers[0]
	id, err := h.CA.Issue("gpu-9", RoleSidecar, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	port := loopbackPort(t)
	cfg := Config{Name: "gpu-9", Identity: id, InsecureDev: true, BindAddr: "127.0.0.1", BindPort: port, Timing: FastTiming,
		Meta: Meta{EngineURL: EngineURL(9), Models: []string{"m"}}}
	tg := rt.View().Targets([]string{EngineURL(9)})
	for i, running := range []uint64{2, 6} {
		sc, err := StartSidecar(t.Context(), cfg, []string{rt.Addr()})
		if err != nil {
			t.Fatal(err)
		}
		sc.Publisher().SetStatus(EngineStatus{MetricsOK: true, Running: running})
		testwait.For(t, 20*time.Second, "the router applies the statuses of process "+strconv.Itoa(i+1), func() bool {
			q, ok := tg.Load(0)
			return ok && q == running
		})
		sc.Close() // a crash: no leave message
	}
}

// loopbackPort is a free TCP port on 127.0.0.1 (UDP on it is assumed free
// too, as memberlist needs both).
func loopbackPort(t *testing.T) int {
	t.Helper()
	_, port, err := splitHostPort(loopbackAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	return port
}
