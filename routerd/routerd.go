package routerd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/rolter/rolter/adminapi"
	"github.com/rolter/rolter/certs"
	"github.com/rolter/rolter/cluster"
	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/dashboard"
	"github.com/rolter/rolter/internal/cli"
	"github.com/rolter/rolter/router"
	"github.com/rolter/rolter/router/meshstate"
	"github.com/rolter/rolter/scrape"
)

// Router is one running `rolter router` process: open it with Open,
// serve with Run.
type Router struct {
	log    *slog.Logger
	srv    *router.Server
	poller *scrape.Poller // [metrics_scrape], [providers.lmcache]: engines no sidecar reports
	// api is the API's TCP listener; Serve puts the departure watch and
	// then TLS (wrapAPI) on it. admin is TLS-wrapped already.
	api, admin net.Listener
	tls        TLS
	raftCerts  *certs.Source // nil: plaintext Raft
	banner     string

	closeOnce sync.Once
	closers   []func() // run in reverse by Close

	// Standalone.
	standalone bool
	reloadMu   sync.Mutex
	running    *config.Config // the applied file
	path       string         // Config.ConfigPath

	// In a cluster.
	stopped  context.Context // cancelled with mesh.ErrNameConflict by a late join
	store    *cluster.Store
	files    *cluster.FileSyncer
	follow   *follower
	adminAPI *adminapi.API
	pusher   *adminapi.Pusher
	hooks    *meshHooks   // nil without gossip
	node     *mesh.Router // nil without gossip
	// gossipCerts reloads the gossip identity into node (nil without one).
	gossipCerts *certs.Source
}

// Open checks cfg, listens on its addresses and opens what the router
// runs on: standalone the data plane from cfg.File, else this router's
// gossip member, its Raft replica and the data plane that follows it.
// Unusable settings are cli.ErrUsage errors. Run serves; Close releases what
// Open took when Run is not called.
func Open(ctx context.Context, cfg Config) (*Router, error) {
	if cfg.Standalone {
		return openStandalone(ctx, cfg)
	}
	r := &Router{log: cfg.logger(), tls: cfg.TLS}
	if err := r.openCluster(ctx, cfg); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

func (r *Router) onClose(f func()) { r.closers = append(r.closers, f) }

// Close releases what Open took: the listeners, the gossip membership
// (leaving the pool) and the tracer (flushing the last spans). Run calls
// it on return; calling it again does nothing.
func (r *Router) Close() {
	r.closeOnce.Do(func() {
		for i := len(r.closers) - 1; i >= 0; i-- {
			r.closers[i]()
		}
	})
}

// Banner is the line `rolter router` prints once it listens.
func (r *Router) Banner() string { return r.banner }

// RaftCerts is Raft's mutual-TLS material (nil: plaintext Raft or
// standalone); the command reloads it with the listeners' on SIGHUP and
// when its files change.
func (r *Router) RaftCerts() *certs.Source { return r.raftCerts }

// GossipCerts is the gossip identity's certificate, key and CA (nil
// without --gossip-tls-cert); reloading it renews the member's identity in
// the pool. The command reloads it with the listeners'.
func (r *Router) GossipCerts() *certs.Source { return r.gossipCerts }

// listen opens the API and admin listeners; the admin one TLS-wrapped,
// the API one bare (Serve wraps it, wrapAPI).
func (r *Router) listen(cfg Config) error {
	api, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	r.onClose(func() { api.Close() })
	admin, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		return fmt.Errorf("--admin: %w", err)
	}
	r.onClose(func() { admin.Close() })
	r.api, r.admin = api, wrap(admin, cfg.TLS.Admin)
	return nil
}

