package main

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/rolter/rolter/adaptive"
	"github.com/rolter/rolter/adminapi"
	"github.com/rolter/rolter/cluster"
	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/dashboard"
	"github.com/rolter/rolter/router"
	"github.com/rolter/rolter/routestats"
	"github.com/rolter/rolter/scrape"
)

// clusterFlags are `rolter router`'s control-plane flags.
type clusterFlags struct {
	standalone        bool
	nodeID            string
	raftAddr          string
	raftAdvertise     string
	join              string
	peerAdmin         string
	bootstrapExpect   int
	dataDir           string
	tlsCert           string
	tlsKey            string
	tlsCA             string
	insecureDev       bool
	adminTokenFile    string
	internalTokenFile string
	raftTimeout       time.Duration
	gossip            gossipFlags
}

func (f *clusterFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.standalone, "standalone", false,
		"run the data plane alone from --config (reloaded on SIGHUP): no Raft, no admin API")
	fs.StringVar(&f.nodeID, "node-id", "", "this router's id, unique in Raft and the gossip pool (default $ROLTER_NODE_ID, "+
		"else the id kept in --data-dir, else <hostname>-router-<--raft port>)")
	fs.StringVar(&f.raftAddr, "raft", "127.0.0.1:7947", "HOST:PORT for Raft and leader forwarding")
	fs.StringVar(&f.raftAdvertise, "raft-advertise", "", "HOST:PORT other routers dial (default: --raft)")
	fs.StringVar(&f.join, "join", "", "comma-separated Raft peers as id=host:port (the other routers' --raft addresses) "+
		"and gossip seeds as bare HOST:PORT (routers' or sidecars' --gossip; needs --gossip)")
	fs.StringVar(&f.peerAdmin, "peer-admin", "",
		"comma-separated admin addresses (host:port or http://host:port) of the other routers; adaptive telemetry is pushed there")
	fs.IntVar(&f.bootstrapExpect, "bootstrap-expect", 0,
		"bootstrap a new cluster once this many routers (this one included) are known; 0 or 1 with no --join: alone")
	fs.StringVar(&f.dataDir, "data-dir", "", "directory of the Raft log and snapshots (default ./rolter-data/<node-id>)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate of this router for Raft mutual TLS")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM key of --tls-cert")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "PEM CA that signs every router's certificate")
	fs.BoolVar(&f.insecureDev, "insecure-dev", false, "allow plaintext Raft and unencrypted gossip on non-loopback addresses "+
		"or with peers (development and tests only; a lone router on loopback needs neither TLS nor this flag)")
	f.gossip.register(fs, "", "HOST:PORT of this router's gossip (memberlist, UDP and TCP): joins the sidecars' "+
		"pool for engine load, KV residency and discovery (empty: no gossip)")
	fs.StringVar(&f.adminTokenFile, "admin-token-file", "",
		"file holding the bootstrap superadmin token (default $ROLTER_ADMIN_TOKEN)")
	fs.StringVar(&f.internalTokenFile, "internal-token-file", "",
		"file holding the node-to-node token shared by every router (default $ROLTER_INTERNAL_TOKEN)")
	fs.DurationVar(&f.raftTimeout, "raft-timeout", 500*time.Millisecond,
		"Raft heartbeat and election timeout: a dead leader is replaced within about 2-3x this (raise it across a WAN)")
}

// errFlags marks an unusable combination of control-plane flags.
var errFlags = errors.New("bad control-plane flags")

// joinList is the parsed --join flag: Raft peers given as id=host:port, and
// bare host:port entries, which name gossip seeds (they need --gossip).
type joinList struct {
	raft  cluster.StaticPeers
	seeds []string
}

// parseJoin splits --join into Raft peers and gossip seeds.
func parseJoin(s string) (joinList, error) {
	var out joinList
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if strings.Contains(part, "=") {
			ps, err := cluster.ParsePeers(part)
			if err != nil {
				return joinList{}, fmt.Errorf("--join: %w", err)
			}
			out.raft = append(out.raft, ps...)
			continue
		}
		if _, _, err := net.SplitHostPort(part); err != nil {
			return joinList{}, fmt.Errorf("--join %q: want id=host:port: %v", part, err)
		}
		out.seeds = append(out.seeds, part)
	}
	return out, nil
}

// parsePeerAdmin turns --peer-admin into admin base URLs.
func parsePeerAdmin(s string) ([]string, error) {
	var out []string
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		hostport := strings.TrimPrefix(strings.TrimPrefix(part, "http://"), "https://")
		if _, _, err := net.SplitHostPort(strings.TrimSuffix(hostport, "/")); err != nil {
			return nil, fmt.Errorf("--peer-admin %q: want host:port: %v", part, err)
		}
		if !strings.HasPrefix(part, "http://") && !strings.HasPrefix(part, "https://") {
			part = "http://" + part
		}
		out = append(out, strings.TrimSuffix(part, "/"))
	}
	return out, nil
}

