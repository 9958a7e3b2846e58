package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rolter/rolter/adminapi"
	"github.com/rolter/rolter/cluster"
	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/router"
	"github.com/rolter/rolter/router/meshstate"
	"github.com/rolter/rolter/strategies"
)

// gossipFlags are the gossip-pool flags both `rolter router` and `rolter
// sidecar` take. --join and --insecure-dev are registered by each command
// (the router's --join also names Raft peers; its --insecure-dev also
// allows plaintext Raft).
type gossipFlags struct {
	addr      string
	advertise string
	keyFile   string
}

func (g *gossipFlags) register(fs *flag.FlagSet, def, help string) {
	fs.StringVar(&g.addr, "gossip", def, help)
	fs.StringVar(&g.advertise, "gossip-advertise", "", "HOST:PORT other members reach this node's gossip at (default: --gossip)")
	fs.StringVar(&g.keyFile, "gossip-key-file", "",
		"file holding the base64 gossip encryption key (default $"+mesh.KeyEnv+"; required unless --insecure-dev "+
			"or every gossip address is loopback)")
}

// errGossip marks unusable gossip flags.
var errGossip = errors.New("bad gossip flags")

// meshConfig resolves the flags into a mesh.Config for a node named name.
func (g *gossipFlags) meshConfig(name string, meta mesh.Meta, insecure bool, getenv func(string) string, log *slog.Logger) (mesh.Config, error) {
	cfg := mesh.Config{Name: name, Meta: meta, InsecureDev: insecure, Logger: log}
	host, port, err := splitHostPort(g.addr)
	if err != nil {
		return cfg, fmt.Errorf("%w: --gossip %q: %v", errGossip, g.addr, err)
	}
	cfg.BindAddr, cfg.BindPort = host, port
	if g.advertise != "" {
		if cfg.AdvertiseAddr, cfg.AdvertisePort, err = splitHostPort(g.advertise); err != nil {
			return cfg, fmt.Errorf("%w: --gossip-advertise %q: %v", errGossip, g.advertise, err)
		}
	}
	if cfg.Key, err = mesh.LoadKey(g.keyFile, getenv); err != nil {
		return cfg, fmt.Errorf("%w: %w", errGossip, err)
	}
	if len(cfg.Key) == 0 && !insecure {
		return cfg, fmt.Errorf("%w: %w", errGossip, mesh.ErrNoGossipKey)
	}
	return cfg, nil
}

func splitHostPort(s string) (string, int, error) {
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", p)
	}
	return host, port, nil
}

// parseSeeds parses a sidecar's --join: bare HOST:PORT gossip seeds.
func parseSeeds(s string) ([]string, error) {
	var out []string
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(part); err != nil {
			return nil, fmt.Errorf("%w: --join %q: want HOST:PORT: %v", errGossip, part, err)
		}
		out = append(out, part)
	}
	return out, nil
}

// startMesh starts the node and joins seeds. Seeds that are not up yet
// (a pool starting in any order) do not stop the node: it starts alone and
// keeps trying to join every joinRetry until one answers or ctx ends. A
// node id already taken in the pool is an error: at once when the seeds
// answer at start, else through stop when the late join reveals it.
func startMesh(ctx context.Context, cfg mesh.Config, seeds []string, log *slog.Logger, stop context.CancelCauseFunc) (*mesh.Node, error) {
	n, err := mesh.Start(ctx, cfg, seeds)
	if err == nil || len(seeds) == 0 || errors.Is(err, mesh.ErrNameConflict) {
		return n, err
	}
	log.Warn("gossip seeds not reachable yet; starting alone and retrying", "join", seeds, "err", err)
	if n, err = mesh.Start(ctx, cfg, nil); err != nil {
		return nil, err
	}
	go func() {
		t := time.NewTicker(joinRetry)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if n.NumMembers() > 1 {
				return // someone joined us
			}
			if err := n.Join(seeds); err == nil {
				if err := n.Conflict(); err != nil {
					stop(err)
					return
				}
				log.Info("joined the gossip pool", "join", seeds, "members", n.NumMembers())
				return
			}
		}
	}()
	return n, nil
}

