package mesh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hashicorp/memberlist"
)

// HarnessConfig describes an in-process pool on loopback.
type HarnessConfig struct {
	Routers  int
	Sidecars int
	// Loss is the outbound packet loss of every node's transport.
	Loss float64
	Seed uint64
	// Key encrypts gossip; nil runs InsecureDev.
	Key []byte
	// Tune adjusts every memberlist config (default FastTune).
	Tune func(*memberlist.Config)
	// Configure adjusts every node's Config before it starts.
	Configure func(*Config)
	Logger    *slog.Logger
}

// Harness is a pool of routers and sidecars in one process, each on its own
// loopback port with a Metered transport.
type Harness struct {
	cfg        HarnessConfig
	Routers    []*Node
	Sidecars   []*Node
	Transports map[string]*Metered
	seq        uint64
}

// FastTune shortens memberlist's intervals so tests converge in about a
// second while keeping its failure-detection logic intact.
func FastTune(mc *memberlist.Config) {
	mc.ProbeInterval = 200 * time.Millisecond
	mc.ProbeTimeout = 100 * time.Millisecond
	mc.GossipInterval = 50 * time.Millisecond
	mc.PushPullInterval = 2 * time.Second
	mc.TCPTimeout = 2 * time.Second
	mc.GossipToTheDeadTime = 2 * time.Second
	mc.SuspicionMult = 4
}

// EngineURL is the engine URL the harness gives sidecar i.
func EngineURL(i int) string { return fmt.Sprintf("http://127.0.0.1:%d", 20000+i) }

// NewHarness starts the pool: routers first (each joining the first), then
// sidecars joining the first router.
func NewHarness(ctx context.Context, cfg HarnessConfig) (*Harness, error) {
	if cfg.Tune == nil {
		cfg.Tune = FastTune
	}
	h := &Harness{cfg: cfg, Transports: map[string]*Metered{}}
	for i := range cfg.Routers {
		if _, err := h.AddRouter(ctx, fmt.Sprintf("router-%d", i)); err != nil {
			h.Close()
			return nil, err
		}
	}
	for i := range cfg.Sidecars {
		if _, err := h.AddSidecar(ctx, fmt.Sprintf("sidecar-%d", i), EngineURL(i), "m"); err != nil {
			h.Close()
			return nil, err
		}
	}
	return h, nil
}

func (h *Harness) seed() []string {
	for _, n := range append(append([]*Node{}, h.Routers...), h.Sidecars...) {
		if !n.closed.Load() {
			return []string{n.Addr()}
		}
	}
	return nil
}

func (h *Harness) start(ctx context.Context, name string, meta Meta) (*Node, error) {
	h.seq++
	tr, err := NewLoopbackTransport(h.cfg.Seed + h.seq)
	if err != nil {
		return nil, err
	}
	tr.SetLoss(h.cfg.Loss)
	cfg := Config{Name: name, Meta: meta, Key: h.cfg.Key, InsecureDev: h.cfg.Key == nil,
		Transport: tr, Tune: h.cfg.Tune, Logger: h.cfg.Logger}
	if h.cfg.Configure != nil {
		h.cfg.Configure(&cfg)
	}
	n, err := Start(ctx, cfg, nil)
	if err != nil {
		tr.Shutdown()
		return nil, err
	}
	// A join is a TCP push/pull with the seed; on a loaded machine one can
	// time out, so the harness tries a few times before giving up.
	if seeds := h.seed(); len(seeds) > 0 {
		for attempt := 1; ; attempt++ {
			if err = n.Join(seeds); err == nil {
				break
			}
			if attempt == 5 || ctx.Err() != nil {
				n.Close()
				tr.Shutdown()
				return nil, err
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
			}
		}
	}
	h.Transports[name] = tr
	return n, nil
}

// AddRouter starts one more router and joins it to the pool.
func (h *Harness) AddRouter(ctx context.Context, name string) (*Node, error) {
	n, err := h.start(ctx, name, Meta{Role: RoleRouter, Build: "test"})
	if err != nil {
		return nil, err
	}
	h.Routers = append(h.Routers, n)
	return n, nil
}

// AddSidecar starts one more sidecar for the engine at url serving models.
func (h *Harness) AddSidecar(ctx context.Context, name, url string, models ...string) (*Node, error) {
	n, err := h.start(ctx, name, Meta{Role: RoleSidecar, EngineURL: url, Models: models, Build: "test"})
	if err != nil {
		return nil, err
	}
	h.Sidecars = append(h.Sidecars, n)
	return n, nil
}

// Close stops every node.
func (h *Harness) Close() error {
	var errs []error
	for _, n := range append(append([]*Node{}, h.Sidecars...), h.Routers...) {
		errs = append(errs, n.Close())
	}
	return errors.Join(errs...)
}
