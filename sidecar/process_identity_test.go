package sidecar

import (
	"strings"
	"testing"

	"github.com/rolter/rolter/certs/certstest"
	"github.com/rolter/rolter/cluster/mesh"
)

// A renewed gossip certificate is taken up by a running sidecar when its
// files are reloaded (SIGHUP or a file change: certs.Watch), and one for
// another role is refused, leaving the running certificate in place.
func TestProcessReloadsGossipIdentity(t *testing.T) {
	ca := certstest.NewCA(t, "gossip")
	first := ca.Member(t, "gpu-1", mesh.RoleURI(mesh.RoleSidecar))
	p, err := Open(t.Context(), ProcessConfig{
		Sidecar:     Config{NodeID: "gpu-1", Engine: "http://127.0.0.1:1", MetricsAddr: "127.0.0.1:0"},
		Gossip:      mesh.Addrs{Bind: "127.0.0.1:0", CertFile: first.Cert, CertKeyFile: first.Key, CAFile: ca.CertPEM},
		InsecureDev: true, Models: "m",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	src := p.GossipCerts()
	if src == nil || p.node.Certificate().SerialNumber.Cmp(first.Serial) != 0 {
		t.Fatal("the sidecar does not run its --gossip-tls-cert")
	}
	wrongRole := ca.Member(t, "gpu-1", mesh.RoleURI(mesh.RoleRouter)) // overwrites gpu-1.crt and .key
	if err := src.Reload(); err == nil || !strings.Contains(err.Error(), "grants the role router") {
		t.Fatalf("a router certificate reloaded into a sidecar: %v", err)
	}
	if p.node.Certificate().SerialNumber.Cmp(first.Serial) != 0 || src.Leaf().SerialNumber.Cmp(wrongRole.Serial) == 0 {
		t.Fatal("a refused certificate replaced the running one")
	}
	renewed := ca.Member(t, "gpu-1", mesh.RoleURI(mesh.RoleSidecar))
	if err := src.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := p.node.Certificate().SerialNumber; got.Cmp(renewed.Serial) != 0 {
		t.Fatalf("after the reload the member signs with serial %v, want the renewed %v", got, renewed.Serial)
	}
}
