package certs_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/certs"
	"github.com/rolter/rolter/certs/certstest"
)

// serve runs handler over TLS from src on loopback until the test ends.
func serve(t *testing.T, src *certs.Source, handler http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(src.Listen(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "https://" + ln.Addr().String()
}

func client(roots *x509.CertPool, cert *tls.Certificate) *http.Client {
	c := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert != nil {
		c.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: c}}
}

func keyPair(t *testing.T, l certstest.Leaf) *tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(l.Cert, l.Key)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })

func get(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestWrongCARefused(t *testing.T) {
	ca, other := certstest.NewCA(t, "cluster"), certstest.NewCA(t, "other")
	srvLeaf := ca.Valid(t, "router")
	src, err := certs.Load(certs.Files{Cert: srvLeaf.Cert, Key: srvLeaf.Key, ClientCA: ca.CertPEM})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, src, ok)

	if body, err := get(client(ca.Pool(), keyPair(t, ca.Valid(t, "operator"))), url); err != nil || body != "ok" {
		t.Fatalf("a client certificate from the cluster CA: %q %v, want ok", body, err)
	}
	tests := []struct {
		name   string
		client *http.Client
	}{
		{"client certificate from another CA", client(ca.Pool(), keyPair(t, other.Valid(t, "intruder")))},
		{"no client certificate", client(ca.Pool(), nil)},
		{"client trusting another CA", client(other.Pool(), keyPair(t, ca.Valid(t, "lost")))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if body, err := get(tc.client, url); err == nil {
				t.Fatalf("served %q, want the handshake refused", body)
			}
		})
	}
}

func TestExpiredCertificateRefused(t *testing.T) {
	ca := certstest.NewCA(t, "cluster")
	t.Run("client certificate", func(t *testing.T) {
		srvLeaf := ca.Valid(t, "router")
		src, err := certs.Load(certs.Files{Cert: srvLeaf.Cert, Key: srvLeaf.Key, ClientCA: ca.CertPEM})
		if err != nil {
			t.Fatal(err)
		}
		url := serve(t, src, ok)
		if body, err := get(client(ca.Pool(), keyPair(t, ca.Expired(t, "stale-operator"))), url); err == nil {
			t.Fatalf("an expired client certificate was served %q", body)
		}
	})
	t.Run("server certificate at load", func(t *testing.T) {
		l := ca.Expired(t, "stale-router")
		if _, err := certs.Load(certs.Files{Cert: l.Cert, Key: l.Key}); !errors.Is(err, certs.ErrExpired) {
			t.Fatalf("Load of an expired certificate: %v, want ErrExpired", err)
		}
	})
	t.Run("server certificate at reload", func(t *testing.T) {
		l := ca.Valid(t, "renewed-router")
		src, err := certs.Load(certs.Files{Cert: l.Cert, Key: l.Key})
		if err != nil {
			t.Fatal(err)
		}
		ca.Issue(t, "renewed-router", time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
		if err := src.Reload(); !errors.Is(err, certs.ErrExpired) {
			t.Fatalf("Reload to an expired certificate: %v, want ErrExpired", err)
		}
		url := serve(t, src, ok)
		if body, err := get(client(ca.Pool(), nil), url); err != nil || body != "ok" {
			t.Fatalf("after a refused reload: %q %v, want the running certificate kept", body, err)
		}
		if src.Leaf().SerialNumber.Cmp(l.Serial) != 0 {
			t.Fatalf("serving serial %v, want the original %v", src.Leaf().SerialNumber, l.Serial)
		}
	})
}

// A reload serves the new certificate to new connections while a stream
// opened before it runs to its end on the old one.
func TestReloadKeepsInFlightStream(t *testing.T) {
	ca := certstest.NewCA(t, "cluster")
	first := ca.Valid(t, "router")
	src, err := certs.Load(certs.Files{Cert: first.Cert, Key: first.Key})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	url := serve(t, src, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stream" {
			fmt.Fprint(w, "ok")
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: 1\n\n")
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprint(w, "data: 2\n\ndata: [DONE]\n\n")
	}))
	streamClient := client(ca.Pool(), nil)
	resp, err := streamClient.Get(url + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "data: 1\n" {
		t.Fatalf("first event %q %v", line, err)
	}
	if got := resp.TLS.PeerCertificates[0].SerialNumber; got.Cmp(first.Serial) != 0 {
		t.Fatalf("stream served by serial %v, want %v", got, first.Serial)
	}

	second := ca.Valid(t, "router") // renewal: same files, new certificate
	if err := src.Reload(); err != nil {
		t.Fatal(err)
	}
	fresh, err := client(ca.Pool(), nil).Get(url + "/")
	if err != nil {
		t.Fatal(err)
	}
	fresh.Body.Close()
	if got := fresh.TLS.PeerCertificates[0].SerialNumber; got.Cmp(second.Serial) != 0 {
		t.Fatalf("a new connection after the reload got serial %v, want the new %v", got, second.Serial)
	}

	close(release)
	rest, err := io.ReadAll(br)
	if err != nil || !strings.Contains(string(rest), "data: 2") || !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("the in-flight stream after the reload: %q %v, want it to end with [DONE]", rest, err)
	}
}

// A file that does not parse leaves the running pair in place.
func TestBrokenReloadKeepsRunningPair(t *testing.T) {
	ca := certstest.NewCA(t, "cluster")
	l := ca.Valid(t, "router")
	src, err := certs.Load(certs.Files{Cert: l.Cert, Key: l.Key})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.Cert, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := src.Reload(); err == nil {
		t.Fatal("Reload accepted a broken certificate file")
	}
	if src.Leaf().SerialNumber.Cmp(l.Serial) != 0 {
		t.Fatal("the running certificate was replaced by a broken reload")
	}
	if src.Changed() {
		t.Fatal("files that failed to load count as changed: they would be retried (and logged) at every check")
	}
}

