package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rolter/rolter/certs/certstest"
)

func tlsClient(roots *x509.CertPool, cert *certstest.Leaf) (*http.Client, error) {
	c := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert != nil {
		pair, err := tls.LoadX509KeyPair(cert.Cert, cert.Key)
		if err != nil {
			return nil, err
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: c}}, nil
}

// TestRouterTLSAndSIGHUPReload runs `rolter router --standalone` with TLS
// on both listeners and client certificates required on admin, then
// renews the API certificate and sends SIGHUP while a stream is open: new
// connections get the new certificate and the stream ends with [DONE].
func TestRouterTLSAndSIGHUPReload(t *testing.T) {
	// Hold SIGHUP for the whole test so the signal cannot kill the test
	// process before the router's handler is installed.
	guard := make(chan os.Signal, 1)
	signal.Notify(guard, syscall.SIGHUP)
	defer signal.Stop(guard)

	release := make(chan struct{})
	eng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "data: {\"n\":2}\n\ndata: [DONE]\n\n")
	}))
	defer eng.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "rolter.toml")
	toml := fmt.Sprintf("[[providers]]\nname = \"e\"\napi_base = %q\n\n[[routes]]\nmodel = \"m\"\ntargets = [{provider = \"e\"}]\n\n[health]\nenabled = false\n", eng.URL)
	if err := os.WriteFile(cfg, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := certstest.NewCA(t, "cluster")
	apiLeaf, adminLeaf, operator := ca.Valid(t, "api"), ca.Valid(t, "admin"), ca.Valid(t, "operator")

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"router", "--standalone", "--config", cfg, "--http", "127.0.0.1:0", "--admin", "127.0.0.1:0",
			"--api-tls-cert", apiLeaf.Cert, "--api-tls-key", apiLeaf.Key,
			"--admin-tls-cert", adminLeaf.Cert, "--admin-tls-key", adminLeaf.Key, "--admin-client-ca", ca.CertPEM}, outW, io.Discard)
		outW.Close()
	}()
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	urls := regexp.MustCompile(`https://[0-9.:]+`).FindAllString(line, 2)
	if len(urls) != 2 {
		t.Fatalf("startup line %q: want two https URLs", line)
	}
	api, admin := urls[0], urls[1]

	anon, _ := tlsClient(ca.Pool(), nil)
	withCert, err := tlsClient(ca.Pool(), &operator)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := anon.Get(admin + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("admin answered %d without a client certificate", resp.StatusCode)
	}
	resp, err := withCert.Get(admin + "/healthz")
	if err != nil {
		t.Fatalf("admin with a client certificate: %v", err)
	}
	resp.Body.Close()
	if plain, err := http.Get(strings.Replace(api, "https://", "http://", 1) + "/v1/models"); err == nil {
		plain.Body.Close()
		if plain.StatusCode == http.StatusOK {
			t.Fatal("the TLS API answered a plaintext request")
		}
	}

	stream, err := anon.Post(api+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	br := bufio.NewReader(stream.Body)
	if l, err := br.ReadString('\n'); err != nil || !strings.Contains(l, `"n":1`) {
		t.Fatalf("first event %q %v", l, err)
	}
	if got := stream.TLS.PeerCertificates[0].SerialNumber; got.Cmp(apiLeaf.Serial) != 0 {
		t.Fatalf("stream on serial %v, want %v", got, apiLeaf.Serial)
	}

	renewed := ca.Valid(t, "api") // same files, new certificate
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		fresh, _ := tlsClient(ca.Pool(), nil) // a new connection each time
		resp, err := fresh.Get(api + "/v1/models")
		if err == nil {
			resp.Body.Close()
			if resp.TLS.PeerCertificates[0].SerialNumber.Cmp(renewed.Serial) == 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("new connections still get the old certificate 10s after SIGHUP (last error %v)", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(release)
	rest, err := io.ReadAll(br)
	if err != nil || !strings.Contains(string(rest), `"n":2`) || !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("the stream opened before the reload: %q %v, want it to end with [DONE]", rest, err)
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

// TestRaftTLSReloadsOnSIGHUP: the Raft port's mutual-TLS certificate is
// renewed in place and SIGHUP sent; the next connection to the Raft port
// is served the renewed certificate.
func TestRaftTLSReloadsOnSIGHUP(t *testing.T) {
	guard := make(chan os.Signal, 1)
	signal.Notify(guard, syscall.SIGHUP)
	defer signal.Stop(guard)

	dir := t.TempDir()
	cfg := filepath.Join(dir, "rolter.toml")
	if err := os.WriteFile(cfg, []byte("[[providers]]\nname = \"e\"\napi_base = \"http://127.0.0.1:9/v1\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := certstest.NewCA(t, "cluster")
	raftLeaf, peer := ca.Valid(t, "raft"), ca.Valid(t, "peer")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	raftAddr := ln.Addr().String()
	ln.Close()

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"router", "--config", cfg, "--http", "127.0.0.1:0", "--admin", "127.0.0.1:0",
			"--node-id", "r1", "--raft", raftAddr, "--data-dir", filepath.Join(dir, "data"),
			"--tls-cert", raftLeaf.Cert, "--tls-key", raftLeaf.Key, "--tls-ca", ca.CertPEM}, outW, io.Discard)
		outW.Close()
	}()
	if _, err := bufio.NewReader(outR).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, outR) }()

	pair, err := tls.LoadX509KeyPair(peer.Cert, peer.Key)
	if err != nil {
		t.Fatal(err)
	}
	served := func() (*x509.Certificate, error) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", raftAddr,
			&tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS13})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0], nil
	}
	if got, err := served(); err != nil || got.SerialNumber.Cmp(raftLeaf.Serial) != 0 {
		t.Fatalf("raft port before the reload: %v %v, want serial %v", got, err, raftLeaf.Serial)
	}
	renewed := ca.Valid(t, "raft")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := served()
		if err == nil && got.SerialNumber.Cmp(renewed.Serial) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the raft port still serves %v (%v) 10s after SIGHUP, want serial %v", got, err, renewed.Serial)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("router did not stop")
	}
}
