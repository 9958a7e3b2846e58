package routerd

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/internal/testwait"
)

const standaloneTOML = `
[[providers]]
name = "up"
api_base = "%s"

[[routes]]
model = "%s"
strategy = "round_robin"
targets = [{ provider = "up", model = "m" }]

[health]
enabled = false
`

// syncBuffer is a log sink safe for the router's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestStandaloneReload: a standalone router serves its file; a reloaded
// file that does not build leaves the running routes serving (and says
// so in the log); one that builds replaces them.
func TestStandaloneReload(t *testing.T) {
	up := newUpstream(t)
	parse := func(model string) *config.Config {
		t.Helper()
		c, err := config.Parse("rolter.toml", []byte(fmt.Sprintf(standaloneTOML, up.URL, model)), func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var log syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	r, err := Open(ctx, Config{Standalone: true, File: parse("first"), ConfigPath: "rolter.toml", HTTPAddr: "127.0.0.1:0",
		AdminAddr: "127.0.0.1:0", NodeID: "s1", Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if b := r.Banner(); !strings.HasPrefix(b, "rolter router (standalone): API on http://127.0.0.1:") {
		t.Fatalf("banner %q", b)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	api := "http://" + r.api.Addr().String()
	serves := func(model string) error {
		code, out, err := call(http.MethodPost, api+"/v1/chat/completions", "", chatBody(model))
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%s: %d %s", model, code, out)
		}
		return err
	}
	testwait.For(t, 5*time.Second, "first route served", func() error { return serves("first") })

	broken := parse("broken")
	broken.Routes[0].Strategy = "no_such_strategy"
	r.Reload(broken)
	if err := serves("first"); err != nil {
		t.Fatalf("a reload that does not build replaced the running config: %v", err)
	}
	if !strings.Contains(log.String(), "config reload failed; keeping the running config") || !strings.Contains(log.String(), "path=rolter.toml") {
		t.Fatalf("log: %s", log.String())
	}

	r.Reload(parse("second"))
	if err := serves("second"); err != nil {
		t.Fatal(err)
	}
	if code, _, err := call(http.MethodPost, api+"/v1/chat/completions", "", chatBody("first")); err != nil || code != http.StatusNotFound {
		t.Fatalf("the replaced route: %d %v, want 404", code, err)
	}
}