// readToken returns the trimmed content of file, else getenv(env).
func readToken(file, env string, getenv func(string) string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%w: %v", errFlags, err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("%w: %s is empty", errFlags, file)
		}
		return tok, nil
	}
	return strings.TrimSpace(getenv(env)), nil
}

// storeConfig resolves the control-plane flags into a StoreConfig: node
// identity, data dir, TLS and tokens. It refuses plaintext Raft without
// --insecure-dev and a multi-router cluster without an internal token.
func (f *clusterFlags) storeConfig(seed *config.Config, getenv func(string) string, log *slog.Logger) (cluster.StoreConfig, error) {
	sc := cluster.StoreConfig{RaftAddr: f.raftAddr, Advertise: f.raftAdvertise, BootstrapExpect: f.bootstrapExpect,
		InsecureDev: f.insecureDev, Seed: seed, Logger: log}
	if f.raftTimeout > 0 {
		if f.raftTimeout < 20*time.Millisecond {
			return sc, fmt.Errorf("%w: --raft-timeout %v is below 20ms", errFlags, f.raftTimeout)
		}
		t := f.raftTimeout
		sc.HeartbeatTimeout, sc.ElectionTimeout, sc.LeaderLeaseTimeout = t, t, t/2
	}
	if f.raftAddr == "" {
		return sc, fmt.Errorf("%w: --raft is required (or run --standalone)", errFlags)
	}
	var rememberID bool
	var err error
	if sc.NodeID, sc.DataDir, rememberID, err = routerNodeID(f.nodeID, f.dataDir, f.raftAddr, getenv, log); err != nil {
		return sc, fmt.Errorf("%w: %v", errFlags, err)
	}
	join, err := parseJoin(f.join)
	if err != nil {
		return sc, fmt.Errorf("%w: %v", errFlags, err)
	}
	if len(join.seeds) > 0 && f.gossip.addr == "" {
		return sc, fmt.Errorf("%w: --join %s names gossip seeds, which need --gossip HOST:PORT (Raft peers are id=host:port)",
			errFlags, strings.Join(join.seeds, ","))
	}
	if len(join.raft) > 0 {
		sc.Peers = join.raft
	}
	if f.tlsCert != "" || f.tlsKey != "" || f.tlsCA != "" {
		if f.tlsCert == "" || f.tlsKey == "" || f.tlsCA == "" {
			return sc, fmt.Errorf("%w: --tls-cert, --tls-key and --tls-ca go together", errFlags)
		}
		var tc *tls.Config
		if tc, err = cluster.LoadTLS(f.tlsCert, f.tlsKey, f.tlsCA); err != nil {
			return sc, fmt.Errorf("%w: %v", errFlags, err)
		}
		sc.TLS = tc
	} else if !f.insecureDev {
		if why := f.needsSecurity(join); why != "" {
			return sc, fmt.Errorf("%w: Raft traffic needs mutual TLS because %s: pass --tls-cert, --tls-key and --tls-ca "+
				"(or --insecure-dev to allow plaintext on a development machine)", errFlags, why)
		}
		log.Warn("plaintext Raft and gossip: this router is alone on loopback; TLS (or --insecure-dev) is required " +
			"once it binds or advertises a non-loopback address or joins peers")
		sc.InsecureDev = true
	}
	if sc.SuperadminToken, err = readToken(f.adminTokenFile, "ROLTER_ADMIN_TOKEN", getenv); err != nil {
		return sc, err
	}
	if sc.SuperadminToken == "" {
		log.Warn("no bootstrap superadmin token: set ROLTER_ADMIN_TOKEN or --admin-token-file before the first start, " +
			"or the admin API has no superadmin")
	}
	if sc.InternalToken, err = readToken(f.internalTokenFile, "ROLTER_INTERNAL_TOKEN", getenv); err != nil {
		return sc, err
	}
	if sc.InternalToken == "" {
		// A router joining a gossip pool joins the Raft cluster of the
		// routers it finds there.
		if len(join.raft) > 0 || len(join.seeds) > 0 || f.bootstrapExpect > 1 {
			return sc, fmt.Errorf("%w: a cluster of routers needs the same internal token on every router: "+
				"set ROLTER_INTERNAL_TOKEN or --internal-token-file", errFlags)
		}
		var b [32]byte
		_, _ = crand.Read(b[:])
		sc.InternalToken = hex.EncodeToString(b[:])
		log.Warn("no internal token: generated a random one for this single router; " +
			"other routers cannot join it until every router shares ROLTER_INTERNAL_TOKEN")
	}
	if rememberID {
		if err := rememberNodeID(sc.DataDir, sc.NodeID); err != nil {
			return sc, fmt.Errorf("%w: data dir: %v", errFlags, err)
		}
	}
	return sc, nil
}

