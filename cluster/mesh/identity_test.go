package mesh

import (
	"bytes"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/rolter/rolter/internal/testwait"
)

func newIdentityHarness(t *testing.T, routers, sidecars int) *Harness {
	t.Helper()
	return newHarness(t, HarnessConfig{Routers: routers, Sidecars: sidecars, Seed: 31, Identity: true})
}

func rejected(c *core, reason int) uint64 { return c.stats.Rejected[reason].Load() }

// With identity on, a message in another member's name is refused whether
// it carries no MAC or one under the key the forger (with a valid
// certificate of its own) shares with the receiver, and the honest
// member's view does not move; honest messages still flow.
func TestIdentityRefusesMessagesInAnothersName(t *testing.T) {
	const probeKey = 1 << 50 // the honest records sent before the forgeries
	h := newIdentityHarness(t, 2, 2)
	rt, honest, forger := h.Routers[0], h.Sidecars[0], h.Sidecars[1]
	keys := randomKeys(rand.New(rand.NewPCG(3, 4)), 100)
	honest.Publisher().Apply(ResidencyDelta{Added: keys, State: StateExact})
	honest.Publisher().SetStatus(EngineStatus{MetricsOK: true, Running: 1, Waiting: 3})
	tg := rt.View().Targets([]string{EngineURL(0)})
	testwait.For(t, 10*time.Second, "honest signed residency and status applied", func() bool {
		q, ok := tg.Load(0)
		return viewMatches(rt, EngineURL(0), keys) && ok && q == 4
	})
	// The other router's certificate must be verified here too before the
	// forgeries in its name are sent (on a loaded machine the pair's key
	// can come after the sidecars'): one honest record from it arrives.
	testwait.For(t, 20*time.Second, "an honest record from the other router", func() bool {
		h.Routers[1].Share(Learned{Kind: LearnedPin, Model: "m", Target: EngineURL(0), Key: probeKey, TTL: time.Minute})
		select {
		case <-rt.Learned():
			return true
		case <-time.After(200 * time.Millisecond):
			return false
		}
	})
	// The forger's half of the forgeries is sealed under its own key with
	// the router, which on a loaded machine can come after the rest.
	testwait.For(t, 20*time.Second, "the forger shares a key with the router", func() bool {
		s, _ := forger.pairFor(rt.Name())
		if s == nil {
			forger.askIdentity(rt.Name())
		}
		return s != nil
	})
	deliver := (*delegate)(rt.core).NotifyMsg
	before := [numRejectReasons]uint64{}
	for r := range before {
		before[r] = rejected(rt.core, r)
	}

	forged := [][]byte{}
	for seq := uint64(1); seq <= 400; seq++ {
		forged = append(forged, encodeStatus(&statusMsg{From: honest.Name(), Seq: 1 << 40 * seq, Epoch: 1,
			Status: EngineStatus{MetricsOK: true, Waiting: 777}}))
	}
	for seq := uint64(1); seq <= 300; seq++ {
		typ := msgResidencyDelta
		if seq == 1 {
			typ = msgResidencyFull
		}
		forged = append(forged, encodeResidency(typ, &residencyMsg{From: honest.Name(), Epoch: 1, Seq: seq,
			Added: []uint64{seq}, Count: seq, Digest: 0}))
	}
	for i := range 300 {
		forged = append(forged, encodeLearned(&learnedMsg{From: h.Routers[1].Name(), Records: []Learned{
			{Kind: LearnedPin, Model: "m", Target: EngineURL(0), Key: uint64(i), TTL: time.Minute}}}))
	}
	for i, msg := range forged {
		if i%2 == 1 {
			var ok bool
			if msg, ok = forger.sealFor(rt.Name(), msg); !ok { // authenticated, but as the forger
				t.Fatal("the forger shares no key with the router")
			}
		}
		deliver(msg)
	}
	unsigned := rejected(rt.core, rejectNoMAC) - before[rejectNoMAC]
	badSig := rejected(rt.core, rejectBadMAC) - before[rejectBadMAC]
	t.Logf("%d forged messages: %d refused without a MAC, %d refused with a MAC under another key", len(forged), unsigned, badSig)
	if int(unsigned+badSig) != len(forged) {
		var all [numRejectReasons]uint64
		for r := range all {
			all[r] = rejected(rt.core, r) - before[r]
		}
		t.Errorf("refused %d of %d forged messages as no_mac or bad_mac; by reason %v", unsigned+badSig, len(forged), all)
	}
	if q, _ := tg.Load(0); q != 4 || !viewMatches(rt, EngineURL(0), keys) {
		t.Errorf("the honest engine's view moved: load %d (want 4), residency matches %v", q, viewMatches(rt, EngineURL(0), keys))
	}
	forgedIn := 0
	for len(rt.Learned()) > 0 {
		if got := <-rt.Learned(); got.Key != probeKey { // a late repeat of the probe is honest
			forgedIn++
		}
	}
	if forgedIn != 0 {
		t.Errorf("%d forged learned records reached the router", forgedIn)
	}

	// Honest router-to-router traffic still arrives.
	h.Routers[1].Share(Learned{Kind: LearnedPin, Model: "m", Target: EngineURL(0), Key: 42, TTL: time.Minute})
	deadline := time.After(10 * time.Second)
	for {
		select {
		case got := <-rt.Learned():
			if got.Key == probeKey {
				continue
			}
			if got.Key != 42 || got.From != h.Routers[1].Name() {
				t.Errorf("received %+v", got)
			}
			return
		case <-deadline:
			t.Fatal("an honest signed learned record did not arrive")
		}
	}
}

