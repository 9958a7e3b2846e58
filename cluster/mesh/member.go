package mesh

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// Sidecar is a sidecar's member of the pool: it publishes one engine's
// residency and status to every router and answers their resync requests.
// Start it with StartSidecar; stop it with Leave or Close.
type Sidecar struct {
	*core
	pub *Publisher
}

// StartSidecar starts a sidecar member and joins the pool through join
// (host:port list; empty starts a new pool). cfg.Sidecar tunes its
// publisher; Meta.EngineURL names its engine.
func StartSidecar(ctx context.Context, cfg Config, join []string) (*Sidecar, error) {
	c, err := newCore(cfg, RoleSidecar)
	if err != nil {
		return nil, err
	}
	s := &Sidecar{core: c, pub: newPublisher(c, cfg.Sidecar)}
	c.hooks = roleHooks{
		handle: func(typ byte, body []byte) (bool, error) {
			if typ != msgResync {
				return false, nil
			}
			return true, s.pub.handleResync(body)
		},
		up: func(name string, meta Meta, joined bool) {
			if joined && meta.Role == RoleRouter {
				s.pub.routerJoined(name)
			}
		},
		loops: []func(context.Context){s.pub.run},
	}
	if err := c.start(ctx, join); err != nil {
		return nil, err
	}
	return s, nil
}

// Publisher returns the member's outbound side.
func (s *Sidecar) Publisher() *Publisher { return s.pub }

// Collector exports the member's counters as Prometheus metrics; register
// it on the process's own registry.
func (s *Sidecar) Collector() prometheus.Collector { return &collector{c: s.core} }

// Router is a router's member of the pool: it holds the cluster View built
// from the sidecars' summaries and exchanges loads and learned records with
// the other routers. Start it with StartRouter; stop it with Leave or Close.
type Router struct {
	*core
	view  *View
	share *routerShare
}

// StartRouter starts a router member and joins the pool through join
// (host:port list; empty starts a new pool). cfg.Router tunes its view.
func StartRouter(ctx context.Context, cfg Config, join []string) (*Router, error) {
	c, err := newCore(cfg, RoleRouter)
	if err != nil {
		return nil, err
	}
	r := &Router{core: c}
	r.view = newView(c, cfg.Router)
	r.share = newRouterShare(c, r.view, cfg.Router)
	c.hooks = roleHooks{
		handle: func(typ byte, body []byte) (bool, error) {
			switch typ {
			case msgResidencyDelta, msgResidencyFull, msgEngineStatus:
				return true, r.view.handle(typ, body)
			case msgInflight, msgLearned:
				return true, r.share.handle(typ, body)
			}
			return false, nil
		},
		up:    func(name string, meta Meta, _ bool) { r.view.memberUp(name, meta) },
		gone:  r.view.memberGone,
		loops: []func(context.Context){r.view.run, r.share.run},
	}
	if err := c.start(ctx, join); err != nil {
		return nil, err
	}
	return r, nil
}

// View returns the router's cluster view: what strategies and discovery
// read.
func (r *Router) View() *View { return r.view }

// Collector exports the member's counters and its view's engine states as
// Prometheus metrics; register it on the process's own registry.
func (r *Router) Collector() prometheus.Collector {
	return &collector{c: r.core, view: r.view, age: r.share.age}
}