// controlPlane ties the Raft store to the data plane: it applies every
// config_version to the router, serves the admin API and pushes adaptive
// telemetry.
type controlPlane struct {
	store  *cluster.Store
	srv    *router.Server
	api    *adminapi.API
	pusher *adminapi.Pusher
	files  *cluster.FileSyncer
	log    *slog.Logger
	mesh   *meshRouter // nil without gossip
	// poller is [metrics_scrape] and [providers.lmcache]: engine state for
	// engines no sidecar reports.
	poller *scrape.Poller

	mu      sync.Mutex
	base    *config.Config // process-local sections (retry, breaker, health, timeouts, limits)
	applied uint64         // config_version last applied to srv
	// discovered fingerprints the discover routes' targets last applied.
	discovered string
	stale      bool // base changed since the last apply
	reload     chan struct{}
}

// openControlPlane opens the Raft store described by sc and builds the
// data plane, the admin API and the telemetry pusher around it; base is
// rolter.toml (the process-local sections), peerAdmin the other routers'
// admin URLs. Start it with run.
// node, when non-nil, is this router's gossip member: the data plane reads
// its view, and inv (over the same view) is the store's PeerSource (set
// by the caller in sc.Peers), the admin API's inventory and the pusher's
// endpoints.
func openControlPlane(ctx context.Context, sc cluster.StoreConfig, base *config.Config, peerAdmin []string,
	node *mesh.Node, inv *meshInventory, tp trace.TracerProvider) (*controlPlane, error) {
	if sc.Logger == nil {
		sc.Logger = slog.New(slog.DiscardHandler)
	}
	log := sc.Logger.With("node_id", sc.NodeID)
	store, err := cluster.Open(ctx, sc)
	if err != nil {
		return nil, err
	}
	cp := &controlPlane{store: store, base: base, log: log, reload: make(chan struct{}, 1)}
	deps := adminapi.Deps{Store: store, Cluster: store, InternalToken: sc.InternalToken, Limits: base.Limits, Logger: log}
	opts := router.Options{Logger: log, Base: base, Ready: cp.ready, TracerProvider: tp, NodeID: sc.NodeID}
	var peers adminapi.Endpoints = staticEndpoints(peerAdmin)
	cp.poller = scrape.NewPoller(scrape.Options{Logger: log, Inflight: func() map[string]uint64 { return cp.srv.InflightByBase() }})
	opts.Engine, opts.Sources = cp.poller, cp.poller
	if node != nil {
		cp.mesh = newMeshRouter(node.View(), time.Now)
		opts.Engine, opts.Sources = router.PreferLoad(cp.mesh, cp.poller), router.PreferSources(cp.mesh, cp.poller)
		opts.Learn = cp.mesh
		deps.Inventory, deps.Engines = inv, inv
		peers = inv
	}
	deps.Parked = parkedSource{cp}
	cp.api = adminapi.New(deps)
	opts.AdminExtra = cp.adminHandler()
	cp.srv = router.New(opts)
	cp.srv.Registry().MustRegister(cp.poller)
	if node != nil {
		cp.srv.Registry().MustRegister(node.Collector(), cp.mesh.state.Collector())
	}
	if cp.files, err = cluster.NewFileSyncer(store, base, cp.srv.Registry(), log); err != nil {
		store.Close()
		return nil, err
	}
	cp.pusher = &adminapi.Pusher{NodeID: sc.NodeID, InternalToken: sc.InternalToken, Source: cp,
		Local: cp.api.Telemetry(), Peers: peers, Logger: log}
	return cp, nil
}

// run serves the data plane on api and the admin port on admin, follows
// the replicated state and pushes telemetry until ctx ends; then it
// drains and closes the store.
func (cp *controlPlane) run(ctx context.Context, api, admin net.Listener) error {
	defer func() {
		if err := cp.store.Close(); err != nil {
			cp.log.Warn("closing the raft store", "err", err)
		}
	}()
	bg, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Add(4)
	go func() { defer wg.Done(); cp.files.Run(bg) }()
	go func() { defer wg.Done(); cp.follow(bg) }()
	go func() { defer wg.Done(); cp.pusher.Run(bg) }()
	go func() { defer wg.Done(); cp.poller.Run(bg) }()
	if cp.mesh != nil {
		wg.Add(3)
		go func() { defer wg.Done(); cp.mesh.publish(bg, cp.srv.LoadsByBase) }()
		go func() { defer wg.Done(); cp.mesh.follow(bg) }()
		go func() { defer wg.Done(); cp.rediscover(bg) }()
	}
	return cp.srv.Serve(ctx, api, admin)
}

