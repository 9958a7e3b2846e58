package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/router"
	"github.com/rolter/rolter/sim"
)

// Engine is one simulated engine with the Tap the routers reach it through.
type Engine struct {
	Name string
	URL  string // the engine itself
	Tap  *Tap
	Proc *Proc // nil for an in-process engine
}

// StartSimArgs starts `rolter sim` with extra flags (e.g. --speed) and
// waits until it answers; it returns the engine's base URL and process.
func StartSimArgs(t testing.TB, bin Binary, name, logDir string, extra ...string) (string, *Proc) {
	t.Helper()
	return StartSimAt(t, bin, name, logDir, FreeAddrs(t, 1)[0], extra...)
}

// StartSimAt is StartSimArgs on a given address (a restart in place).
func StartSimAt(t testing.TB, bin Binary, name, logDir, addr string, extra ...string) (string, *Proc) {
	t.Helper()
	p := Start(t, bin, name, logDir, append([]string{"sim", "--http", addr}, extra...)...)
	base := "http://" + addr
	err := Eventually(30*time.Second, 50*time.Millisecond, func() error {
		if p.Exited() {
			return errors.New("exited")
		}
		code, _, err := Do(context.Background(), http.MethodGet, base+"/v1/models", "", "")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("status %d", code)
		}
		return err
	})
	if err != nil {
		t.Fatalf("sim %s: %v\n%s", name, err, p.Tail(2000))
	}
	return base, p
}

// StartInprocSim runs a simulated engine inside the test process on a
// loopback port (speed as `rolter sim --speed`; instant: no modelled delay).
func StartInprocSim(t testing.TB, speed float64, instant bool) string {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Speed, cfg.Engine.Instant = speed, instant
	return serveInprocSim(t, sim.New(cfg, nil, nil, nil))
}

// serveInprocSim runs s on a loopback port until the test ends and
// returns its base URL.
func serveInprocSim(t testing.TB, s *sim.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	loop := make(chan struct{})
	go func() { s.Run(ctx); close(loop) }()
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() {
		_ = hs.Close()
		cancel()
		<-loop
	})
	return "http://" + ln.Addr().String()
}

// FleetTOML is a rolter.toml whose providers e0..eN-1 are the engines'
// taps, with the route "chat" (round robin over all of them) and extra
// appended (sections such as [timeouts] or [limits]).
func FleetTOML(engines []*Engine, extra string) string {
	c := config.Default()
	chat := config.Route{Model: "chat", Strategy: "round_robin"}
	for _, e := range engines {
		c.Providers = append(c.Providers, config.Provider{Name: e.Name, APIBase: e.Tap.URL})
		chat.Targets = append(chat.Targets, config.Target{Provider: e.Name, Model: sim.DefaultModelName})
	}
	c.Routes = []config.Route{chat}
	var b strings.Builder
	// A typed config of providers and one route always encodes.
	_ = config.Encode(&b, &c, "")
	b.WriteString("\n")
	b.WriteString(extra)
	return b.String()
}

// InprocRouter is a router.Server serving on loopback in the test process
// (the data plane alone, as `rolter router --standalone`).
type InprocRouter struct {
	API, Admin string
	Server     *router.Server
}

// StartInprocRouter parses toml and serves it; t.Cleanup drains it.
func StartInprocRouter(t testing.TB, toml string) *InprocRouter {
	t.Helper()
	cfg, err := config.Parse("rolter.toml", []byte(toml), func(string) string { return "" })
	if err != nil {
		t.Fatalf("config: %v\n%s", err, toml)
	}
	srv := router.New(router.Options{Base: cfg, Logger: slog.New(slog.DiscardHandler)})
	if err := srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	api, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, api, admin) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("in-process router did not drain within 10s")
		}
	})
	return &InprocRouter{API: "http://" + api.Addr().String(), Admin: "http://" + admin.Addr().String(), Server: srv}
}
