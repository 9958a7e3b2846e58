package mesh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
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
	// Timing is every member's membership timing (nil: FastTiming; a
	// zero Timing keeps memberlist's LAN defaults).
	Timing *Timing
	// Identity gives every member a certificate from the harness's CA.
	Identity bool
	// Configure adjusts every node's Config before it starts.
	Configure func(*Config)
	Logger    *slog.Logger
}

// Harness is a pool of routers and sidecars in one process, each on its own
// loopback port with a Metered transport.
type Harness struct {
	cfg        HarnessConfig
	Routers    []*Router
	Sidecars   []*Sidecar
	Transports map[string]*Metered
	// CA issued the members' identities (nil without HarnessConfig.Identity).
	CA  *TestCA
	seq uint64
}

// EngineURL is the engine URL the harness gives sidecar i.
func EngineURL(i int) string { return fmt.Sprintf("http://127.0.0.1:%d", 20000+i) }

// NewHarness starts the pool: routers first (each joining the first), then
// sidecars joining the first router.
func NewHarness(ctx context.Context, cfg HarnessConfig) (*Harness, error) {
	if cfg.Timing == nil {
		cfg.Timing = &FastTiming
	}
	h := &Harness{cfg: cfg, Transports: map[string]*Metered{}}
	if cfg.Identity {
		var err error
		if h.CA, err = NewTestCA(time.Now()); err != nil {
			return nil, err
		}
	}
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

// members returns every member's core, routers first.
func (h *Harness) members() []*core {
	var out []*core
	for _, r := range h.Routers {
		out = append(out, r.core)
	}
	for _, s := range h.Sidecars {
		out = append(out, s.core)
	}
	return out
}

func (h *Harness) seed() []string {
	for _, c := range h.members() {
		if !c.closed.Load() {
			return []string{c.Addr()}
		}
	}
	return nil
}

// start starts a member with startRole and joins it to the pool.
func start[M interface {
	Join([]string) error
	Close() error
}](ctx context.Context, h *Harness, name string, role Role, meta Meta, startRole func(context.Context, Config, []string) (M, error)) (M, error) {
	var zero M
	h.seq++
	tr, err := NewLoopbackTransport(h.cfg.Seed + h.seq)
	if err != nil {
		return zero, err
	}
	tr.SetLoss(h.cfg.Loss)
	cfg := Config{Name: name, Meta: meta, Key: h.cfg.Key, InsecureDev: h.cfg.Key == nil,
		Transport: tr, Timing: *h.cfg.Timing, Logger: h.cfg.Logger}
	if h.CA != nil {
		if cfg.Identity, err = h.CA.Issue(name, role, time.Now()); err != nil {
			tr.Shutdown()
			return zero, err
		}
	}
	if h.cfg.Configure != nil {
		h.cfg.Configure(&cfg)
	}
	n, err := startRole(ctx, cfg, nil)
	if err != nil {
		tr.Shutdown()
		return zero, err
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
				return zero, err
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
func (h *Harness) AddRouter(ctx context.Context, name string) (*Router, error) {
	n, err := start(ctx, h, name, RoleRouter, Meta{Build: "test"}, StartRouter)
	if err != nil {
		return nil, err
	}
	h.Routers = append(h.Routers, n)
	return n, nil
}

// AddSidecar starts one more sidecar for the engine at url serving models.
func (h *Harness) AddSidecar(ctx context.Context, name, url string, models ...string) (*Sidecar, error) {
	n, err := start(ctx, h, name, RoleSidecar, Meta{EngineURL: url, Models: models, Build: "test"}, StartSidecar)
	if err != nil {
		return nil, err
	}
	h.Sidecars = append(h.Sidecars, n)
	return n, nil
}

// Close stops every node.
func (h *Harness) Close() error {
	var errs []error
	for _, s := range h.Sidecars {
		errs = append(errs, s.Close())
	}
	for _, r := range h.Routers {
		errs = append(errs, r.Close())
	}
	return errors.Join(errs...)
}

// Member is what every pool member, sidecar or router, answers.
type Member interface {
	Name() string
	Addr() string
	NumMembers() int
	Stats() *Stats
}

var (
	_ Member = (*Sidecar)(nil)
	_ Member = (*Router)(nil)
)

// Members returns every member of the harness, routers first.
func (h *Harness) Members() []Member {
	var out []Member
	for _, r := range h.Routers {
		out = append(out, r)
	}
	for _, s := range h.Sidecars {
		out = append(out, s)
	}
	return out
}
