package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/internal/testwait"
)

// Engine is one simulated engine with the Tap the routers reach it through.
type Engine struct {
	Name string
	URL  string // the engine itself
	Tap  *Tap
	Proc *Proc
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
	err := testwait.Poll(30*time.Second, 50*time.Millisecond, func() error {
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

// FleetTOML is a rolter.toml whose providers e0..eN-1 are the engines'
// taps, with the route "chat" (round robin over all of them) and extra
// appended (sections such as [timeouts] or [limits]).
func FleetTOML(engines []*Engine, extra string) string {
	c := config.Default()
	chat := config.Route{Model: "chat", Strategy: "round_robin"}
	for _, e := range engines {
		c.Providers = append(c.Providers, config.Provider{Name: e.Name, APIBase: e.Tap.URL})
		chat.Targets = append(chat.Targets, config.Target{Provider: e.Name, Model: SimModel})
	}
	c.Routes = []config.Route{chat}
	var b strings.Builder
	// A typed config of providers and one route always encodes.
	_ = config.Encode(&b, &c, "")
	b.WriteString("\n")
	b.WriteString(extra)
	return b.String()
}

// Standalone is a `rolter router --standalone` process (the data plane
// alone) serving a rolter.toml.
type Standalone struct {
	API, Admin string
	Proc       *Proc
}

// StartStandalone writes toml into dir and starts `rolter router
// --standalone` on it; it returns once /readyz answers 200.
func StartStandalone(t testing.TB, bin Binary, dir, name, toml string) *Standalone {
	t.Helper()
	path := filepath.Join(dir, name+".toml")
	if err := os.WriteFile(path, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	a := FreeAddrs(t, 2)
	p := Start(t, bin, name, dir, "router", "--standalone", "--config", path, "--http", a[0], "--admin", a[1])
	r := &Standalone{API: "http://" + a[0], Admin: "http://" + a[1], Proc: p}
	err := testwait.Poll(30*time.Second, 20*time.Millisecond, func() error {
		if p.Exited() {
			return errors.New("exited")
		}
		code, body, err := Do(context.Background(), http.MethodGet, r.Admin+"/readyz", "", "")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("readyz %d: %s", code, body)
		}
		return err
	})
	if err != nil {
		t.Fatalf("router %s: %v\n%s", name, err, p.Tail(2000))
	}
	return r
}