const joinRetry = time.Second

// engineKey maps a provider's api_base to the engine URL sidecars announce:
// the /v1 suffix routes may carry is dropped, then mesh.NormalizeURL.
func engineKey(apiBase string) string {
	u := mesh.NormalizeURL(apiBase)
	return strings.TrimSuffix(u, "/v1")
}

// meshRouter connects one router's data plane to the gossip view: it is
// the router's EngineView (with PrefillView), SourceFactory and Learner.
// What routers share and how it becomes routing input is
// router/meshstate's (the code the fleet simulator runs too); this type
// maps api_bases to engine keys and carries meshstate over the view
// (viewTransport).
type meshRouter struct {
	view  *mesh.View
	keys  sync.Map // api_base → engine key (engineKey allocates; Load must not)
	state *meshstate.State
}

func newMeshRouter(view *mesh.View, now func() time.Time) *meshRouter {
	m := &meshRouter{view: view}
	m.state = meshstate.New(viewTransport{view: view, now: now}, now, meshstate.Options{EngineKey: m.key})
	return m
}

func (m *meshRouter) key(apiBase string) string {
	if k, ok := m.keys.Load(apiBase); ok {
		return k.(string)
	}
	k := engineKey(apiBase)
	m.keys.Store(apiBase, k)
	return k
}

// Load implements router.EngineView.
func (m *meshRouter) Load(apiBase string) (uint64, bool) { return m.state.Load(apiBase) }

// PeerPrefill implements router.PrefillView.
func (m *meshRouter) PeerPrefill(apiBase string) uint64 { return m.state.PeerPrefill(apiBase) }

// Reported implements router.EngineReporter: a live sidecar reports the
// engine, so it wins over the router's own [metrics_scrape].
func (m *meshRouter) Reported(apiBase string) bool { return m.view.Reported(m.key(apiBase)) }

// Sources implements router.SourceFactory over the view's Targets.
func (m *meshRouter) Sources(apiBases []string) (strategies.Residency, strategies.CacheSignal, strategies.AdapterResidency) {
	urls := make([]string, len(apiBases))
	for i, b := range apiBases {
		urls[i] = m.key(b)
	}
	t := m.view.Targets(urls)
	return t, t, t
}

// Recall implements router.Learner.
func (m *meshRouter) Recall(pool string, lb strategies.LoadBalancer, apiBases []string, rc *strategies.RouteContext) {
	m.state.Recall(pool, lb, apiBases, rc)
}

// Observed implements router.Learner.
func (m *meshRouter) Observed(pool, apiBase string, rc *strategies.RouteContext) {
	m.state.Observed(pool, apiBase, rc)
}

// publish runs meshstate's publish loop over the router's per-api_base
// loads until ctx ends.
func (m *meshRouter) publish(ctx context.Context, loads func() map[string]router.BaseLoad) {
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
		}
		slices.SortFunc(out, func(a, b meshstate.EngineLoad) int { return strings.Compare(a.Engine, b.Engine) })
		return out
	})
}