// A certificate the CA did not sign is refused, and so is one for another
// name than the member it claims to be.
func TestIdentityRefusesForeignCertificates(t *testing.T) {
	h := newIdentityHarness(t, 1, 1)
	rt := h.Routers[0]
	other, err := NewTestCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.Issue(h.Sidecars[0].Name(), RoleSidecar, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	wrongName, err := h.CA.Issue("someone-else", RoleSidecar, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	before := rejected(rt.core, rejectBadCert)
	for _, id := range []*Identity{foreign, wrongName} {
		msg := encodeIdentity(&identityMsg{From: h.Sidecars[0].Name(), Chain: id.Chain})
		(*delegate)(rt.core).NotifyMsg(msg)
	}
	if got := rejected(rt.core, rejectBadCert) - before; got != 2 {
		t.Errorf("bad_certificate rose by %d, want 2", got)
	}
}

// A member without a certificate is not let into a pool whose members
// have identities: its engine never shows and its messages are refused.
func TestIdentityRefusesMembersWithoutCertificate(t *testing.T) {
	h := newIdentityHarness(t, 1, 0)
	rt := h.Routers[0]
	tr, err := NewLoopbackTransport(77)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := StartSidecar(t.Context(), Config{Name: "plain", Meta: Meta{EngineURL: EngineURL(5), Models: []string{"m"}},
		InsecureDev: true, Transport: tr, Timing: FastTiming}, []string{rt.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	plain.Publisher().SetStatus(EngineStatus{MetricsOK: true, Running: 9})
	testwait.For(t, 5*time.Second, "the member without a certificate refused and its statuses dropped", func() bool {
		return rejected(rt.core, rejectNoIdentity) > 0 && rejected(rt.core, rejectNoMAC) >= 2
	})
	if got := rt.View().Engines(""); len(got) != 0 {
		t.Errorf("engines listed: %+v", got)
	}
}

// A second process with a certificate for a live member's name (issued
// twice, or copied with another key) is refused at join, with a log line
// naming both addresses.
func TestIdentityBindsANameToOneCertificate(t *testing.T) {
	var logs syncBuffer
	h, err := NewHarness(t.Context(), HarnessConfig{Routers: 1, Sidecars: 1, Seed: 32, Identity: true,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	waitMembers(t, h)
	rt, honest := h.Routers[0], h.Sidecars[0]
	testwait.For(t, 5*time.Second, "the router verified the honest sidecar's certificate", func() bool {
		rt.mu.RLock()
		defer rt.mu.RUnlock()
		p, ok := rt.peers[honest.Name()]
		return ok && bytes.Equal(p.keyID, rt.members[honest.Name()].meta.keyID)
	})
	twinID, err := h.CA.Issue(honest.Name(), RoleSidecar, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewLoopbackTransport(78)
	if err != nil {
		t.Fatal(err)
	}
	twinPort := tr.inner.(*memberlist.NetTransport).GetAutoBindPort()
	twin, err := StartSidecar(t.Context(), Config{Meta: Meta{EngineURL: EngineURL(0)}, InsecureDev: true,
		Identity: twinID, Transport: tr, Timing: FastTiming}, []string{rt.Addr()})
	if err == nil {
		twin.Close()
		t.Fatal("a second holder of a live member's name joined")
	}
	if !errors.Is(err, ErrNameConflict) {
		t.Errorf("err = %v, want ErrNameConflict", err)
	}
	testwait.For(t, 5*time.Second, "the router refused the twin and logged both addresses", func() bool {
		out := logs.String()
		return rejected(rt.core, rejectNameTaken) > 0 && strings.Contains(out, "held_by="+honest.Addr()) &&
			strings.Contains(out, "refused=127.0.0.1:"+strconv.Itoa(twinPort))
	})
	if e := rt.View().lookup(EngineURL(0)); e == nil || e.owner != honest.Name() || !e.alive {
		t.Error("the honest sidecar no longer owns its engine")
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func benchIdentity(b *testing.B) *Identity {
	ca, err := NewTestCA(time.Now())
	if err != nil {
		b.Fatal(err)
	}
	id, err := ca.Issue("bench", RoleRouter, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	return id
}
