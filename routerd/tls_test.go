package routerd

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rolter/rolter/certs"
	"github.com/rolter/rolter/certs/certstest"
)

// With admin TLS, a router calls the other routers' admin ports over
// https, verifying them with the cluster CA and presenting its own admin
// certificate, which a peer requiring client certificates accepts.
func TestPeerClientUsesTLS(t *testing.T) {
	ca := certstest.NewCA(t, "cluster")
	self, peer := ca.Valid(t, "r1-admin"), ca.Valid(t, "r2-admin")
	admin, err := certs.Load(certs.Files{Cert: self.Cert, Key: self.Key, ClientCA: ca.CertPEM})
	if err != nil {
		t.Fatal(err)
	}
	src := TLS{Admin: admin, AdminClientCA: ca.CertPEM}
	peerAdmin, err := certs.Load(certs.Files{Cert: peer.Cert, Key: peer.Key, ClientCA: ca.CertPEM})
	if err != nil {
		t.Fatal(err)
	}
	callers := make(chan string, 4)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		callers <- r.TLS.PeerCertificates[0].Subject.CommonName
	}))
	srv.TLS = peerAdmin.ServerConfig()
	srv.StartTLS()
	defer srv.Close()

	peers := tlsPeers([]string{strings.Replace(srv.URL, "https://", "http://", 1)}, src.Admin)
	if !strings.HasPrefix(peers[0], "https://") {
		t.Fatalf("peer URL %q not upgraded to https", peers[0])
	}
	c, err := src.peerClient(peerCA("", ca.CertPEM))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Post(peers[0]+"/internal/adaptive-telemetry", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("router-to-router call over TLS: %v", err)
	}
	resp.Body.Close()
	if caller := <-callers; caller != "r1-admin" {
		t.Fatalf("the peer saw client certificate %q, want r1-admin", caller)
	}
	other := certstest.NewCA(t, "other")
	c, _ = src.peerClient(other.CertPEM)
	if resp, err := c.Get(peers[0]); err == nil {
		resp.Body.Close()
		t.Fatal("a peer whose certificate the CA did not sign was trusted")
	}
}
