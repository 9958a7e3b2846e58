package routerd

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/router"
	"github.com/rolter/rolter/router/meshstate"
	"github.com/rolter/rolter/strategies"
)

// The mesh hooks: what router's request path calls through the
// interfaces router/mesh.go declares (EngineView, PrefillView,
// MeshRank, EngineReporter, SourceFactory, Learner) when the router is in a gossip
// pool.

var (
	_ router.EngineView     = (*meshHooks)(nil)
	_ router.PrefillView    = (*meshHooks)(nil)
	_ router.MeshRank       = (*meshHooks)(nil)
	_ router.EngineReporter = (*meshHooks)(nil)
	_ router.SourceFactory  = (*meshHooks)(nil)
	_ router.Learner        = (*meshHooks)(nil)
	_ router.PickHold       = (*meshHooks)(nil)
	_ router.WaitingView    = (*meshHooks)(nil)
)

// meshHooks connects one router's data plane to the gossip view: it is
// the router's EngineView (with PrefillView), SourceFactory and Learner.
// What routers share and how it becomes routing input is
// router/meshstate's (the code the fleet simulator runs too); this type
// maps api_bases to engine keys and carries meshstate over the view
// (viewTransport).
type meshHooks struct {
	now   func() time.Time
	node  *mesh.Router
	view  *mesh.View
	keys  sync.Map // api_base → engine key (engineKey allocates; Load must not)
	state *meshstate.State
}

func newMeshHooks(node *mesh.Router, now func() time.Time) *meshHooks {
	m := &meshHooks{now: now, node: node, view: node.View()}
	m.state = meshstate.New(viewTransport{node: node, now: now}, now, meshstate.Options{EngineKey: m.key})
	return m
}

func (m *meshHooks) key(apiBase string) string {
	if k, ok := m.keys.Load(apiBase); ok {
		return k.(string)
	}
	k := engineKey(apiBase)
	m.keys.Store(apiBase, k)
	return k
}

// Load implements router.EngineView.
func (m *meshHooks) Load(apiBase string) (uint64, bool) { return m.state.Load(apiBase) }

// PeerInflight implements router.InflightView.
func (m *meshHooks) PeerInflight(apiBase string) uint64 { return m.state.PeerInflight(apiBase) }

// PeerPrefill implements router.PrefillView.
func (m *meshHooks) PeerPrefill(apiBase string) uint64 { return m.state.PeerPrefill(apiBase) }

// PoolWaiting implements router.WaitingView.
func (m *meshHooks) PoolWaiting(apiBases []string) [3]uint64 { return m.state.PoolWaiting(apiBases) }

// Routers implements router.MeshRank.
func (m *meshHooks) Routers() (live, rank int) { return m.state.Routers() }

// EngineStatus implements router.StatusView (admission's waiting and KV
// signals).
func (m *meshHooks) EngineStatus(apiBase string) (uint64, float64, bool) {
	return m.view.Status(m.key(apiBase))
}

// Reported implements router.EngineReporter: a live sidecar reports the
// engine, so it wins over the router's own [metrics_scrape].
func (m *meshHooks) Reported(apiBase string) bool { return m.view.Reported(m.key(apiBase)) }

// Sources implements router.SourceFactory over the view's Targets.
func (m *meshHooks) Sources(apiBases []string) (strategies.Residency, strategies.CacheSignal, strategies.AdapterResidency) {
	urls := make([]string, len(apiBases))
	for i, b := range apiBases {
		urls[i] = m.key(b)
	}
	t := m.view.Targets(urls)
	return t, t, t
}

// Recall implements router.Learner.
func (m *meshHooks) Recall(pool string, lb strategies.LoadBalancer, apiBases []string, rc *strategies.RouteContext) {
	m.state.Recall(pool, lb, apiBases, rc)
}

// Observed implements router.Learner: it also marks the pick for
// meshstate's hold (Wait).
func (m *meshHooks) Observed(pool, apiBase string, rc *strategies.RouteContext) {
	m.state.Picked(m.now())
	m.state.Observed(pool, apiBase, rc)
}

// Wait implements router.PickHold.
func (m *meshHooks) Wait(ctx context.Context) error { return m.state.Wait(ctx) }

