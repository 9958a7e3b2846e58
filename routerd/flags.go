package routerd

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rolter/rolter/config"
)

// RegisterFlags adds `rolter router`'s flags for c's fields, with their
// defaults, to fs: --config, --http, --admin and the control plane's.
// The TLS listener flags and --log-format are the command's.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.ConfigPath, "config", "rolter.toml", "path of rolter.toml (its providers, routes, groups, keys and model prices are synced into the replicated state on start and SIGHUP; "+
		"its retry, breaker, health, timeouts and limits sections stay local to this router)")
	fs.StringVar(&c.HTTPAddr, "http", "127.0.0.1:4000", "address of the OpenAI-compatible API")
	fs.StringVar(&c.AdminAddr, "admin", "127.0.0.1:4001", "address of the admin API, /ui/, /metrics, /healthz and /readyz")
	fs.BoolVar(&c.Standalone, "standalone", false,
		"run the data plane alone from --config (reloaded on SIGHUP): no Raft, no admin API")
	fs.StringVar(&c.NodeID, "node-id", "", "this router's id, unique in Raft and the gossip pool (default $ROLTER_NODE_ID, "+
		"else the id kept in --data-dir, else <hostname>-router-<--raft port>)")
	fs.StringVar(&c.RaftAddr, "raft", "127.0.0.1:7947", "HOST:PORT for Raft and leader forwarding")
	fs.StringVar(&c.RaftAdvertise, "raft-advertise", "", "HOST:PORT other routers dial (default: --raft)")
	fs.StringVar(&c.Join, "join", "", "comma-separated Raft peers as id=host:port (the other routers' --raft addresses) "+
		"and gossip seeds as bare HOST:PORT (routers' or sidecars' --gossip; needs --gossip)")
	fs.StringVar(&c.PeerAdmin, "peer-admin", "",
		"comma-separated admin addresses (host:port or http://host:port) of the other routers; adaptive telemetry is pushed there")
	fs.IntVar(&c.BootstrapExpect, "bootstrap-expect", 0,
		"bootstrap a new cluster once this many routers (this one included) are known; 0 or 1 with no --join: alone")
	fs.StringVar(&c.DataDir, "data-dir", "", "directory of the Raft log and snapshots (default ./rolter-data/<node-id>)")
	fs.StringVar(&c.RaftCert, "tls-cert", "", "PEM certificate of this router for Raft mutual TLS")
	fs.StringVar(&c.RaftKey, "tls-key", "", "PEM key of --tls-cert")
	fs.StringVar(&c.RaftCA, "tls-ca", "", "PEM CA that signs every router's certificate")
	fs.BoolVar(&c.InsecureDev, "insecure-dev", false, "allow plaintext Raft and unencrypted gossip on non-loopback addresses "+
		"or with peers (development and tests only; a lone router on loopback needs neither TLS nor this flag)")
	c.Gossip.RegisterFlags(fs, "", "HOST:PORT of this router's gossip (memberlist, UDP and TCP): joins the sidecars' "+
		"pool for engine load, KV residency and discovery (empty: no gossip)")
	fs.StringVar(&c.AdminTokenFile, "admin-token-file", "",
		"file holding the bootstrap superadmin token (default $ROLTER_ADMIN_TOKEN)")
	fs.StringVar(&c.InternalTokenFile, "internal-token-file", "",
		"file holding the node-to-node token shared by every router (default $ROLTER_INTERNAL_TOKEN)")
	fs.DurationVar(&c.RaftTimeout, "raft-timeout", 500*time.Millisecond,
		"Raft heartbeat and election timeout: a dead leader is replaced within about 2-3x this (raise it across a WAN)")
}

// ReloadOnHUP re-reads the config file at path on SIGHUP and hands it to
// apply (Router.Reload) until ctx ends; a file that fails to load leaves
// the running config.
func ReloadOnHUP(ctx context.Context, path string, log *slog.Logger, apply func(*config.Config)) {
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
