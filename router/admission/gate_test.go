package admission

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// pool is a fake pool whose headroom (the same for every band) and
// peers' standard waiters a test sets.
type pool struct{ headroom, peers atomic.Int64 }

func (p *pool) probe() Probe {
	h := int(p.headroom.Load())
	var pr Probe
	for b := range pr.Headroom {
		pr.Headroom[b] = h
	}
	pr.Peers[Standard] = int(p.peers.Load())
	return pr
}

type counts struct {
	mu    sync.Mutex
	out   map[Outcome]int
	depth [NumBands]int
}

func (c *counts) Left(b Band, o Outcome, _ time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.out == nil {
		c.out = map[Outcome]int{}
	}
	c.out[o]++
}

func (c *counts) Depth(b Band, n int) {
	c.mu.Lock()
	c.depth[b] = n
	c.mu.Unlock()
}

func (c *counts) get(o Outcome) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out[o]
}

func (c *counts) queued(b Band) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.depth[b]
}

type result struct {
	label string
	o     Outcome
}

// Below saturation requests pass at once, up to the headroom per tick: a
// burst arriving together does not all pass before the router's counts
// see any of it.
func TestGateAdmitsAtOnceBelowSaturation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &pool{}
		p.headroom.Store(3)
		c := &counts{}
		g := NewGate(testConfig(), p.probe, GateOptions{Observer: c})
		for i := range 3 {
			if o, w, _ := g.Admit(t.Context(), Standard, "k", 1); o != Admitted || w != 0 {
				t.Fatalf("request %d below saturation: %v after %v", i, o, w)
			}
		}
		start := time.Now()
		if o, w, _ := g.Admit(t.Context(), Standard, "k", 1); o != Admitted || w != DefaultTick || time.Since(start) != DefaultTick {
			t.Fatalf("a fourth in the same tick: %v after %v, want admitted at the next tick", o, w)
		}
		if c.get(Admitted) != 4 {
			t.Fatalf("admitted %d", c.get(Admitted))
		}
		synctest.Wait()
	})
}

func TestGateReleasesByBandWhenRoomFrees(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &pool{} // saturated
		c := &counts{}
		g := NewGate(testConfig(), p.probe, GateOptions{Observer: c})
		order := make(chan result, 8)
		send := func(label string, b Band) {
			go func() {
				o, _, _ := g.Admit(context.Background(), b, "k", 1)
				order <- result{label, o}
			}()
			synctest.Wait() // queued in this order
		}
		send("s1", Sheddable)
		send("s2", Sheddable)
		send("n1", Standard)
		send("c1", Critical)
		time.Sleep(time.Second)
		synctest.Wait()
		if c.queued(Sheddable) != 2 || c.queued(Critical) != 1 {
			t.Fatalf("queued sheddable %d critical %d, want 2 and 1", c.queued(Sheddable), c.queued(Critical))
		}
		select {
		case r := <-order:
			t.Fatalf("%s left a saturated pool: %v", r.label, r.o)
		default:
		}
		// One slot frees at a time: the release order is by band.
		want := []string{"c1", "n1", "s1", "s2"}
		for _, label := range want {
			p.headroom.Store(1)
			g.Kick()
			r := <-order
			p.headroom.Store(0)
			if r.label != label || r.o != Admitted {
				t.Fatalf("released %s (%v), want %s", r.label, r.o, label)
			}
			time.Sleep(DefaultTick) // the next update
		}
	})
}

func TestGateCancelLeavesQueueAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &pool{}
		c := &counts{}
		g := NewGate(testConfig(), p.probe, GateOptions{Observer: c})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan Outcome)
		go func() { o, _, _ := g.Admit(ctx, Standard, "k", 1); done <- o }()
		synctest.Wait()
		if g.Depth(Standard) != 1 {
			t.Fatalf("depth %d, want 1", g.Depth(Standard))
		}
		start := time.Now()
		cancel()
		if o := <-done; o != Cancelled {
			t.Fatalf("outcome %v, want cancelled", o)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("left after %v, want at once", d)
		}
		if g.Depth(Standard) != 0 || c.queued(Standard) != 0 || c.get(Cancelled) != 1 {
			t.Fatalf("depth %d / observed %d / cancelled %d", g.Depth(Standard), c.queued(Standard), c.get(Cancelled))
		}
		synctest.Wait()
	})
}

func TestGateExpiresAtTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig()
		cfg.Bands[Standard].TTL = 10 * time.Second
		p := &pool{}
		c := &counts{}
		g := NewGate(cfg, p.probe, GateOptions{Observer: c})
		start := time.Now()
		o, waited, _ := g.Admit(context.Background(), Standard, "k", 1)
		if o != Expired {
			t.Fatalf("outcome %v, want expired", o)
		}
		if d := time.Since(start); d != 10*time.Second || waited != d {
			t.Fatalf("expired after %v (waited %v), want 10s", d, waited)
		}
		if c.get(Expired) != 1 || g.Depth(Standard) != 0 {
			t.Fatalf("expired %d depth %d", c.get(Expired), g.Depth(Standard))
		}
	})
}

func TestGateRejectsWhenBandFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := testConfig()
		cfg.Bands[Sheddable].MaxQueue = 2
		p := &pool{}
		c := &counts{}
		g := NewGate(cfg, p.probe, GateOptions{Observer: c})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		for range 2 {
			go g.Admit(ctx, Sheddable, "k", 1)
		}
		synctest.Wait()
		if o, _, _ := g.Admit(ctx, Sheddable, "k", 1); o != RejectedFull {
			t.Fatalf("third sheddable: %v, want rejected_full", o)
		}
		// A critical request still queues.
		go g.Admit(ctx, Critical, "k", 1)
		synctest.Wait()
		if g.Depth(Critical) != 1 || c.get(RejectedFull) != 1 {
			t.Fatalf("critical depth %d, rejected %d", g.Depth(Critical), c.get(RejectedFull))
		}
		cancel()
		synctest.Wait()
	})
}

// When capacity frees, a router releases only its share of it: with as
// much work queued elsewhere as here, half the freed room.
func TestGateReleasesItsShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &pool{}
		c := &counts{}
		g := NewGate(testConfig(), p.probe, GateOptions{Observer: c})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		for range 10 {
			go g.Admit(ctx, Standard, "k", 1)
		}
		synctest.Wait()
		p.peers.Store(10)
		p.headroom.Store(6)
		g.Kick()
		synctest.Wait()
		if got := c.get(Admitted); got != 3 {
			t.Fatalf("released %d, want 3 (half of 6)", got)
		}
		// Within the same tick those releases count against the room the
		// (not yet updated) probe reports: a second look shares the 3 left
		// (7 of 17 queued here: 2), and a third the 1 left after that.
		g.Kick()
		synctest.Wait()
		if got := c.get(Admitted); got != 5 {
			t.Fatalf("released %d after a second kick in the same tick, want 5", got)
		}
		g.Kick()
		synctest.Wait()
		g.Kick()
		synctest.Wait()
		if got := c.get(Admitted); got != 6 {
			t.Fatalf("released %d within one tick, want the headroom, 6", got)
		}
		cancel()
		synctest.Wait()
	})
}
