package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/routerd"
)

// runRouter is `rolter router`: the Raft replica of the control plane, the
// data plane on --http (rebuilt on every config_version) and, on --admin,
// the admin API, the dashboard, /metrics, /healthz and /readyz, until
// SIGINT/SIGTERM, then a drain. --standalone runs the data plane alone
// from --config. The process is routerd's; this is its command line.
func runRouter(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("router", stderr)
	var rc routerd.Config
	fs.StringVar(&rc.ConfigPath, "config", "rolter.toml", "path of rolter.toml (its providers, routes, groups, keys and model prices are synced into the replicated state on start and SIGHUP; "+
		"its retry, breaker, health, timeouts and limits sections stay local to this router)")
	fs.StringVar(&rc.HTTPAddr, "http", "127.0.0.1:4000", "address of the OpenAI-compatible API")
	fs.StringVar(&rc.AdminAddr, "admin", "127.0.0.1:4001", "address of the admin API, /ui/, /metrics, /healthz and /readyz")
	logFormat := fs.String("log-format", "text", "log format: text or json (the request log is one line per request)")
	registerClusterFlags(fs, &rc)
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
	if rc.File, err = config.Load(rc.ConfigPath); err != nil {
		return err
	}
	if rc.Logger, err = newLogger(*logFormat, stderr); err != nil {
		return err
	}
	rc.TLS, rc.Build = tlsSrc, version
	r, err := routerd.Open(ctx, rc)
	if fe := (*routerd.FlagError)(nil); errors.As(err, &fe) {
		return fmt.Errorf("%w: %w", errUsage, fe.Err)
	}
	if err != nil {
		return err
	}
	defer r.Close()
	go reloadCertsOnHUP(ctx, rc.Logger, tlsSrc.API, tlsSrc.Admin, r.RaftCerts())
	hup, stopHUP := context.WithCancel(ctx)
	defer stopHUP()
	go reloadOnHUP(hup, rc.ConfigPath, rc.Logger, r.Reload)
	fmt.Fprintln(stdout, r.Banner())
	return r.Run(ctx)
}

// registerClusterFlags adds `rolter router`'s control-plane flags.
func registerClusterFlags(fs *flag.FlagSet, rc *routerd.Config) {
	fs.BoolVar(&rc.Standalone, "standalone", false,
		"run the data plane alone from --config (reloaded on SIGHUP): no Raft, no admin API")
	fs.StringVar(&rc.NodeID, "node-id", "", "this router's id, unique in Raft and the gossip pool (default $ROLTER_NODE_ID, "+
		"else the id kept in --data-dir, else <hostname>-router-<--raft port>)")
	fs.StringVar(&rc.RaftAddr, "raft", "127.0.0.1:7947", "HOST:PORT for Raft and leader forwarding")
	fs.StringVar(&rc.RaftAdvertise, "raft-advertise", "", "HOST:PORT other routers dial (default: --raft)")
	fs.StringVar(&rc.Join, "join", "", "comma-separated Raft peers as id=host:port (the other routers' --raft addresses) "+
		"and gossip seeds as bare HOST:PORT (routers' or sidecars' --gossip; needs --gossip)")
	fs.StringVar(&rc.PeerAdmin, "peer-admin", "",
		"comma-separated admin addresses (host:port or http://host:port) of the other routers; adaptive telemetry is pushed there")
	fs.IntVar(&rc.BootstrapExpect, "bootstrap-expect", 0,
		"bootstrap a new cluster once this many routers (this one included) are known; 0 or 1 with no --join: alone")
	fs.StringVar(&rc.DataDir, "data-dir", "", "directory of the Raft log and snapshots (default ./rolter-data/<node-id>)")
	fs.StringVar(&rc.RaftCert, "tls-cert", "", "PEM certificate of this router for Raft mutual TLS")
	fs.StringVar(&rc.RaftKey, "tls-key", "", "PEM key of --tls-cert")
	fs.StringVar(&rc.RaftCA, "tls-ca", "", "PEM CA that signs every router's certificate")
	fs.BoolVar(&rc.InsecureDev, "insecure-dev", false, "allow plaintext Raft and unencrypted gossip on non-loopback addresses "+
		"or with peers (development and tests only; a lone router on loopback needs neither TLS nor this flag)")
	registerGossipFlags(fs, &rc.Gossip, "", "HOST:PORT of this router's gossip (memberlist, UDP and TCP): joins the sidecars' "+
		"pool for engine load, KV residency and discovery (empty: no gossip)")
	fs.StringVar(&rc.AdminTokenFile, "admin-token-file", "",
		"file holding the bootstrap superadmin token (default $ROLTER_ADMIN_TOKEN)")
	fs.StringVar(&rc.InternalTokenFile, "internal-token-file", "",
		"file holding the node-to-node token shared by every router (default $ROLTER_INTERNAL_TOKEN)")
	fs.DurationVar(&rc.RaftTimeout, "raft-timeout", 500*time.Millisecond,
		"Raft heartbeat and election timeout: a dead leader is replaced within about 2-3x this (raise it across a WAN)")
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