// publish runs meshstate's publish loop over the router's per-api_base
// loads until ctx ends, woken by changes.
func (m *meshHooks) publish(ctx context.Context, loads func() map[string]router.BaseLoad, changes <-chan struct{}) {
	var out []meshstate.EngineLoad
	m.state.Run(ctx, func() []meshstate.EngineLoad {
		out = out[:0]
		for base, l := range loads() {
			k := m.key(base)
			i := slices.IndexFunc(out, func(e meshstate.EngineLoad) bool { return e.Engine == k })
			if i < 0 {
				out = append(out, meshstate.EngineLoad{Engine: k})
				i = len(out) - 1
			}
			out[i].Inflight += l.Inflight
			out[i].Prefill += l.Prefill
			for b, n := range l.Waiting {
				out[i].Waiting[b] += n
			}
		}
		slices.SortFunc(out, func(a, b meshstate.EngineLoad) int { return strings.Compare(a.Engine, b.Engine) })
		return out
	}, changes)
}

// follow files every record other routers share until ctx ends.
func (m *meshHooks) follow(ctx context.Context) {
	in := m.node.Learned()
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-in:
			m.state.File(meshstate.Record{Kind: meshstate.Kind(r.Kind), Pool: r.Model, Target: engineKey(r.Target),
				Key: r.Key, TTL: r.TTL})
		}
	}
}

// viewTransport is meshstate.Transport over cluster/mesh's router member.
type viewTransport struct {
	node *mesh.Router
	now  func() time.Time
}

var (
	_ meshstate.Transport       = viewTransport{}
	_ meshstate.Intents         = viewTransport{}
	_ meshstate.IntentsReceived = viewTransport{}
	_ meshstate.PeerDelay       = viewTransport{}
)

// Share implements meshstate.Transport.
func (t viewTransport) Share(r meshstate.Record) {
	t.node.Share(mesh.Learned{Kind: mesh.LearnedKind(r.Kind), Model: r.Pool, Target: r.Target, Key: r.Key, TTL: r.TTL})
}

// Publish implements meshstate.Transport.
func (t viewTransport) Publish(loads []meshstate.EngineLoad, changed time.Time) {
	m := make(map[string]mesh.Load, len(loads))
	for _, l := range loads {
		m[l.Engine] = mesh.Load{Inflight: l.Inflight, Prefill: l.Prefill, Waiting: l.Waiting}
	}
	t.node.PublishLoads(m, changed)
}

// PeerPublished implements meshstate.PeerNews.
func (t viewTransport) PeerPublished() time.Time { return t.node.PeerPublished() }

// PeerNews implements meshstate.PeerNews.
func (t viewTransport) PeerNews() <-chan struct{} { return t.node.PeerNews() }

// Intend implements meshstate.Intents: the intent goes to the other
// routers at once (cluster/mesh's Router.Intend).
func (t viewTransport) Intend(rank int, at time.Time) { t.node.Intend(rank, at) }

// Resolve implements meshstate.Intents.
func (t viewTransport) Resolve() { t.node.ResolveIntent() }

// PeerPicks implements meshstate.Intents.
func (t viewTransport) PeerPicks(buf []meshstate.PeerPick) []meshstate.PeerPick {
	var in [16]mesh.PeerIntent
	for _, p := range t.node.PeerIntents(in[:0]) {
		buf = append(buf, meshstate.PeerPick{Rank: p.Rank, Intent: p.Intent, Pending: p.Pending})
	}
	return buf
}

// PeerDelay implements meshstate.PeerDelay.
func (t viewTransport) PeerDelay() time.Duration { return t.node.PeerDelay() }

// IntentsReceived implements meshstate.IntentsReceived.
func (t viewTransport) IntentsReceived() uint64 { return t.node.IntentsReceived() }

// Routers implements meshstate.Inventory: the router members gossip
// knows, this one included, ranked by node id (the node's name is its
// node id).
func (t viewTransport) Routers() (live, rank int) {
	snap := t.node.Snapshot()
	rank = slices.IndexFunc(snap.Routers, func(r mesh.RouterInfo) bool { return r.NodeID == snap.Self })
	if rank < 0 {
		return len(snap.Routers) + 1, 0
	}
	return len(snap.Routers), rank
}

// Engine implements meshstate.Transport.
func (t viewTransport) Engine(key string) (meshstate.Remote, bool) {
	r, ok := t.node.View().Remote(key)
	if !ok {
		return meshstate.Remote{}, false
	}
	return meshstate.Remote{Queue: r.Queue, QueueOK: r.QueueOK, Inflight: r.Inflight, Prefill: r.Prefill, Waiting: r.Waiting,
		PeersOK: r.PeersOK}, true
}
