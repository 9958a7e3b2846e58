package mesh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// What both rolter processes in the pool (the router, routerd, and the
// sidecar) need to place a member: its addresses and key as an operator
// gives them, a start that tolerates seeds that are not up yet, the
// default node id, and the loopback rule. Messages name the `rolter`
// flags the values come from.

// Addrs are a member's gossip addresses as HOST:PORT strings, the file of
// its encryption key and the files of its identity: --gossip,
// --gossip-advertise, --gossip-key-file, --gossip-tls-cert,
// --gossip-tls-key, --gossip-tls-ca.
type Addrs struct {
	Bind      string
	Advertise string // "": Bind
	KeyFile   string // "": $ROLTER_GOSSIP_KEY
	// CertFile, CertKeyFile and CAFile: a certificate whose common name is
	// the node id, its key, and the CA that signs every member's (all
	// three, or none: no identity).
	CertFile, CertKeyFile, CAFile string
}

// ErrAddrs marks unusable gossip addresses or key.
var ErrAddrs = errors.New("bad gossip flags")

// Config resolves a into the Config of a member named name. Without a key
// the member needs insecure (plaintext gossip).
func (a Addrs) Config(name string, meta Meta, insecure bool, getenv func(string) string, log *slog.Logger) (Config, error) {
	cfg := Config{Name: name, Meta: meta, InsecureDev: insecure, Logger: log}
	host, port, err := splitHostPort(a.Bind)
	if err != nil {
		return cfg, fmt.Errorf("%w: --gossip %q: %v", ErrAddrs, a.Bind, err)
	}
	cfg.BindAddr, cfg.BindPort = host, port
	if a.Advertise != "" {
		if cfg.AdvertiseAddr, cfg.AdvertisePort, err = splitHostPort(a.Advertise); err != nil {
			return cfg, fmt.Errorf("%w: --gossip-advertise %q: %v", ErrAddrs, a.Advertise, err)
		}
	}
	if cfg.Key, err = LoadKey(a.KeyFile, getenv); err != nil {
		return cfg, fmt.Errorf("%w: %w", ErrAddrs, err)
	}
	if len(cfg.Key) == 0 && !insecure {
		return cfg, fmt.Errorf("%w: %w", ErrAddrs, ErrNoGossipKey)
	}
	switch set := a.CertFile != "" || a.CertKeyFile != "" || a.CAFile != ""; {
	case set && (a.CertFile == "" || a.CertKeyFile == "" || a.CAFile == ""):
		return cfg, fmt.Errorf("%w: --gossip-tls-cert, --gossip-tls-key and --gossip-tls-ca go together", ErrAddrs)
	case set:
		if cfg.Identity, err = LoadIdentity(a.CertFile, a.CertKeyFile, a.CAFile); err != nil {
			return cfg, fmt.Errorf("%w: %w", ErrAddrs, err)
		}
		if cn := cfg.Identity.Name(); cn != name {
			return cfg, fmt.Errorf("%w: --gossip-tls-cert is issued to %q, not to this node id %q: the gossip name is the "+
				"certificate's common name", ErrAddrs, cn, name)
		}
	default:
		if why := a.NeedsKey(nil); why != "" {
			log.Warn("gossip without member identity: any member holding the pool's key can speak in another's name; "+
				"pass --gossip-tls-cert, --gossip-tls-key and --gossip-tls-ca", "because", why)
		}
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

// ParseSeeds parses a list of bare HOST:PORT gossip seeds (a sidecar's
// --join), comma-separated.
func ParseSeeds(s string) ([]string, error) {
	var out []string
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(part); err != nil {
			return nil, fmt.Errorf("%w: --join %q: want HOST:PORT: %v", ErrAddrs, part, err)
		}
		out = append(out, part)
	}
	return out, nil
}

// joiner is what StartJoining needs of a started member.
type joiner interface {
	NumMembers() int
	Join(seeds []string) error
	Conflict() error
}

// JoinRetry is how often StartJoining retries seeds that did not answer.
const JoinRetry = time.Second

// StartJoining starts the member with start and joins seeds. Seeds that are not up
// yet (a pool starting in any order) do not stop it: it starts alone and
// keeps trying to join every JoinRetry until one answers, someone joins
// it, or ctx ends. A node id already taken in the pool is an error: at
// once when the seeds answer at start, else through stop when the late
// join reveals it.
func StartJoining[M joiner](ctx context.Context, start func(context.Context, Config, []string) (M, error),
	cfg Config, seeds []string, log *slog.Logger, stop context.CancelCauseFunc) (M, error) {
	n, err := start(ctx, cfg, seeds)
	if err == nil || len(seeds) == 0 || errors.Is(err, ErrNameConflict) {
		return n, err
	}
	log.Warn("gossip seeds not reachable yet; starting alone and retrying", "join", seeds, "err", err)
	if n, err = start(ctx, cfg, nil); err != nil {
		return n, err
	}
	go func() {
		t := time.NewTicker(JoinRetry)
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

// DefaultNodeID is <hostname>-<role>-<port of addr>: a router
// (<hostname>-router-<--raft port>) and a sidecar
// (<hostname>-sidecar-<--gossip port>) started on one host with no
// --node-id never collide. (Two members with one name: the pool ignores
// the second, and its engine stays STALE.)
func DefaultNodeID(role, addr string) (string, error) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		return "", fmt.Errorf("no hostname (%v): pass --node-id or set ROLTER_NODE_ID", err)
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return "", fmt.Errorf("cannot derive a node id from %q: pass --node-id or set ROLTER_NODE_ID", addr)
	}
	return host + "-" + role + "-" + port, nil
}

// Plaintext on loopback. One router (or a router and its sidecars) on a
// laptop talks only over 127.0.0.1: nobody else can see or inject that
// traffic, so it needs neither Raft TLS nor a gossip key; it starts with a
// warning. As soon as a process binds or advertises another address, or a
// router joins peers, TLS and the gossip key (or an explicit
// --insecure-dev) are required again.

// IsLoopback reports whether addr (HOST:PORT) reaches only this machine:
// 127.0.0.0/8, ::1 or localhost. An empty or unspecified host binds every
// interface, so it is not loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// NonLoopback names the first of addrs (flag name → HOST:PORT, empty ones
// skipped) that is not loopback, or returns "".
func NonLoopback(addrs ...[2]string) string {
	for _, a := range addrs {
		if a[1] != "" && !IsLoopback(a[1]) {
			return fmt.Sprintf("%s %s is not a loopback address", a[0], a[1])
		}
	}
	return ""
}

// NeedsKey returns why a member's gossip must be encrypted, or "" when
// it binds, advertises and joins loopback addresses only.
func (a Addrs) NeedsKey(seeds []string) string {
	addrs := [][2]string{{"--gossip", a.Bind}, {"--gossip-advertise", a.Advertise}}
	for _, s := range seeds {
		addrs = append(addrs, [2]string{"--join", s})
	}
	if a.Bind == "" {
		return "--gossip is empty (every interface)"
	}
	return NonLoopback(addrs...)
}