// follow files every record other routers share until ctx ends.
func (m *meshRouter) follow(ctx context.Context) {
	in := m.view.Learned()
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

// viewTransport is meshstate.Transport over cluster/mesh's View.
type viewTransport struct {
	view *mesh.View
	now  func() time.Time
}

var _ meshstate.Transport = viewTransport{}

// Share implements meshstate.Transport.
func (t viewTransport) Share(r meshstate.Record) {
	t.view.Share(mesh.Learned{Kind: mesh.LearnedKind(r.Kind), Model: r.Pool, Target: r.Target, Key: r.Key, TTL: r.TTL})
}

// Publish implements meshstate.Transport.
func (t viewTransport) Publish(loads []meshstate.EngineLoad) {
	m := make(map[string]mesh.Load, len(loads))
	for _, l := range loads {
		m[l.Engine] = mesh.Load{Inflight: l.Inflight, Prefill: l.Prefill}
	}
	t.view.PublishLoads(m)
}

// Engine implements meshstate.Transport.
func (t viewTransport) Engine(key string) (meshstate.Remote, bool) {
	r, ok := t.view.Remote(key)
	if !ok {
		return meshstate.Remote{}, false
	}
	out := meshstate.Remote{Queue: r.Queue, QueueOK: r.QueueOK, Inflight: r.Inflight, Prefill: r.Prefill, PeersOK: r.PeersOK}
	if r.PeersOK && !r.Updated.IsZero() {
		out.Age = t.now().Sub(r.Updated)
	}
	return out, true
}

// discover returns cfg with every `discover = true` route's targets filled
// from the engines gossip announces for the route's model: one target per
// live engine, through the provider whose api_base is that engine when one
// exists, else through a provider synthesized for it (named after the
// sidecar's node id, or the engine URL when that name is taken). cfg itself
// is not modified.
func discover(cfg *config.Config, engines func(model string) []mesh.EngineInfo) *config.Config {
	any := false
	for _, r := range cfg.Routes {
		any = any || r.Discover
	}
	if !any {
		return cfg
	}
	out := *cfg
	out.Providers = slices.Clone(cfg.Providers)
	out.Routes = slices.Clone(cfg.Routes)
	byKey := map[string]string{} // engine key → provider name
	names := map[string]bool{}
	for _, p := range out.Providers {
		names[p.Name] = true
		if _, ok := byKey[engineKey(p.APIBase)]; !ok {
			byKey[engineKey(p.APIBase)] = p.Name
		}
	}
	for i, r := range out.Routes {
		if !r.Discover {
			continue
		}
		targets := slices.Clone(r.Targets)
		for _, e := range engines(r.Model) {
			key := engineKey(e.EngineURL)
			name, ok := byKey[key]
			if !ok {
				name = e.NodeID
				if name == "" || names[name] {
					name = key
				}
				out.Providers = append(out.Providers, config.Provider{Name: name, APIBase: e.EngineURL})
				names[name], byKey[key] = true, name
			}
			if !slices.ContainsFunc(targets, func(t config.Target) bool { return t.Provider == name && t.Model == r.Model }) {
				targets = append(targets, config.Target{Provider: name, Model: r.Model, Weight: 1})
			}
		}
		out.Routes[i].Targets = targets
	}
	return &out
}

// rediscover re-applies the replicated config whenever the set of live
// engines (or their models) changes, so discover routes follow the pool.
func (cp *controlPlane) rediscover(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-cp.mesh.view.Changed():
		}
		// Rebuilding the snapshot resets the balancers' local state
		// (cache_aware's prefix index among it): only when a discover
		// route's targets change.
		cp.mu.Lock()
		base, applied := cp.base, cp.discovered
		cp.mu.Unlock()
		st := cp.store.State()
		if !st.Seeded || st.ConfigVersion == 0 {
			continue
		}
		if discoveredKey(discover(st.Config(base), cp.mesh.view.Engines)) != applied {
			cp.reapply()
		}
	}
}