// A renewal written over the files is noticed without a signal.
func TestChangedAfterRenewal(t *testing.T) {
	ca := certstest.NewCA(t, "cluster")
	l := ca.Valid(t, "router")
	src, err := certs.Load(certs.Files{Cert: l.Cert, Key: l.Key})
	if err != nil {
		t.Fatal(err)
	}
	if src.Changed() {
		t.Fatal("Changed right after Load")
	}
	renewed := ca.Valid(t, "router")
	// The rewrite may land within the file system's timestamp resolution;
	// the size or the bytes of a new key differ anyway in practice, but
	// make sure by moving the modification time.
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(renewed.Cert, later, later); err != nil {
		t.Fatal(err)
	}
	if !src.Changed() {
		t.Fatal("a renewed certificate file was not noticed")
	}
	if err := src.Reload(); err != nil {
		t.Fatal(err)
	}
	if src.Changed() || src.Leaf().SerialNumber.Cmp(renewed.Serial) != 0 {
		t.Fatal("after Reload: still changed, or not the renewed certificate")
	}
}

// Between routers, a peer signed by the cluster CA is accepted at whatever
// address gossip found it; a standard client would refuse the name, and a
// peer from another CA is refused.
func TestPeerConfigVerifiesTheCAOnly(t *testing.T) {
	ca, other := certstest.NewCA(t, "cluster"), certstest.NewCA(t, "other")
	now := time.Now()
	self := ca.Valid(t, "r1")
	me, err := certs.Load(certs.Files{Cert: self.Cert, Key: self.Key})
	if err != nil {
		t.Fatal(err)
	}
	peerClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: me.PeerConfig(ca.Pool())}}
	for _, tc := range []struct {
		name   string
		issuer *certstest.CA
		want   bool
	}{{"cluster CA, no matching name", ca, true}, {"another CA", other, false}} {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.issuer.IssueFor(t, "r2", []string{"rolter-router-1.peers"}, nil, now.Add(-time.Hour), now.Add(time.Hour))
			src, err := certs.Load(certs.Files{Cert: l.Cert, Key: l.Key})
			if err != nil {
				t.Fatal(err)
			}
			url := serve(t, src, ok)
			_, err = get(peerClient, url)
			if (err == nil) != tc.want {
				t.Fatalf("peer call: %v, want success %v", err, tc.want)
			}
			if _, err := get(client(tc.issuer.Pool(), nil), url); err == nil {
				t.Fatal("a standard client accepted a certificate for another name")
			}
		})
	}
}

// The Raft port's mutual TLS: both ends present their pair and verify the
// other's against the cluster CA, and a renewed pair is what the next
// handshake presents, while an established link stays up.
func TestMutualConfigReloadsWithoutDroppingLinks(t *testing.T) {
	ca, other := certstest.NewCA(t, "cluster"), certstest.NewCA(t, "other")
	load := func(l certstest.Leaf, issuer *certstest.CA) *certs.Source {
		t.Helper()
		s, err := certs.Load(certs.Files{Cert: l.Cert, Key: l.Key, ClientCA: issuer.CertPEM})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	server := load(ca.Valid(t, "r1"), ca)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		tl := tls.NewListener(ln, server.MutualConfig())
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }() // echo
		}
	}()
	dial := func(src *certs.Source) (*tls.Conn, error) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return nil, err
		}
		conf := src.MutualConfig()
		conf.ServerName = "127.0.0.1"
		tc := tls.Client(c, conf)
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			tc.Close()
			return nil, err
		}
		// TLS 1.3: the server checks the client certificate after the
		// client's handshake returns; an echo proves it was accepted.
		if _, err := tc.Write([]byte("x")); err != nil {
			tc.Close()
			return nil, err
		}
		if _, err := io.ReadFull(tc, make([]byte, 1)); err != nil {
			tc.Close()
			return nil, err
		}
		return tc, nil
	}
	peer := load(ca.Valid(t, "r2"), ca)
	first, err := dial(peer)
	if err != nil {
		t.Fatalf("two routers of the cluster CA: %v", err)
	}
	defer first.Close()
	before := first.ConnectionState().PeerCertificates[0].SerialNumber

	renewed := ca.Valid(t, "r1") // in place, as cert-manager does
	if err := server.Reload(); err != nil {
		t.Fatal(err)
	}
	second, err := dial(peer)
	if err != nil {
		t.Fatalf("after the reload: %v", err)
	}
	defer second.Close()
	if got := second.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(renewed.Serial) != 0 || got.Cmp(before) == 0 {
		t.Fatalf("the next handshake presented serial %v; want the renewed %v (was %v)", got, renewed.Serial, before)
	}
	if _, err := first.Write([]byte("y")); err != nil {
		t.Fatalf("the link opened before the reload dropped: %v", err)
	}
	if _, err := io.ReadFull(first, make([]byte, 1)); err != nil {
		t.Fatalf("the link opened before the reload dropped: %v", err)
	}

	if _, err := dial(load(other.Valid(t, "intruder"), ca)); err == nil {
		t.Fatal("a client certificate of another CA was accepted")
	}
	if _, err := dial(load(ca.Valid(t, "r3"), other)); err == nil {
		t.Fatal("a client trusting another CA accepted the server")
	}
}
