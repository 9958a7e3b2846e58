package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rolter/rolter/certs/certstest"
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

// TestUnusableSettingsExit2: every setting the router or sidecar process
// refuses is a usage error (exit 2) whose message names the flag, however
// deep in the process package it was found; a port that is taken is not
// (exit 1).
func TestUnusableSettingsExit2(t *testing.T) {
	example := filepath.Join("..", "..", "examples", "rolter.toml")
	router := func(extra ...string) []string {
		return append([]string{"router", "--config", example, "--node-id", "r1", "--http", "127.0.0.1:0",
			"--admin", "127.0.0.1:0", "--raft", "127.0.0.1:0", "--data-dir", t.TempDir()}, extra...)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	gossipCA := certstest.NewCA(t, "gossip")
	routerCert := gossipCA.Member(t, "gpu-1", "rolter:router")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"bad gossip address", router("--gossip", "7946", "--insecure-dev"), 2, "usage: bad gossip flags: --gossip \"7946\""},
		{"bad peer admin", router("--peer-admin", "no-port"), 2, "usage: --peer-admin \"no-port\""},
		{"gossip seeds without gossip", router("--join", "127.0.0.1:7946"), 2, "usage: bad control-plane flags: --join 127.0.0.1:7946 names gossip seeds"},
		{"sidecar without an engine", []string{"sidecar", "--engine", "", "--models", "m", "--gossip", "127.0.0.1:0",
			"--metrics-addr", ""}, 2, "usage: --engine or --engine-advertise is required"},
		{"API port taken", router("--http", busy.Addr().String()), 1, "--http: listen tcp " + busy.Addr().String()},
		{"sidecar with a router's gossip certificate", []string{"sidecar", "--engine", "http://127.0.0.1:1", "--models", "m",
			"--node-id", "gpu-1", "--gossip", "127.0.0.1:0", "--metrics-addr", "", "--gossip-tls-cert", routerCert.Cert,
			"--gossip-tls-key", routerCert.Key, "--gossip-tls-ca", gossipCA.CertPEM}, 2, "grants the role router (URI SAN rolter:router), not sidecar"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code := run(context.Background(), tc.args, io.Discard, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d (want %d), stderr without %q: %s", code, tc.code, tc.want, stderr.String())
			}
		})
	}
}

// TestBadFlagIsOneLine: a mistyped flag is reported in one line that says
// how to list the flags, not buried under the whole list; -h prints the
// list and exits 0, and `rolter --help` writes to stdout.
func TestBadFlagIsOneLine(t *testing.T) {
	for _, args := range [][]string{{"router", "--htpp", ":4000"}, {"sidecar", "--bogus"}, {"sim", "replay", "--x"}} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, &stdout, &stderr)
		got := stderr.String()
		if code != 2 || strings.Count(got, "\n") != 1 || !strings.Contains(got, "flag provided but not defined") ||
			!strings.Contains(got, "-h' lists the flags") {
			t.Errorf("%v: exit %d, stderr:\n%s", args, code, got)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"router", "-h"}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stderr.String(), "-raft-timeout duration") {
		t.Errorf("router -h: exit %d, stderr:\n%s", code, stderr.String())
	}
	stdout.Reset()
	if code := run(context.Background(), []string{"--help"}, &stdout, io.Discard); code != 0 ||
		!strings.Contains(stdout.String(), "bench fleet") {
		t.Errorf("--help: exit %d, stdout:\n%s", code, stdout.String())
	}
}