func (r *Router) openCluster(ctx context.Context, cfg Config) error {
	log := r.log
	sc, raftCerts, err := cfg.storeAndCerts(cfg.getenv, log)
	if err != nil {
		return cli.Usage(err)
	}
	r.raftCerts = raftCerts
	peerAdmin, err := parsePeerAdmin(cfg.PeerAdmin)
	if err != nil {
		return cli.Usage(err)
	}
	peerAdmin = tlsPeers(peerAdmin, cfg.TLS.Admin)
	peerClient, err := cfg.TLS.peerClient(peerCA(cfg.RaftCA, cfg.TLS.AdminClientCA))
	if err != nil {
		return cli.Usage(err)
	}
	sc.Logger = log // the store adds node_id itself
	if err := r.listen(cfg); err != nil {
		return err
	}
	stopped, stop := context.WithCancelCause(ctx) // stopped by a node id conflict found late
	r.stopped = stopped
	r.onClose(func() { stop(nil) })
	var inv *meshInventory
	if cfg.Gossip.Bind != "" {
		join, _ := parseJoin(cfg.Join) // storeConfig checked it
		raftAddr := sc.Advertise
		if raftAddr == "" {
			raftAddr = sc.RaftAddr
		}
		meta := mesh.Meta{NodeID: sc.NodeID, Build: cfg.Build, RaftAddr: raftAddr, AdminAddr: r.admin.Addr().String()}
		mcfg, err := cfg.Gossip.Config(sc.NodeID, meta, sc.InsecureDev, cfg.getenv, log)
		if err != nil {
			return cli.Usage(err)
		}
		mcfg.Router.LearnedInterval = meshstate.LearnedGap
		if r.node, err = mesh.StartJoining(stopped, mesh.StartRouter, mcfg, join.seeds, log, stop); errors.Is(err, mesh.ErrIdentity) {
			return cli.Usage(err) // a --gossip-tls-cert for another role
		} else if err != nil {
			return err
		}
		node := r.node
		if mcfg.Identity != nil {
			if r.gossipCerts, err = certs.Load(certs.Files{Cert: cfg.Gossip.CertFile, Key: cfg.Gossip.CertKeyFile, ClientCA: cfg.Gossip.CAFile}); err != nil {
				return cli.Usage(err)
			}
			r.gossipCerts.OnReload(node.ApplyIdentity)
		}
		r.onClose(func() {
			if err := node.Leave(2 * time.Second); err != nil {
				log.Warn("leaving the gossip pool", "err", err)
			}
		})
		inv = newMeshInventory(node, sc.NodeID, join.raft, peerAdmin)
		inv.adminScheme = Scheme(cfg.TLS.Admin)
		sc.Peers = inv
	}
	log.Info("opening the raft store", "node_id", sc.NodeID, "raft", sc.RaftAddr, "data_dir", sc.DataDir, "bootstrap_expect", sc.BootstrapExpect)
	tp, stopTracing, err := startTracing(stopped, cfg.File.Tracing, sc.NodeID, log)
	if err != nil {
		return err
	}
	r.onClose(stopTracing)
	if err := r.openControlPlane(stopped, sc, cfg.File, peerAdmin, inv, tp); err != nil {
		return err
	}
	if peerClient != nil {
		r.pusher.Client = peerClient
	}
	// Every router reports its build and a dialable admin address over the
	// telemetry channel, so the Mesh page has both for each row.
	advertise := sc.Advertise
	if advertise == "" {
		advertise = sc.RaftAddr
	}
	r.pusher.Build, r.pusher.AdminAddr = cfg.Build, hostFrom(r.admin.Addr().String(), advertise)
	gossip := "off"
	if r.node != nil {
		gossip = r.node.Addr()
	}
	r.banner = fmt.Sprintf("rolter router %s: API on %s://%s/v1, admin on %s://%s (api, ui, metrics, healthz, readyz), raft on %s, gossip %s",
		sc.NodeID, Scheme(cfg.TLS.API), r.api.Addr(), Scheme(cfg.TLS.Admin), r.admin.Addr(), r.store.RaftAddr(), gossip)
	return nil
}

// openControlPlane opens the Raft store described by sc and builds the
// data plane, the admin API and the telemetry pusher around it; base is
// rolter.toml (the process-local sections), peerAdmin the other routers'
// admin URLs. With gossip (r.node set), the data plane reads the view
// through the mesh hooks, and inv (over the same view, already the
// store's PeerSource in sc.Peers) is the admin API's inventory and the
// pusher's endpoints.
func (r *Router) openControlPlane(ctx context.Context, sc cluster.StoreConfig, base *config.Config, peerAdmin []string,
	inv *meshInventory, tp trace.TracerProvider) error {
	if sc.Logger == nil {
		sc.Logger = slog.New(slog.DiscardHandler)
	}
	log := sc.Logger.With("node_id", sc.NodeID)
	store, err := cluster.Open(ctx, sc)
	if err != nil {
		return err
	}
	r.store = store
	deps := adminapi.Deps{Store: store, Cluster: store, InternalToken: sc.InternalToken, Limits: base.Limits, Logger: log}
	r.poller = scrape.NewPoller(scrape.Options{Logger: log, Inflight: func() map[string]uint64 { return r.srv.InflightByBase() }})
	r.follow = newFollower(store, nil, r.poller, nil, base, log)
	opts := router.Options{Logger: log, Base: base, Ready: r.follow.ready, TracerProvider: tp, NodeID: sc.NodeID, WrapAPI: r.wrapAPI}
	opts.Engine, opts.Sources = r.poller, r.poller
	var peers adminapi.Endpoints = staticEndpoints(peerAdmin)
	if r.node != nil {
		r.hooks = newMeshHooks(r.node, time.Now)
		opts.Engine, opts.Sources = router.PreferLoad(r.hooks, r.poller), router.PreferSources(r.hooks, r.poller)
		opts.Learn = r.hooks
		deps.Inventory, deps.Engines = inv, inv
		peers = inv
		r.follow.engines, r.follow.announce, r.follow.pool = r.node.View(), r.node, r.node
	}
	deps.Parked = adminSource{r}
	r.adminAPI = adminapi.New(deps)
	opts.AdminExtra = r.adminHandler()
	r.srv = router.New(opts)
	r.follow.plane = r.srv
	r.srv.Registry().MustRegister(r.poller)
	if r.node != nil {
		r.srv.Registry().MustRegister(r.node.Collector(), r.hooks.state.Collector())
	}
	if r.files, err = cluster.NewFileSyncer(store, base, r.srv.Registry(), log); err != nil {
		store.Close()
		return err
	}
	r.follow.files = r.files
	r.pusher = &adminapi.Pusher{NodeID: sc.NodeID, InternalToken: sc.InternalToken, Source: adminSource{r},
		Local: r.adminAPI.Telemetry(), Peers: peers, Logger: log}
	return nil
}

