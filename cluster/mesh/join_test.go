package mesh

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/certs/certstest"
)

func TestAddrsConfig(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte("MDEyMzQ1Njc4OWFiY2RlZg==\n"), 0o600); err != nil { // 16 bytes
		t.Fatal(err)
	}
	noenv := func(string) string { return "" }
	ca, otherCA := certstest.NewCA(t, "gossip"), certstest.NewCA(t, "other")
	n1, other, noRole := ca.Member(t, "n1", "rolter:router"), ca.Member(t, "n2", "rolter:router"), ca.Member(t, "n3", "")
	for _, tc := range []struct {
		name      string
		g         Addrs
		insecure  bool
		getenv    func(string) string
		wantError string
		check     func(t *testing.T, c Config)
	}{
		{name: "key from file", g: Addrs{Bind: "127.0.0.1:7946", KeyFile: keyFile}, getenv: noenv,
			check: func(t *testing.T, c Config) {
				if len(c.Key) != 16 || c.BindAddr != "127.0.0.1" || c.BindPort != 7946 || c.InsecureDev {
					t.Fatalf("%+v", c)
				}
			}},
		{name: "key from env", g: Addrs{Bind: "0.0.0.0:7946", Advertise: "10.0.0.5:7000"},
			getenv: func(k string) string {
				if k == KeyEnv {
					return "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=" // 32 bytes
				}
				return ""
			},
			check: func(t *testing.T, c Config) {
				if len(c.Key) != 32 || c.AdvertiseAddr != "10.0.0.5" || c.AdvertisePort != 7000 {
					t.Fatalf("%+v", c)
				}
			}},
		{name: "no key refused", g: Addrs{Bind: "127.0.0.1:7946"}, getenv: noenv, wantError: "--insecure-dev"},
		{name: "no key with insecure-dev", g: Addrs{Bind: "127.0.0.1:0"}, insecure: true, getenv: noenv,
			check: func(t *testing.T, c Config) {
				if !c.InsecureDev || c.Key != nil {
					t.Fatalf("%+v", c)
				}
			}},
		{name: "bad key", g: Addrs{Bind: "127.0.0.1:7946"}, insecure: true,
			getenv: func(string) string { return "not base64!" }, wantError: "base64"},
		{name: "identity", g: Addrs{Bind: "127.0.0.1:7946", CertFile: n1.Cert, CertKeyFile: n1.Key, CAFile: ca.CertPEM},
			insecure: true, getenv: noenv,
			check: func(t *testing.T, c Config) {
				if c.Identity == nil || c.Identity.Name() != "n1" {
					t.Fatalf("identity %+v", c.Identity)
				}
			}},
		{name: "identity of another node id", g: Addrs{Bind: "127.0.0.1:7946", CertFile: other.Cert, CertKeyFile: other.Key,
			CAFile: ca.CertPEM}, insecure: true, getenv: noenv, wantError: `issued to "n2"`},
		{name: "identity without a role", g: Addrs{Bind: "127.0.0.1:7946", CertFile: noRole.Cert, CertKeyFile: noRole.Key,
			CAFile: ca.CertPEM}, insecure: true, getenv: noenv, wantError: "names no role: issue it with exactly one URI SAN, rolter:router or rolter:sidecar"},
		{name: "identity without its CA", g: Addrs{Bind: "127.0.0.1:7946", CertFile: n1.Cert, CertKeyFile: n1.Key},
			insecure: true, getenv: noenv, wantError: "go together"},
		{name: "identity from another CA", g: Addrs{Bind: "127.0.0.1:7946", CertFile: n1.Cert, CertKeyFile: n1.Key,
			CAFile: otherCA.CertPEM}, insecure: true, getenv: noenv, wantError: "certificate signed by unknown authority"},
		{name: "bad address", g: Addrs{Bind: "7946"}, insecure: true, getenv: noenv, wantError: "--gossip"},
		{name: "bad advertise", g: Addrs{Bind: "127.0.0.1:1", Advertise: "x:y"}, insecure: true, getenv: noenv,
			wantError: "--gossip-advertise"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.g.Config("n1", Meta{}, tc.insecure, tc.getenv, slog.New(slog.DiscardHandler))
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) {
					t.Fatalf("err %v, want one mentioning %q", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

// A sidecar started before its seed (the router) is up joins later; if
// the router turns out to have its node id, the sidecar is stopped with
// the conflict instead of running on, ignored by the pool.
func TestLateJoinWithATakenNodeIDStops(t *testing.T) {
	addr := loopbackAddr(t)
	host, port, _ := splitHostPort(addr)
	ctx, stop := context.WithCancelCause(t.Context())
	defer stop(nil)
	log := slog.New(slog.DiscardHandler)
	joiner, err := StartJoining(ctx, StartSidecar, Config{Name: "host-1", Meta: Meta{EngineURL: "http://127.0.0.1:8000"},
		BindAddr: "127.0.0.1", InsecureDev: true, Timing: FastTiming}, []string{addr}, log, stop)
	if err != nil {
		t.Fatalf("a sidecar whose seed is not up yet must start alone: %v", err)
	}
	defer joiner.Close()
	incumbent, err := StartRouter(t.Context(), Config{Name: "host-1",
		BindAddr: host, BindPort: port, InsecureDev: true, Timing: FastTiming}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer incumbent.Close()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the late joiner kept running with a taken node id")
	}
	if cause := context.Cause(ctx); !errors.Is(cause, ErrNameConflict) || !strings.Contains(cause.Error(), addr) {
		t.Fatalf("stopped by %v, want the name conflict naming %s", cause, addr)
	}
}

func loopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// A seed that does not answer is reported in one line (memberlist lists
// one error per seed, indented over several lines).
func TestJoinErrorIsOneLine(t *testing.T) {
	tr, err := NewLoopbackTransport(80)
	if err != nil {
		t.Fatal(err)
	}
	dead := loopbackAddr(t)
	_, err = StartSidecar(t.Context(), Config{Name: "s", InsecureDev: true, Transport: tr, Timing: FastTiming,
		Meta: Meta{EngineURL: EngineURL(0)}}, []string{dead})
	if err == nil {
		t.Fatal("joined a seed nobody listens on")
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "mesh: join ["+dead+"]: failed to join "+dead) {
		t.Fatalf("join error %q", msg)
	}
}

// A gossip port another process holds is refused at start with a message
// that says so and names the flag, instead of memberlist's nested text.
func TestGossipAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	host, port, _ := splitHostPort(ln.Addr().String())
	_, err = StartSidecar(t.Context(), Config{Name: "s", InsecureDev: true, BindAddr: host, BindPort: port,
		Timing: FastTiming, Meta: Meta{EngineURL: EngineURL(0)}}, nil)
	if !errors.Is(err, ErrGossipAddrInUse) || !strings.Contains(err.Error(), ln.Addr().String()+" is in use by another process") ||
		!strings.Contains(err.Error(), "--gossip port each") {
		t.Fatalf("err = %v", err)
	}
}
