package cluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rolter/rolter/cluster/raftstore"
	"github.com/rolter/rolter/internal/testwait"
)

// testTLS returns a mutual-TLS config for 127.0.0.1 signed by a fresh CA.
func testTLS(t *testing.T) *tls.Config {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rolter test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "router"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		RootCAs: pool, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}
}

// TestTLSClusterJoinsAndForwards runs two routers over real TCP on
// loopback with mutual TLS: the first bootstraps alone with bolt under a
// temp dir, the second joins through --join, and a write on the second is
// forwarded to the first.
func TestTLSClusterJoinsAndForwards(t *testing.T) {
	conf := testTLS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	base := StoreConfig{RaftAddr: "127.0.0.1:0", TLS: conf, InternalToken: testInternal, SuperadminToken: testSuperadmin,
		Seed: seedConfig(), ReconcileInterval: 50 * time.Millisecond}
	fastRaft(&base)
	c1 := base
	c1.NodeID, c1.DataDir = "r1", t.TempDir()
	s1, err := Open(ctx, c1)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	testwait.For(t, 10*time.Second, "r1 leads and is seeded", func() bool { return s1.IsLeader() && s1.State().Seeded })

	c2 := base
	c2.NodeID, c2.DataDir = "r2", t.TempDir()
	c2.Peers = StaticPeers{{ID: "r1", Addr: s1.RaftAddr(), Alive: true}}
	s2, err := Open(ctx, c2)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	testwait.For(t, 10*time.Second, "r2 joined and replicated", func() bool { return s2.State().Seeded && len(s2.Info().Servers) == 2 })

	res := mustApply(t, s2, providerCmd("via-r2", testSuperadmin))
	if res.GetCode() != raftstore.Code_CODE_OK {
		t.Fatalf("forwarded write: %v %s", res.GetCode(), res.GetMessage())
	}
	if _, ok := s1.State().Providers["via-r2"]; !ok {
		t.Error("leader lacks the forwarded write")
	}
	if _, ok := s2.State().Providers["via-r2"]; !ok {
		t.Error("follower does not read its own write")
	}
	reg := prometheus.NewRegistry()
	if err := s2.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "rolter_config_version" ||
		mfs[0].GetMetric()[0].GetGauge().GetValue() != float64(res.GetConfigVersion()) {
		t.Errorf("rolter_config_version: %v %v, want %d", mfs, err, res.GetConfigVersion())
	}

	// A plaintext client (no certificate) cannot talk to the raft port.
	m, err := newMuxLayer("127.0.0.1:0", nil, nil, discard())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	_, err = m.Forward(ctx, s1.RaftAddr(), &raftstore.ForwardRequest{Kind: raftstore.RPCKind_RPC_JOIN, NodeId: "intruder", RaftAddr: "127.0.0.1:1"})
	if err == nil {
		t.Fatal("plaintext forward to a TLS raft port succeeded")
	}
}
