package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// TestRouterRefusesPlaintextRaft: a router reachable from other machines
// without TLS says what is missing and why, and exits 2 before opening
// anything.
func TestRouterRefusesPlaintextRaft(t *testing.T) {
	example := filepath.Join("..", "..", "examples", "rolter.toml")
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"router", "--config", example, "--node-id", "r1",
		"--http", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--raft", "0.0.0.0:0", "--data-dir", t.TempDir()}, io.Discard, &stderr)
	for _, want := range []string{"--tls-cert", "--insecure-dev", "--raft 0.0.0.0:0 is not a loopback address"} {
		if code != 2 || !strings.Contains(stderr.String(), want) {
			t.Fatalf("exit %d, stderr without %q: %s", code, want, stderr.String())
		}
	}
}

// TestSidecarGossipKeyOnlyOffLoopback: a sidecar joining a seed on another
// machine without a gossip key is refused, saying why; on loopback it
// would start (TestFirstRunRouterAndSidecarOnOneHost runs that).
func TestSidecarGossipKeyOnlyOffLoopback(t *testing.T) {
	t.Setenv("ROLTER_GOSSIP_KEY", "")
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"sidecar", "--engine", "http://127.0.0.1:1", "--models", "m",
		"--gossip", "127.0.0.1:0", "--join", "10.0.0.9:7946", "--metrics-addr", ""}, io.Discard, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "--join 10.0.0.9:7946 is not a loopback address") ||
		!strings.Contains(stderr.String(), "--insecure-dev") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}
