package routerd

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rolter/rolter/cluster/mesh"
)

func TestParseJoin(t *testing.T) {
	for _, tc := range []struct {
		name, in  string
		raft      []string // id=addr
		seeds     []string
		wantError string
	}{
		{name: "empty", in: ""},
		{name: "raft peers", in: "r1=127.0.0.1:7947, r2=10.0.0.2:7947,", raft: []string{"r1=127.0.0.1:7947", "r2=10.0.0.2:7947"}},
		{name: "gossip seeds kept apart", in: "r1=127.0.0.1:7947,peers.svc:7946", raft: []string{"r1=127.0.0.1:7947"}, seeds: []string{"peers.svc:7946"}},
		{name: "raft peer without port", in: "r1=127.0.0.1", wantError: "r1=127.0.0.1"},
		{name: "peer without id", in: "=127.0.0.1:7947", wantError: "want id=host:port"},
		{name: "garbage", in: "nonsense", wantError: "nonsense"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseJoin(tc.in)
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) {
					t.Fatalf("err %v, want one naming %q", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var raft []string
			for _, p := range got.raft {
				raft = append(raft, p.ID+"="+p.Addr)
			}
			if strings.Join(raft, ",") != strings.Join(tc.raft, ",") || strings.Join(got.seeds, ",") != strings.Join(tc.seeds, ",") {
				t.Fatalf("raft %v seeds %v, want %v %v", raft, got.seeds, tc.raft, tc.seeds)
			}
		})
	}
}

func TestParsePeerAdmin(t *testing.T) {
	got, err := parsePeerAdmin("127.0.0.1:4001, http://10.0.0.2:4001/,https://r3.example:443")
	if err != nil {
		t.Fatal(err)
	}
	want := "http://127.0.0.1:4001 http://10.0.0.2:4001 https://r3.example:443"
	if strings.Join(got, " ") != want {
		t.Fatalf("got %v, want %s", got, want)
	}
	if _, err := parsePeerAdmin("http://no-port"); err == nil {
		t.Fatal("an address without a port was accepted")
	}
}

// TestStoreConfigFlags: the control-plane flags resolve to a usable store
// config, or to a message that says what to do.
func TestStoreConfigFlags(t *testing.T) {
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "tok")
	if err := os.WriteFile(tokFile, []byte("  file-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"ROLTER_ADMIN_TOKEN": "env-admin", "ROLTER_INTERNAL_TOKEN": "env-internal", "ROLTER_NODE_ID": "env-node"}
	getenv := func(k string) string { return env[k] }
	noenv := func(string) string { return "" }
	base := Config{RaftAddr: "127.0.0.1:7947", InsecureDev: true}
	for _, tc := range []struct {
		name      string
		edit      func(*Config)
		getenv    func(string) string
		wantError string
		check     func(t *testing.T, f Config)
	}{
		{name: "env supplies node id and tokens", getenv: getenv, check: func(t *testing.T, f Config) {
			sc, _ := f.storeConfig(getenv, slog.New(slog.DiscardHandler))
			if sc.NodeID != "env-node" || sc.SuperadminToken != "env-admin" || sc.InternalToken != "env-internal" {
				t.Fatalf("%+v", sc)
			}
			if sc.DataDir != filepath.Join("rolter-data", "env-node") {
				t.Fatalf("default data dir %q", sc.DataDir)
			}
		}},
		{name: "files win over env", getenv: getenv, edit: func(f *Config) {
			f.NodeID, f.AdminTokenFile, f.InternalTokenFile, f.DataDir = "r9", tokFile, tokFile, "/tmp/x"
		}, check: func(t *testing.T, f Config) {
			sc, _ := f.storeConfig(getenv, slog.New(slog.DiscardHandler))
			if sc.NodeID != "r9" || sc.SuperadminToken != "file-token" || sc.InternalToken != "file-token" || sc.DataDir != "/tmp/x" {
				t.Fatalf("%+v", sc)
			}
		}},
		{name: "plaintext raft refused without --insecure-dev", getenv: getenv, edit: func(f *Config) {
			f.InsecureDev, f.RaftAddr = false, "0.0.0.0:7947"
		},
			wantError: "--insecure-dev"},
		{name: "partial TLS refused", getenv: getenv, edit: func(f *Config) { f.RaftCert = "c.pem" },
			wantError: "go together"},
		{name: "cluster without internal token refused", getenv: noenv, edit: func(f *Config) {
			f.NodeID, f.Join = "r1", "r2=127.0.0.1:7948"
		}, wantError: "ROLTER_INTERNAL_TOKEN"},
		{name: "bootstrap-expect without internal token refused", getenv: noenv, edit: func(f *Config) {
			f.NodeID, f.BootstrapExpect = "r1", 3
		}, wantError: "same internal token"},
		{name: "single router generates an internal token and says so", getenv: noenv, edit: func(f *Config) { f.NodeID = "r1" },
			check: func(t *testing.T, f Config) {
				var buf bytes.Buffer
				sc, err := f.storeConfig(noenv, slog.New(slog.NewTextHandler(&buf, nil)))
				if err != nil || len(sc.InternalToken) != 64 {
					t.Fatalf("%v %q", err, sc.InternalToken)
				}
				if !strings.Contains(buf.String(), "generated a random one") || strings.Contains(buf.String(), sc.InternalToken) {
					t.Fatalf("log: %s", buf.String())
				}
				if !strings.Contains(buf.String(), "no bootstrap superadmin token") {
					t.Fatalf("missing superadmin warning: %s", buf.String())
				}
			}},
		{name: "gossip seeds refused without --gossip", getenv: getenv, edit: func(f *Config) { f.Join = "peers:7946" },
			wantError: "need --gossip"},
		{name: "empty token file refused", getenv: getenv, edit: func(f *Config) {
			empty := filepath.Join(dir, "empty")
			_ = os.WriteFile(empty, nil, 0o600)
			f.AdminTokenFile = empty
		}, wantError: "is empty"},
		{name: "tiny raft timeout refused", getenv: getenv, edit: func(f *Config) { f.RaftTimeout = 1 },
			wantError: "--raft-timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := base
			if tc.edit != nil {
				tc.edit(&f)
			}
			_, err := f.storeConfig(tc.getenv, slog.New(slog.DiscardHandler))
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) {
					t.Fatalf("err %v, want one mentioning %q", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, f)
		})
	}
}

