package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rolter/rolter/certs"
)

// tlsFlags are the TLS flags of the commands that listen: the same names
// on `rolter router` (API and admin ports) and `rolter sidecar` (its
// metrics port takes the admin ones).
type tlsFlags struct {
	api, admin certs.Files
}

// register adds --admin-tls-cert, --admin-tls-key and --admin-client-ca,
// and with api the --api-tls-cert and --api-tls-key flags too.
func (f *tlsFlags) register(fs *flag.FlagSet, api bool, adminWhat string) {
	if api {
		fs.StringVar(&f.api.Cert, "api-tls-cert", "", "PEM certificate (chain) of the OpenAI API listener: serve it over TLS (reloaded on SIGHUP)")
		fs.StringVar(&f.api.Key, "api-tls-key", "", "PEM key of --api-tls-cert")
	}
	fs.StringVar(&f.admin.Cert, "admin-tls-cert", "", "PEM certificate (chain) of the "+adminWhat+" listener: serve it over TLS (reloaded on SIGHUP)")
	fs.StringVar(&f.admin.Key, "admin-tls-key", "", "PEM key of --admin-tls-cert")
	fs.StringVar(&f.admin.ClientCA, "admin-client-ca", "", "PEM CA the "+adminWhat+" listener requires client certificates from "+
		"(mutual TLS; needs --admin-tls-cert)")
}

// tlsSources are the loaded listeners' TLS material; nil fields serve
// plaintext.
type tlsSources struct {
	api, admin *certs.Source
}

// load reads the files the flags name.
func (f *tlsFlags) load() (tlsSources, error) {
	var out tlsSources
	for _, l := range []struct {
		name  string
		files certs.Files
		dst   **certs.Source
	}{{"--api-tls", f.api, &out.api}, {"--admin-tls", f.admin, &out.admin}} {
		if !l.files.Enabled() {
			continue
		}
		if l.files.Cert == "" || l.files.Key == "" {
			return out, fmt.Errorf("%w: %s-cert and %s-key go together (and --admin-client-ca needs them)", errUsage, l.name, l.name)
		}
		src, err := certs.Load(l.files)
		if err != nil {
			return out, fmt.Errorf("%w: %s: %v", errUsage, l.name, err)
		}
		*l.dst = src
	}
	return out, nil
}

// wrap serves ln over TLS from src; nil src leaves it plaintext.
func wrap(ln net.Listener, src *certs.Source) net.Listener {
	if src == nil {
		return ln
	}
	return src.Listen(ln)
}

// scheme is the URL scheme of a listener served from src.
func scheme(src *certs.Source) string {
	if src == nil {
		return "http"
	}
	return "https"
}

// peerClient is the HTTP client a router uses to call the other routers'
// admin ports (the telemetry push) when its own admin port has TLS: it
// accepts a peer whose certificate chains to ca (the --tls-ca of Raft,
// which signs every router, else --admin-client-ca) whatever address it
// was found at, or without ca verifies names against the system roots;
// it presents its admin certificate when asked. nil: plain HTTP.
func (s tlsSources) peerClient(ca string) (*http.Client, error) {
	if s.admin == nil {
		return nil, nil
	}
	conf := s.admin.ClientConfig(nil)
	if ca != "" {
		roots, err := certs.LoadPool(ca)
		if err != nil {
			return nil, err
		}
		conf = s.admin.PeerConfig(roots)
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: conf}}, nil
}

// certCheckInterval is how often the certificate files are checked for a
// renewal written without a SIGHUP (a Kubernetes Secret volume update).
const certCheckInterval = 30 * time.Second

// reloadCertsOnHUP re-reads every source's files on SIGHUP, and any whose
// files changed every certCheckInterval, until ctx ends. A source whose
// files fail to load keeps serving what it had.
func reloadCertsOnHUP(ctx context.Context, log *slog.Logger, srcs ...*certs.Source) {
	var live []*certs.Source
	for _, s := range srcs {
		if s != nil {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	check := time.NewTicker(certCheckInterval)
	defer check.Stop()
	for {
		signalled := false
		select {
		case <-ctx.Done():
			return
		case <-hup:
			signalled = true
		case <-check.C:
		}
		for _, s := range live {
			if !signalled && !s.Changed() {
				continue
			}
			if err := s.Reload(); err != nil {
				log.Error("certificate reload failed; keeping the running certificate", "err", err)
				continue
			}
			log.Info("certificate reloaded", "subject", s.Leaf().Subject.String(),
				"serial", s.Leaf().SerialNumber.String(), "not_after", s.Leaf().NotAfter.Format(time.RFC3339))
		}
	}
}

// tlsConfig is src's server config, nil without TLS.
func tlsConfig(src *certs.Source) *tls.Config {
	if src == nil {
		return nil
	}
	return src.ServerConfig()
}

// scheme is the scheme of the pool's admin URLs.
func (m *meshInventory) scheme() string {
	if m.adminScheme == "" {
		return "http"
	}
	return m.adminScheme
}

// tlsPeers makes every --peer-admin URL https when this router's admin
// port has TLS: the routers of one cluster share the setting, and the
// internal token must not travel in plaintext to a peer that has it.
func tlsPeers(peers []string, admin *certs.Source) []string {
	if admin == nil {
		return peers
	}
	out := make([]string, len(peers))
	for i, p := range peers {
		if rest, ok := strings.CutPrefix(p, "http://"); ok {
			p = "https://" + rest
		}
		out[i] = p
	}
	return out
}

// peerCA is the CA a router verifies the other routers' admin
// certificates with: Raft's --tls-ca (it signs every router), else
// --admin-client-ca, else none (the system roots).
func peerCA(raftCA, adminClientCA string) string {
	if raftCA != "" {
		return raftCA
	}
	return adminClientCA
}
