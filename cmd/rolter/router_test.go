package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRouterSubcommand starts `rolter router` on the example config with
// ephemeral ports, checks the API and admin endpoints answer, then stops it
// as SIGTERM would.
func TestRouterSubcommand(t *testing.T) {
	example, err := os.ReadFile(filepath.Join("..", "..", "examples", "rolter.toml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "rolter.toml")
	if err := os.WriteFile(cfg, example, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"router", "--standalone", "--config", cfg, "--http", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, outW, io.Discard)
		outW.Close()
	}()
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	urls := regexp.MustCompile(`http://[0-9.:]+`).FindAllString(line, 2)
	if len(urls) != 2 {
		t.Fatalf("startup line %q", line)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(urls[0] + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"llama"`) || !strings.Contains(string(b), `"fleet/*"`) {
		t.Fatalf("/v1/models: %d %s", resp.StatusCode, b)
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := client.Get(urls[1] + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", p, resp.StatusCode)
		}
		if p == "/metrics" && !strings.Contains(string(b), "rolter_config_version 1") {
			t.Fatalf("/metrics lacks rolter_config_version: %s", b)
		}
	}
	stop()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit code %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("router did not stop")
	}
}
