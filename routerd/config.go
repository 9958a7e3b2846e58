package routerd

import (
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/rolter/rolter/certs"
	"github.com/rolter/rolter/cluster"
	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/config"
)

// Config is what `rolter router` is started with: its flags, typed. The
// zero value of a field is the flag's empty value, not its default
// (RegisterFlags supplies those). Messages about unusable settings name
// the flags.
type Config struct {
	// File is rolter.toml as loaded. In a cluster it seeds the replicated
	// state and its retry, breaker, health, timeouts and limits sections
	// stay local; standalone it is the whole config.
	File *config.Config
	// ConfigPath names File in log lines.
	ConfigPath string
	// Standalone runs the data plane alone from File: no Raft, no gossip,
	// no admin API.
	Standalone bool
	// HTTPAddr and AdminAddr are where the OpenAI API and the admin port
	// listen (--http, --admin).
	HTTPAddr, AdminAddr string
	TLS                 TLS
	// NodeID is --node-id: "" takes $ROLTER_NODE_ID, else the id kept in
	// the data dir, else a default (nodeid.go).
	NodeID string
	// Build is this binary's version, announced to the pool.
	Build string

	// The control plane (ignored standalone).
	RaftAddr, RaftAdvertise string
	// Join is --join: Raft peers as id=host:port and gossip seeds as bare
	// host:port, comma-separated.
	Join string
	// PeerAdmin is --peer-admin: the other routers' admin addresses.
	PeerAdmin       string
	BootstrapExpect int
	DataDir         string
	// RaftCert, RaftKey and RaftCA are Raft's mutual TLS (--tls-cert,
	// --tls-key, --tls-ca): all or none.
	RaftCert, RaftKey, RaftCA string
	InsecureDev               bool
	AdminTokenFile            string
	InternalTokenFile         string
	RaftTimeout               time.Duration
	// Gossip places this router in the sidecars' pool; an empty Bind: no
	// gossip.
	Gossip mesh.Addrs

	// Getenv reads the environment (nil: os.Getenv).
	Getenv func(string) string
	Logger *slog.Logger
}

// ErrFlags marks an unusable combination of control-plane settings.
var ErrFlags = errors.New("bad control-plane flags")

func (c *Config) getenv(k string) string {
	if c.Getenv == nil {
		return os.Getenv(k)
	}
	return c.Getenv(k)
}

func (c *Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Logger
}

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

// ReadToken returns the trimmed content of file, else getenv(env).
func ReadToken(file, env string, getenv func(string) string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%w: %v", ErrFlags, err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("%w: %s is empty", ErrFlags, file)
		}
		return tok, nil
	}
	return strings.TrimSpace(getenv(env)), nil
}

// storeConfig resolves the control-plane flags into a StoreConfig: node
// identity, data dir, TLS and tokens. It refuses plaintext Raft without
// --insecure-dev and a multi-router cluster without an internal token.
func (c *Config) storeConfig(getenv func(string) string, log *slog.Logger) (cluster.StoreConfig, error) {
	sc, _, err := c.storeAndCerts(getenv, log)
	return sc, err
}

// storeAndCerts is storeConfig that also returns Raft's TLS material (nil:
// plaintext), which Reload renews: sc.TLS reads it on every handshake.
func (c *Config) storeAndCerts(getenv func(string) string, log *slog.Logger) (cluster.StoreConfig, *certs.Source, error) {
	var raftCerts *certs.Source
	sc, err := c.resolveStore(getenv, log, &raftCerts)
	return sc, raftCerts, err
}