// adminHandler serves the admin API and the dashboard next to the router's
// own /metrics, /healthz and /readyz.
func (cp *controlPlane) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/api/", cp.api)
	mux.Handle("/internal/", cp.api)
	mux.Handle(dashboard.Prefix, dashboard.Handler())
	mux.Handle("/ui", dashboard.Handler())
	return mux
}

// ready is the control plane's /readyz condition: a Raft leader is known
// and the data plane runs a snapshot of the replicated config.
func (cp *controlPlane) ready() error {
	if cp.store.Info().Leader == "" {
		return errors.New("no raft leader")
	}
	cp.mu.Lock()
	applied := cp.applied
	cp.mu.Unlock()
	if applied == 0 {
		return errors.New("replicated config not applied yet")
	}
	return nil
}

// setBase takes a reloaded rolter.toml (SIGHUP): its process-local
// sections replace the running ones (follow re-applies), and the entries
// it declares are synced into the cluster.
func (cp *controlPlane) setBase(base *config.Config) {
	cp.mu.Lock()
	cp.base = base
	cp.mu.Unlock()
	cp.files.Kick(base)
	cp.reapply()
}

// reapply asks follow to rebuild the data plane from the state and the
// current base (the file is unchanged: nothing to sync).
func (cp *controlPlane) reapply() {
	cp.mu.Lock()
	cp.stale = true
	cp.mu.Unlock()
	select {
	case cp.reload <- struct{}{}:
	default:
	}
}

// follow applies the replicated state to the data plane now and after
// every config_version bump, until ctx ends.
func (cp *controlPlane) follow(ctx context.Context) {
	watch := cp.store.Watch()
	for {
		cp.applyState()
		select {
		case <-ctx.Done():
			return
		case <-watch:
		case <-cp.reload:
		}
	}
}

// applyState builds a snapshot from the current state when its
// config_version (or the local base) changed. A state that fails to build
// keeps the running snapshot.
func (cp *controlPlane) applyState() {
	st := cp.store.State()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if !st.Seeded || st.ConfigVersion == 0 || (st.ConfigVersion == cp.applied && !cp.stale) {
		return
	}
	cfg := st.Config(cp.base)
	if cp.mesh != nil {
		cfg = discover(cfg, cp.mesh.view.Engines)
	}
	discovered := discoveredKey(cfg)
	cp.poller.Set(cfg, cp.base.LMCacheTables())
	if err := cp.srv.ApplyVersion(cfg, st.ConfigVersion); err != nil {
		cp.log.Error("replicated config does not build; keeping the running snapshot",
			"config_version", st.ConfigVersion, "err", err)
		return
	}
	cp.applied, cp.stale, cp.discovered = st.ConfigVersion, false, discovered
	if cp.mesh != nil {
		cp.mesh.view.PublishConfigVersion(st.ConfigVersion)
	}
}

// AdaptiveTelemetry implements adminapi.TelemetrySource over the running
// snapshot's adaptive balancers.
func (cp *controlPlane) AdaptiveTelemetry() []adaptive.RouteTelemetry {
	return cp.srv.AdaptiveTelemetry()
}

// RouteStats implements adminapi.StatsSource: the data plane's route
// stats ring.
func (cp *controlPlane) RouteStats() []routestats.Route { return cp.srv.RouteStats() }

// ConfigVersion implements adminapi.VersionSource: the config_version the
// data plane runs.
func (cp *controlPlane) ConfigVersion() uint64 { return cp.srv.ConfigVersion() }

// staticEndpoints is adminapi.Endpoints over --peer-admin.
type staticEndpoints []string

// TelemetryEndpoints implements adminapi.Endpoints.
func (e staticEndpoints) TelemetryEndpoints() []string { return e }

// parkedSource is adminapi.ParkedSource over the data plane's parkings
// (read per admin request: cp.srv exists by then).
type parkedSource struct{ cp *controlPlane }

// ParkedTargets implements adminapi.ParkedSource.
func (p parkedSource) ParkedTargets() []adminapi.ParkedTarget {
	var out []adminapi.ParkedTarget
	for _, t := range p.cp.srv.ParkedTargets() {
		out = append(out, adminapi.ParkedTarget{Target: t.Target, Model: t.Model, Until: t.Until.UTC(), Reason: t.Reason})
	}
	return out
}