// TestLoopbackNeedsNoTLS: one router alone on loopback starts plaintext
// with a warning; anything reachable from elsewhere, or any peer, needs TLS
// or --insecure-dev, and the error says which flag made it so.
func TestLoopbackNeedsNoTLS(t *testing.T) {
	noenv := func(string) string { return "" }
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // "" = starts plaintext with a warning
	}{
		{name: "alone on 127.0.0.1", edit: func(*Config) {}},
		{name: "alone on localhost with gossip", edit: func(f *Config) { f.RaftAddr, f.Gossip.Bind = "localhost:7947", "127.0.0.1:7946" }},
		{name: "alone on ::1", edit: func(f *Config) { f.RaftAddr = "[::1]:7947" }},
		{name: "raft on every interface", edit: func(f *Config) { f.RaftAddr = "0.0.0.0:7947" }, want: "--raft 0.0.0.0:7947"},
		{name: "raft advertised elsewhere", edit: func(f *Config) { f.RaftAdvertise = "10.0.0.5:7947" }, want: "--raft-advertise 10.0.0.5:7947"},
		{name: "gossip on every interface", edit: func(f *Config) { f.Gossip.Bind = ":7946" }, want: "--gossip :7946"},
		{name: "gossip advertised elsewhere", edit: func(f *Config) {
			f.Gossip.Bind, f.Gossip.Advertise = "127.0.0.1:7946", "10.0.0.5:7946"
		}, want: "--gossip-advertise"},
		{name: "raft peers", edit: func(f *Config) { f.Join = "r2=127.0.0.1:7957" }, want: "joins Raft peers"},
		{name: "gossip seeds", edit: func(f *Config) { f.Gossip.Bind, f.Join = "127.0.0.1:7946", "127.0.0.1:7956" }, want: "joins a gossip pool"},
		{name: "expects more routers", edit: func(f *Config) { f.BootstrapExpect = 3 }, want: "--bootstrap-expect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := Config{NodeID: "r1", RaftAddr: "127.0.0.1:7947", DataDir: t.TempDir(), InternalTokenFile: writeToken(t)}
			tc.edit(&f)
			var log bytes.Buffer
			sc, err := f.storeConfig(noenv, slog.New(slog.NewTextHandler(&log, nil)))
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--tls-cert") {
					t.Fatalf("err %v, want TLS required because of %q", err, tc.want)
				}
				f.InsecureDev = true
				if _, err := f.storeConfig(noenv, slog.New(slog.DiscardHandler)); err != nil {
					t.Fatalf("--insecure-dev still refused: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("a lone loopback router was refused: %v", err)
			}
			if !sc.InsecureDev || sc.TLS != nil || !strings.Contains(log.String(), "plaintext Raft and gossip") {
				t.Fatalf("insecure %v, tls %v, log %s", sc.InsecureDev, sc.TLS != nil, log.String())
			}
		})
	}
}

func writeToken(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "internal-token")
	if err := os.WriteFile(p, []byte("shared-internal-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDefaultNodeIDsDoNotCollide: a router and a sidecar on one host with
// no --node-id get different ids; a router keeps its defaulted id in its
// data dir, and a data dir made under the old hostname default keeps it.
func TestDefaultNodeIDsDoNotCollide(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatalf("no hostname: %v", err)
	}
	noenv := func(string) string { return "" }
	log := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	f := Config{RaftAddr: "127.0.0.1:7947", DataDir: dir}
	sc, err := f.storeConfig(noenv, log)
	if err != nil {
		t.Fatal(err)
	}
	side, err := mesh.DefaultNodeID("sidecar", "127.0.0.1:7946")
	if err != nil {
		t.Fatal(err)
	}
	if sc.NodeID != host+"-router-7947" || side != host+"-sidecar-7946" || sc.NodeID == side {
		t.Fatalf("router %q, sidecar %q", sc.NodeID, side)
	}
	// Restarted on another port, the router keeps the id of its data dir.
	f.RaftAddr = "127.0.0.1:9947"
	if sc, err = f.storeConfig(noenv, log); err != nil || sc.NodeID != host+"-router-7947" {
		t.Fatalf("after a port change: %q, %v", sc.NodeID, err)
	}
	// A data dir from before the rule (a Raft log, no node-id file).
	old := t.TempDir()
	if err := os.WriteFile(filepath.Join(old, "raft.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f.DataDir = old
	if sc, err = f.storeConfig(noenv, log); err != nil || sc.NodeID != host {
		t.Fatalf("old data dir: %q, %v", sc.NodeID, err)
	}
	// --node-id and ROLTER_NODE_ID still win.
	env := func(k string) string { return map[string]string{"ROLTER_NODE_ID": "from-env"}[k] }
	f.DataDir = t.TempDir()
	if sc, _ = f.storeConfig(env, log); sc.NodeID != "from-env" {
		t.Fatalf("env id: %q", sc.NodeID)
	}
	f.NodeID = "from-flag"
	if sc, _ = f.storeConfig(env, log); sc.NodeID != "from-flag" {
		t.Fatalf("flag id: %q", sc.NodeID)
	}
}