func (c *Config) resolveStore(getenv func(string) string, log *slog.Logger, raftCerts **certs.Source) (cluster.StoreConfig, error) {
	sc := cluster.StoreConfig{RaftAddr: c.RaftAddr, Advertise: c.RaftAdvertise, BootstrapExpect: c.BootstrapExpect,
		InsecureDev: c.InsecureDev, Seed: c.File, Logger: log}
	if c.RaftTimeout > 0 {
		if c.RaftTimeout < 20*time.Millisecond {
			return sc, fmt.Errorf("%w: --raft-timeout %v is below 20ms", ErrFlags, c.RaftTimeout)
		}
		t := c.RaftTimeout
		sc.HeartbeatTimeout, sc.ElectionTimeout, sc.LeaderLeaseTimeout = t, t, t/2
	}
	if c.RaftAddr == "" {
		return sc, fmt.Errorf("%w: --raft is required (or run --standalone)", ErrFlags)
	}
	var rememberID bool
	var err error
	if sc.NodeID, sc.DataDir, rememberID, err = routerNodeID(c.NodeID, c.DataDir, c.RaftAddr, getenv, log); err != nil {
		return sc, fmt.Errorf("%w: %v", ErrFlags, err)
	}
	join, err := parseJoin(c.Join)
	if err != nil {
		return sc, fmt.Errorf("%w: %v", ErrFlags, err)
	}
	if len(join.seeds) > 0 && c.Gossip.Bind == "" {
		return sc, fmt.Errorf("%w: --join %s names gossip seeds, which need --gossip HOST:PORT (Raft peers are id=host:port)",
			ErrFlags, strings.Join(join.seeds, ","))
	}
	if len(join.raft) > 0 {
		sc.Peers = join.raft
	}
	if c.RaftCert != "" || c.RaftKey != "" || c.RaftCA != "" {
		if c.RaftCert == "" || c.RaftKey == "" || c.RaftCA == "" {
			return sc, fmt.Errorf("%w: --tls-cert, --tls-key and --tls-ca go together", ErrFlags)
		}
		// Renewed with the listeners' certificates (Router.RaftCerts): the
		// next Raft connection presents and checks the renewed files.
		src, err := certs.Load(certs.Files{Cert: c.RaftCert, Key: c.RaftKey, ClientCA: c.RaftCA})
		if err != nil {
			return sc, fmt.Errorf("%w: Raft TLS: %v", ErrFlags, err)
		}
		sc.TLS, *raftCerts = src.MutualConfig(), src
	} else if !c.InsecureDev {
		if why := c.needsSecurity(join); why != "" {
			return sc, fmt.Errorf("%w: Raft traffic needs mutual TLS because %s: pass --tls-cert, --tls-key and --tls-ca "+
				"(or --insecure-dev to allow plaintext on a development machine)", ErrFlags, why)
		}
		log.Warn("plaintext Raft and gossip: this router is alone on loopback; TLS (or --insecure-dev) is required " +
			"once it binds or advertises a non-loopback address or joins peers")
		sc.InsecureDev = true
	}
	if sc.SuperadminToken, err = ReadToken(c.AdminTokenFile, "ROLTER_ADMIN_TOKEN", getenv); err != nil {
		return sc, err
	}
	if sc.SuperadminToken == "" {
		log.Warn("no bootstrap superadmin token: set ROLTER_ADMIN_TOKEN or --admin-token-file before the first start, " +
			"or the admin API has no superadmin")
	}
	if sc.InternalToken, err = ReadToken(c.InternalTokenFile, "ROLTER_INTERNAL_TOKEN", getenv); err != nil {
		return sc, err
	}
	if sc.InternalToken == "" {
		// A router joining a gossip pool joins the Raft cluster of the
		// routers it finds there.
		if len(join.raft) > 0 || len(join.seeds) > 0 || c.BootstrapExpect > 1 {
			return sc, fmt.Errorf("%w: a cluster of routers needs the same internal token on every router: "+
				"set ROLTER_INTERNAL_TOKEN or --internal-token-file", ErrFlags)
		}
		var b [32]byte
		_, _ = crand.Read(b[:])
		sc.InternalToken = hex.EncodeToString(b[:])
		log.Warn("no internal token: generated a random one for this single router; " +
			"other routers cannot join it until every router shares ROLTER_INTERNAL_TOKEN")
	}
	if rememberID {
		if err := rememberNodeID(sc.DataDir, sc.NodeID); err != nil {
			return sc, fmt.Errorf("%w: data dir: %v", ErrFlags, err)
		}
	}
	return sc, nil
}

// needsSecurity returns why this router's Raft and gossip must be
// secured, or "" when it is alone on loopback.
func (c *Config) needsSecurity(join joinList) string {
	switch {
	case len(join.raft) > 0:
		return "it joins Raft peers (--join id=host:port)"
	case len(join.seeds) > 0:
		return "it joins a gossip pool (--join host:port), whose routers it would join in Raft"
	case c.BootstrapExpect > 1:
		return fmt.Sprintf("it expects %d routers (--bootstrap-expect)", c.BootstrapExpect)
	}
	return mesh.NonLoopback([2]string{"--raft", c.RaftAddr}, [2]string{"--raft-advertise", c.RaftAdvertise},
		[2]string{"--gossip", c.Gossip.Bind}, [2]string{"--gossip-advertise", c.Gossip.Advertise})
}