// discoveredKey fingerprints the targets of cfg's discover routes.
func discoveredKey(cfg *config.Config) string {
	var b strings.Builder
	for _, r := range cfg.Routes {
		if !r.Discover {
			continue
		}
		b.WriteString(r.Model)
		for _, t := range r.Targets {
			b.WriteString("\x00")
			b.WriteString(t.Provider)
			for _, p := range cfg.Providers {
				if p.Name == t.Provider {
					b.WriteString("=" + p.APIBase)
				}
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// meshInventory is adminapi's Inventory and EngineInventory, the Raft
// store's PeerSource and the telemetry pusher's Endpoints over the gossip
// view. Routers that left or died stay listed as not alive (the Raft
// leader removes them after its grace) until forget after they went.
type meshInventory struct {
	view   *mesh.View
	self   string
	static cluster.StaticPeers // --join id=host:port, kept as given
	admin  []string            // --peer-admin, kept as given
	now    func() time.Time
	// adminScheme is how the pool's routers serve their admin ports:
	// "https" when this one has --admin-tls-cert ("" means "http").
	adminScheme string

	mu   sync.Mutex
	seen map[string]seenRouter
}

type seenRouter struct {
	info    mesh.RouterInfo
	goneAt  time.Time // zero while in the pool
	present bool
}

// forgetAfter is how long a router gone from the pool is still reported.
const forgetAfter = 24 * time.Hour

func newMeshInventory(view *mesh.View, self string, static cluster.StaticPeers, admin []string) *meshInventory {
	return &meshInventory{view: view, self: self, static: static, admin: admin, now: time.Now, seen: map[string]seenRouter{}}
}

// routers returns every router gossip knows or knew, this one excluded,
// sorted by node id, and whether each is in the pool now.
func (m *meshInventory) routers() []seenRouter {
	snap := m.view.Snapshot()
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, r := range m.seen {
		r.present = false
		m.seen[id] = r
	}
	for _, r := range snap.Routers {
		if r.NodeID == m.self || r.NodeID == "" {
			continue
		}
		m.seen[r.NodeID] = seenRouter{info: r, present: true}
	}
	out := make([]seenRouter, 0, len(m.seen))
	for id, r := range m.seen {
		if !r.present {
			if r.goneAt.IsZero() {
				r.goneAt = now
				m.seen[id] = r
			} else if now.Sub(r.goneAt) > forgetAfter {
				delete(m.seen, id)
				continue
			}
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b seenRouter) int { return strings.Compare(a.info.NodeID, b.info.NodeID) })
	return out
}

// hostFrom fills an unspecified host in addr (0.0.0.0, ::, empty) with the
// host of the member's gossip address.
func hostFrom(addr, gossip string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		if gh, _, err := net.SplitHostPort(gossip); err == nil {
			return net.JoinHostPort(gh, port)
		}
	}
	return addr
}

// RaftPeers implements cluster.PeerSource: the static --join peers, and
// every router announcing a Raft address in the pool (alive) or gone from
// it (not alive).
func (m *meshInventory) RaftPeers() []cluster.Peer {
	out := slices.Clone(m.static)
	for _, r := range m.routers() {
		if r.info.RaftAddr == "" || slices.ContainsFunc(m.static, func(p cluster.Peer) bool { return p.ID == r.info.NodeID }) {
			continue
		}
		out = append(out, cluster.Peer{ID: r.info.NodeID, Addr: hostFrom(r.info.RaftAddr, r.info.Address), Alive: r.present})
	}
	return out
}

// TelemetryEndpoints implements adminapi.Endpoints: --peer-admin and the
// admin addresses the routers in the pool announce.
func (m *meshInventory) TelemetryEndpoints() []string {
	out := slices.Clone(m.admin)
	for _, r := range m.routers() {
		if !r.present || r.info.AdminAddr == "" {
			continue
		}
		u := m.scheme() + "://" + hostFrom(r.info.AdminAddr, r.info.Address)
		if !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out
}

// Routers implements adminapi.Inventory.
func (m *meshInventory) Routers() []adminapi.RouterInfo {
	out := []adminapi.RouterInfo{{NodeID: m.self, Alive: true}}
	for _, r := range m.routers() {
		ri := adminapi.RouterInfo{NodeID: r.info.NodeID, Alive: r.present, ConfigVersion: r.info.ConfigVersion, Build: r.info.Build}
		if r.info.AdminAddr != "" {
			ri.AdminAddr = hostFrom(r.info.AdminAddr, r.info.Address)
		}
		out = append(out, ri)
	}
	return out
}

// Engines implements adminapi.EngineInventory.
func (m *meshInventory) Engines() []mesh.EngineSnapshot {
	return adminapi.MeshEngines{View: m.view}.Engines()
}
