// Package certs owns the TLS material of rolter's HTTP listeners (the
// router's API and admin ports, the sidecar's metrics port) and of the
// routers' HTTP calls to each other: a key pair read from PEM files and
// swapped atomically on Reload (Watch calls it on SIGHUP and when
// Changed sees renewed files), an optional CA whose client certificates a
// listener requires, and the server and client tls.Configs built on them.
// The gossip identity's files are a Source too: OnReload hands each
// renewed pair to the mesh member before it is swapped in. A handshake reads the
// current pair through tls.Config.GetCertificate, so a reload changes what
// new connections see and leaves established ones (in-flight streams) alone.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// ErrExpired is returned for a certificate whose validity has ended (or not
// begun): loading it would make every handshake fail.
var ErrExpired = errors.New("certs: certificate not valid now")

// Files names the PEM files of one listener: its certificate chain and key,
// and optionally the CA that signs the client certificates it requires.
type Files struct {
	Cert, Key string
	// ClientCA, when set, makes the listener require and verify a client
	// certificate signed by it (mutual TLS).
	ClientCA string
}

// Enabled reports whether any file is named.
func (f Files) Enabled() bool { return f.Cert != "" || f.Key != "" || f.ClientCA != "" }

// Source is a listener's TLS material. Its methods are safe for concurrent
// use; handshakes never block on Reload.
type Source struct {
	files Files
	now   func() time.Time
	pair  atomic.Pointer[tls.Certificate]
	cas   atomic.Pointer[x509.CertPool] // nil: no client certificate asked
	seen  atomic.Pointer[string]        // the files' stamp at the last Reload
	check atomic.Pointer[func(*tls.Certificate, *x509.CertPool) error]
}

// Load reads f. The certificate and key are required; a certificate that
// is expired or not yet valid is refused.
func Load(f Files) (*Source, error) {
	return load(f, time.Now)
}

func load(f Files, now func() time.Time) (*Source, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("certs: a certificate and its key go together")
	}
	s := &Source{files: f, now: now}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload reads the files again and swaps them in at once; on any error the
// running pair and CA stay.
func (s *Source) Reload() error {
	stamp := s.stamp()
	s.seen.Store(&stamp)
	pair, err := tls.LoadX509KeyPair(s.files.Cert, s.files.Key)
	if err != nil {
		return fmt.Errorf("certs: key pair %s: %w", s.files.Cert, err)
	}
	if now := s.now(); now.After(pair.Leaf.NotAfter) || now.Before(pair.Leaf.NotBefore) {
		return fmt.Errorf("%w: %s is valid from %s to %s", ErrExpired, s.files.Cert,
			pair.Leaf.NotBefore.Format(time.RFC3339), pair.Leaf.NotAfter.Format(time.RFC3339))
	}
	var cas *x509.CertPool
	if s.files.ClientCA != "" {
		if cas, err = LoadPool(s.files.ClientCA); err != nil {
			return err
		}
	}
	if check := s.check.Load(); check != nil {
		if err := (*check)(&pair, cas); err != nil {
			return fmt.Errorf("certs: %s: %w", s.files.Cert, err)
		}
	}
	s.pair.Store(&pair)
	s.cas.Store(cas)
	return nil
}

// OnReload makes every later Reload pass the new pair and CA to f before
// swapping them in: f takes them up elsewhere (the gossip identity) or
// refuses them, and a refusal keeps the running pair like any load error.
// f runs on the reloading goroutine (Watch's).
func (s *Source) OnReload(f func(pair *tls.Certificate, cas *x509.CertPool) error) { s.check.Store(&f) }

// Changed reports whether a file's size or modification time differs from
// the last Reload's (successful or not): a renewal (a Kubernetes Secret
// volume swaps its files when cert-manager rewrites the Secret) for Reload
// to pick up, while files that failed to load are not retried until they
// move again.
func (s *Source) Changed() bool {
	seen := s.seen.Load()
	return seen == nil || *seen != s.stamp()
}

// stamp describes the files as they are now.
func (s *Source) stamp() string {
	out := ""
	for _, f := range []string{s.files.Cert, s.files.Key, s.files.ClientCA} {
		if f == "" {
			continue
		}
		if fi, err := os.Stat(f); err == nil {
			out += fmt.Sprintf("%s %d %d;", f, fi.Size(), fi.ModTime().UnixNano())
		} else {
			out += f + " missing;"
		}
	}
	return out
}

// Leaf returns the certificate handshakes present now.
func (s *Source) Leaf() *x509.Certificate { return s.pair.Load().Leaf }

// ServerConfig returns the config of a listener serving the current pair,
// requiring a client certificate signed by Files.ClientCA when set. It
// speaks HTTP/1.1 (the routers' streaming and drain are written for it).
func (s *Source) ServerConfig() *tls.Config {
	c := s.base()
	if s.files.ClientCA != "" {
		c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cc := s.base()
			cc.ClientCAs = s.cas.Load()
			cc.ClientAuth = tls.RequireAndVerifyClientCert
			return cc, nil
		}
	}
	return c
}

func (s *Source) base() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.pair.Load(), nil
		},
	}
}

// Listen wraps ln so that every connection it accepts is served over TLS.
func (s *Source) Listen(ln net.Listener) net.Listener {
	return tls.NewListener(ln, s.ServerConfig())
}

// ClientConfig returns the config of a client that verifies servers with
// roots (nil: the system's) and presents the current pair when a server
// asks for a client certificate. The routers use it to call each other.
func (s *Source) ClientConfig(roots *x509.CertPool) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    roots,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return s.pair.Load(), nil
		},
	}
}

// PeerConfig is ClientConfig for calls between routers: a server passes if
// its chain verifies against ca for server authentication, whatever name
// it was dialled by. Routers find each other's admin ports by gossip, as
// pod or host IPs their certificates do not list; being signed by the
// cluster's CA is the identity (as on the Raft port).
func (s *Source) PeerConfig(ca *x509.CertPool) *tls.Config {
	c := s.ClientConfig(ca)
	c.InsecureSkipVerify = true // replaced by VerifyConnection below
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("certs: the peer presented no certificate")
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: ca, Intermediates: inter,
			CurrentTime: s.now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		return err
	}
	return c
}

// MutualConfig returns the config of both ends of a mutual-TLS link
// between routers (the Raft port): it presents the current pair as server
// and as client, and requires the other end's certificate to chain to the
// current Files.ClientCA (the cluster CA), checking as a client the name
// it dialled (tls.Config.ServerName) as crypto/tls would. Every handshake
// reads the pair and the CA as they are now, so Reload renews both for the
// next connection and leaves established ones alone.
func (s *Source) MutualConfig() *tls.Config {
	pair := func() *tls.Certificate { return s.pair.Load() }
	server := func() *tls.Config {
		return &tls.Config{MinVersion: tls.VersionTLS13, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: s.cas.Load(),
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return pair(), nil }}
	}
	c := server()
	c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) { return server(), nil }
	c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return pair(), nil }
	// A client verifies the server against the CA loaded now, which a
	// fixed RootCAs could not follow. (A server answers with server(),
	// where crypto/tls verifies the client against ClientCAs.)
	c.InsecureSkipVerify = true
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("certs: the peer presented no certificate")
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: s.cas.Load(), Intermediates: inter,
			DNSName: cs.ServerName, CurrentTime: s.now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		return err
	}
	return c
}

// LoadPool reads a PEM bundle of CA certificates.
func LoadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("certs: ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("certs: ca %s: no certificates", file)
	}
	return pool, nil
}