// adminHandler serves the admin API and the dashboard next to the router's
// own /metrics, /healthz and /readyz.
func (r *Router) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/api/", r.adminAPI)
	mux.Handle("/internal/", r.adminAPI)
	mux.Handle(dashboard.Prefix, dashboard.Handler())
	mux.Handle("/ui", dashboard.Handler())
	return mux
}

// Run serves the data plane on the API listener and the admin port until
// ctx ends (or, in a pool, this router's node id turns out to be taken:
// then the error is mesh.ErrNameConflict); in a cluster it follows the
// replicated state and pushes telemetry meanwhile. Then it drains, closes
// the store and calls Close.
func (r *Router) Run(ctx context.Context) error {
	defer r.Close()
	if r.standalone {
		return r.runStandalone(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(r.stopped, cancel)()
	err := r.runCluster(ctx)
	if cause := context.Cause(r.stopped); errors.Is(cause, mesh.ErrNameConflict) {
		return cause
	}
	return err
}

func (r *Router) runCluster(ctx context.Context) error {
	defer func() {
		if err := r.store.Close(); err != nil {
			r.log.Warn("closing the raft store", "err", err)
		}
	}()
	bg, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Add(4)
	go func() { defer wg.Done(); r.files.Run(bg) }()
	go func() { defer wg.Done(); r.follow.follow(bg) }()
	go func() { defer wg.Done(); r.pusher.Run(bg) }()
	go func() { defer wg.Done(); r.poller.Run(bg) }()
	if r.hooks != nil {
		wg.Add(3)
		go func() { defer wg.Done(); r.hooks.publish(bg, r.srv.LoadsByBase, r.srv.LoadChanges()) }()
		go func() { defer wg.Done(); r.hooks.follow(bg) }()
		go func() { defer wg.Done(); r.follow.rediscover(bg) }()
	}
	return r.srv.Serve(ctx, r.api, r.admin)
}

// Reload takes a re-read rolter.toml (SIGHUP). In a cluster its
// process-local sections replace the running ones and the entries it
// declares are synced into the replicated state; standalone it becomes
// the data plane's config, unless it does not build: then the running
// config stays (logged).
func (r *Router) Reload(file *config.Config) {
	if !r.standalone {
		r.follow.setBase(file)
		return
	}
	r.reloadMu.Lock()
	defer r.reloadMu.Unlock()
	r.poller.Set(file, file.LMCacheTables())
	if err := r.srv.Apply(file); err != nil {
		r.poller.Set(r.running, r.running.LMCacheTables())
		r.log.Error("config reload failed; keeping the running config", "path", r.path, "err", err)
		return
	}
	r.running = file
}

// openStandalone builds the data plane from cfg.File alone.
func openStandalone(ctx context.Context, cfg Config) (*Router, error) {
	log := cfg.logger()
	r := &Router{log: log, tls: cfg.TLS, standalone: true, running: cfg.File, path: cfg.ConfigPath}
	nodeID := standaloneNodeID(cfg.NodeID, cfg.HTTPAddr, cfg.getenv)
	tp, stopTracing, err := startTracing(ctx, cfg.File.Tracing, nodeID, log)
	if err != nil {
		return nil, err
	}
	r.onClose(stopTracing)
	r.poller = scrape.NewPoller(scrape.Options{Logger: log, Inflight: func() map[string]uint64 { return r.srv.InflightByBase() }})
	r.srv = router.New(router.Options{Logger: log, Base: cfg.File, Engine: r.poller, Sources: r.poller, TracerProvider: tp, NodeID: nodeID,
		WrapAPI: r.wrapAPI})
	r.srv.Registry().MustRegister(r.poller)
	r.poller.Set(cfg.File, cfg.File.LMCacheTables())
	if err := r.srv.Apply(cfg.File); err != nil {
		r.Close()
		return nil, err
	}
	if err := r.listen(cfg); err != nil {
		r.Close()
		return nil, err
	}
	r.banner = fmt.Sprintf("rolter router (standalone): API on %s://%s/v1, admin on %s://%s (metrics, healthz, readyz)",
		Scheme(cfg.TLS.API), r.api.Addr(), Scheme(cfg.TLS.Admin), r.admin.Addr())
	return r, nil
}

func (r *Router) runStandalone(ctx context.Context) error {
	pctx, stopPoller := context.WithCancel(ctx)
	pollerDone := make(chan struct{})
	go func() { r.poller.Run(pctx); close(pollerDone) }()
	defer func() { stopPoller(); <-pollerDone }()
	return r.srv.Serve(ctx, r.api, r.admin)
}
