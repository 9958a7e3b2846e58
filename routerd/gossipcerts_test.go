package routerd

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rolter/rolter/certs/certstest"
	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/config"
)

// A router's renewed gossip certificate is taken up when its files are
// reloaded (the command does so on SIGHUP and when they change), and a
// sidecar's certificate is refused, leaving the running one in place.
func TestRouterReloadsGossipIdentity(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "gossip")
	first := ca.Member(t, "r1", mesh.RoleURI(mesh.RoleRouter))
	file, err := config.Load(filepath.Join("..", "examples", "rolter.toml"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	rt, err := Open(ctx, Config{File: file, NodeID: "r1", HTTPAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0",
		RaftAddr: "127.0.0.1:0", DataDir: filepath.Join(dir, "data"), InsecureDev: true,
		Gossip: mesh.Addrs{Bind: "127.0.0.1:0", CertFile: first.Cert, CertKeyFile: first.Key, CAFile: ca.CertPEM},
		Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	src := rt.GossipCerts()
	if src == nil || rt.node.Certificate().SerialNumber.Cmp(first.Serial) != 0 {
		t.Fatal("the router does not run its --gossip-tls-cert")
	}
	ca.Member(t, "r1", mesh.RoleURI(mesh.RoleSidecar)) // overwrites r1.crt and r1.key
	if err := src.Reload(); err == nil || !strings.Contains(err.Error(), "grants the role sidecar") {
		t.Fatalf("a sidecar certificate reloaded into a router: %v", err)
	}
	if rt.node.Certificate().SerialNumber.Cmp(first.Serial) != 0 {
		t.Fatal("a refused certificate replaced the running one")
	}
	renewed := ca.Member(t, "r1", mesh.RoleURI(mesh.RoleRouter))
	if err := src.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := rt.node.Certificate().SerialNumber; got.Cmp(renewed.Serial) != 0 {
		t.Fatalf("after the reload the router signs with serial %v, want the renewed %v", got, renewed.Serial)
	}
}
