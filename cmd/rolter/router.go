package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/router"
	"github.com/rolter/rolter/scrape"
)

// runRouter is `rolter router`: the Raft replica of the control plane, the
// data plane on --http (rebuilt on every config_version) and, on --admin,
// the admin API, the dashboard, /metrics, /healthz and /readyz, until
// SIGINT/SIGTERM, then a drain. --standalone runs the data plane alone
// from --config.
func runRouter(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("router", stderr)
	cfgPath := fs.String("config", "rolter.toml", "path of rolter.toml (its providers, routes, groups and keys are synced into the replicated state on start and SIGHUP; "+
		"its retry, breaker, health, timeouts and limits sections stay local to this router)")
	httpAddr := fs.String("http", "127.0.0.1:4000", "address of the OpenAI-compatible API")
	adminAddr := fs.String("admin", "127.0.0.1:4001", "address of the admin API, /ui/, /metrics, /healthz and /readyz")
	logFormat := fs.String("log-format", "text", "log format: text or json (the request log is one line per request)")
	var cf clusterFlags
	cf.register(fs)
	// TLS of the API and admin listeners (tlsflags.go).
	var tf tlsFlags
	tf.register(fs, true, "admin")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	tlsSrc, err := tf.load()
	if err != nil {
		return err
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	log, err := newLogger(*logFormat, stderr)
	if err != nil {
		return err
	}
	go reloadCertsOnHUP(ctx, log, tlsSrc.api, tlsSrc.admin)
	if cf.standalone {
		return runStandalone(ctx, cfg, *cfgPath, *httpAddr, *adminAddr, standaloneNodeID(cf.nodeID, *httpAddr), tlsSrc, stdout, log)
	}
	sc, err := cf.storeConfig(cfg, os.Getenv, log)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	peerAdmin, err := parsePeerAdmin(cf.peerAdmin)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	peerAdmin = tlsPeers(peerAdmin, tlsSrc.admin)
	peerClient, err := tlsSrc.peerClient(peerCA(cf.tlsCA, tf.admin.ClientCA))
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	sc.Logger = log // the store adds node_id itself
	api, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	defer api.Close()
	admin, err := net.Listen("tcp", *adminAddr)
	if err != nil {
		return fmt.Errorf("--admin: %w", err)
	}
	defer admin.Close()
	api, admin = wrap(api, tlsSrc.api), wrap(admin, tlsSrc.admin)

	var node *mesh.Node
	var inv *meshInventory
	ctx, stop := context.WithCancelCause(ctx) // stopped by a node id conflict found late
	defer stop(nil)
	if cf.gossip.addr != "" {
		join, _ := parseJoin(cf.join) // storeConfig checked it
		raftAddr := sc.Advertise
		if raftAddr == "" {
			raftAddr = sc.RaftAddr
		}
		meta := mesh.Meta{Role: mesh.RoleRouter, NodeID: sc.NodeID, Build: version, RaftAddr: raftAddr, AdminAddr: admin.Addr().String()}
		mcfg, err := cf.gossip.meshConfig(sc.NodeID, meta, sc.InsecureDev, os.Getenv, log)
		if err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		if node, err = startMesh(ctx, mcfg, join.seeds, log, stop); err != nil {
			return err
		}
		defer func() {
			if err := node.Leave(2 * time.Second); err != nil {
				log.Warn("leaving the gossip pool", "err", err)
			}
		}()
		inv = newMeshInventory(node.View(), sc.NodeID, join.raft, peerAdmin)
		inv.adminScheme = scheme(tlsSrc.admin)
		sc.Peers = inv
	}
	log.Info("opening the raft store", "node_id", sc.NodeID, "raft", sc.RaftAddr, "data_dir", sc.DataDir, "bootstrap_expect", sc.BootstrapExpect)
	tp, stopTracing, err := startTracing(ctx, cfg.Tracing, sc.NodeID, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	cp, err := openControlPlane(ctx, sc, cfg, peerAdmin, node, inv, tp)
	if err != nil {
		return err
	}
	if peerClient != nil {
		cp.pusher.Client = peerClient
	}
	// Every router reports its build and a dialable admin address over the
	// telemetry channel, so the Mesh page has both for each row.
	advertise := sc.Advertise
	if advertise == "" {
		advertise = sc.RaftAddr
	}
	cp.pusher.Build, cp.pusher.AdminAddr = version, hostFrom(admin.Addr().String(), advertise)
	hup, stopHUP := context.WithCancel(ctx)
	defer stopHUP()
	go reloadOnHUP(hup, *cfgPath, log, cp.setBase)
	gossip := "off"
	if node != nil {
		gossip = node.Addr()
	}
	fmt.Fprintf(stdout, "rolter router %s: API on %s://%s/v1, admin on %s://%s (api, ui, metrics, healthz, readyz), raft on %s, gossip %s\n",
		sc.NodeID, scheme(tlsSrc.api), api.Addr(), scheme(tlsSrc.admin), admin.Addr(), cp.store.RaftAddr(), gossip)
	err = cp.run(ctx, api, admin)
	if cause := context.Cause(ctx); errors.Is(cause, mesh.ErrNameConflict) {
		return cause
	}
	return err
}

// runStandalone serves the data plane from the config file alone,
// reloading it on SIGHUP.
func runStandalone(ctx context.Context, cfg *config.Config, path, httpAddr, adminAddr, nodeID string, tlsSrc tlsSources, stdout io.Writer, log *slog.Logger) error {
	tp, stopTracing, err := startTracing(ctx, cfg.Tracing, nodeID, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	var srv *router.Server
	poller := scrape.NewPoller(scrape.Options{Logger: log, Inflight: func() map[string]uint64 { return srv.InflightByBase() }})
	srv = router.New(router.Options{Logger: log, Base: cfg, Engine: poller, Sources: poller, TracerProvider: tp, NodeID: nodeID})
	srv.Registry().MustRegister(poller)
	poller.Set(cfg, cfg.LMCacheTables())
	if err := srv.Apply(cfg); err != nil {
		return err
	}
	pctx, stopPoller := context.WithCancel(ctx)
	pollerDone := make(chan struct{})
	go func() { poller.Run(pctx); close(pollerDone) }()
	defer func() { stopPoller(); <-pollerDone }()
	api, err := net.Listen("tcp", httpAddr)
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	admin, err := net.Listen("tcp", adminAddr)
	if err != nil {
		api.Close()
		return fmt.Errorf("--admin: %w", err)
	}
	api, admin = wrap(api, tlsSrc.api), wrap(admin, tlsSrc.admin)
	fmt.Fprintf(stdout, "rolter router (standalone): API on %s://%s/v1, admin on %s://%s (metrics, healthz, readyz)\n",
		scheme(tlsSrc.api), api.Addr(), scheme(tlsSrc.admin), admin.Addr())
	running := cfg // touched by the reload goroutine only
	go reloadOnHUP(ctx, path, log, func(c *config.Config) {
		poller.Set(c, c.LMCacheTables())
		if err := srv.Apply(c); err != nil {
			poller.Set(running, running.LMCacheTables())
			log.Error("config reload failed; keeping the running config", "path", path, "err", err)
			return
		}
		running = c
	})
	return srv.Serve(ctx, api, admin)
}

// reloadOnHUP re-reads the config file on SIGHUP and hands it to apply; a
// file that fails to load leaves the running config.
func reloadOnHUP(ctx context.Context, path string, log *slog.Logger, apply func(*config.Config)) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			cfg, err := config.Load(path)
			if err != nil {
				log.Error("config reload failed; keeping the running config", "path", path, "err", err)
				continue
			}
			apply(cfg)
		}
	}
}
